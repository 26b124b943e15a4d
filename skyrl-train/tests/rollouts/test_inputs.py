"""`make_generator_input`: seeds and uids from explicit arguments, worked by hand."""

from skyrl_train.rollouts.inputs import (
    FULLY_ASYNC_SEED_KEY,
    group_uid_prefix,
    make_generator_input,
    row_seeds,
    step_uid_prefix,
)

ITEMS = [
    {"prompt": [{"role": "user", "content": "p"}], "env_class": "e", "env_extras": {"x": 1}, "uid": "7"},
    {"prompt": [{"role": "user", "content": "q"}], "env_class": "e", "env_extras": {"x": 2}, "uid": "8"},
]


def test_seeds_follow_the_documented_formula():
    # base 2, key 3, round 1: 2 * 1_000_003 + 3 * 100_003 + 7_919_009 = 9_919_015 + 300_009 = 10_219_024
    assert row_seeds(2, 3, 1, 3) == [10_219_024, 10_219_125, 10_219_226]
    assert row_seeds(None, 3, 1, 3) is None
    # wraps at 2^31
    assert row_seeds(0, 30_000, 0, 1) == [(30_000 * 100_003) % 2**31]


def test_each_prompt_is_repeated_with_its_own_row_seed_and_a_shared_uid():
    gi = make_generator_input(ITEMS, 2, 5, 4, 0, step_uid_prefix(4), {"global_step": 4})
    assert gi.uids == ["4/7", "4/7", "4/8", "4/8"]
    assert gi.seeds == row_seeds(5, 4, 0, 4) and len(set(gi.seeds)) == 4
    assert [extras["x"] for extras in gi.env_extras] == [1, 1, 2, 2]
    gi.env_extras[0]["x"] = 99  # each row gets its own copy of the extras
    assert ITEMS[0]["env_extras"]["x"] == 1 and gi.env_extras[1]["x"] == 1
    assert gi.batch_metadata == {"global_step": 4}


def test_prefixes_name_the_step_round_or_group():
    assert (step_uid_prefix(3), step_uid_prefix(3, 2), group_uid_prefix(11)) == ("3/", "3.2/", "g11/")


def test_a_fully_async_group_draws_far_from_every_step():
    group = row_seeds(0, FULLY_ASYNC_SEED_KEY + 5, 0, 1)[0]
    assert group not in {row_seeds(0, step, 0, 1)[0] for step in range(1000)}
