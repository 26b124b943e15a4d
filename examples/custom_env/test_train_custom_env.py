"""The user-env training example: the env's rewards worked out by hand, its rows, and a real two-step run whose
rewards and metrics come from the user env."""

import json
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: nothing may be downloaded
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from train_custom_env import (  # noqa: E402
    DATA_SOURCE,
    ENV_ID,
    digit_credit_reward,
    digit_share,
    register_env,
    train_custom_env,
    write_rows,
)

import skyrl_gym  # noqa: E402
from skyrl_gym.envs.synthetic.arithmetic import solve  # noqa: E402
from skyrl_train.dataset import validate_row  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture
def registered():
    register_env()
    yield
    skyrl_gym.deregister(ENV_ID)


@pytest.mark.parametrize(
    "answer, truth, share",
    [
        ("57", "57", 1.0),
        ("47", "57", 0.5),  # tens wrong, units right
        ("157", "57", 2 / 3),  # " 57" vs "157": the extra hundreds digit counts against
        ("-3", "3", 0.5),  # "-3" vs " 3": the sign is a character
        ("0", "10", 0.5),  # " 0" vs "10": units right
        ("98", "12", 0.0),
    ],
)
def test_digit_share_compares_right_aligned_characters(answer, truth, share):
    assert digit_share(answer, truth) == pytest.approx(share)


def test_the_registered_env_scores_partial_credit_and_reports_it(registered):
    def play(response, exact_bonus=0.5, truth="57"):
        env = skyrl_gym.make(
            ENV_ID, env_config={"exact_bonus": exact_bonus}, extras={"reward_spec": {"ground_truth": truth}}
        )
        env.init([{"role": "user", "content": "12+45="}])
        return env.step(response)["reward"], env.get_metrics()

    # 0.5 * digit share 1/2 + 0.5 * not exact = 0.25
    assert play("47<|im_end|>") == (
        pytest.approx(0.25),
        {"turns": 1, "episode_reward": 0.25, "digit_share": 0.5, "exact": False},
    )
    assert play(" 57 <|im_end|>")[0] == 1.0
    assert play("47", exact_bonus=0.0)[0] == pytest.approx(0.5)
    assert play("-7", truth=-7)[0] == 1.0  # an int ground truth works too
    reward, metrics = play("fifty-seven")
    assert reward == 0.0 and metrics["digit_share"] == 0.0 and metrics["exact"] is False


def test_bad_settings_name_the_field(registered):
    with pytest.raises(ValueError, match="ground_truth must be an integer, got 'abc'"):
        skyrl_gym.make(ENV_ID, extras={"reward_spec": {"ground_truth": "abc"}})
    with pytest.raises(ValueError, match=r"exact_bonus must be in \[0, 1\], got 2.0"):
        skyrl_gym.make(ENV_ID, env_config={"exact_bonus": 2}, extras={"reward_spec": {"ground_truth": "1"}})


def test_rows_name_the_user_env_and_carry_the_right_answer(tmp_path):
    paths = write_rows(tmp_path, train_size=20, test_size=5)
    for split, size in (("train", 20), ("test", 5)):
        rows = pq.read_table(paths[split]).to_pylist()
        assert len(rows) == size
        for index, row in enumerate(rows):
            validate_row(row, source=split, index=index)
            assert row["env_class"] == ENV_ID and row["data_source"] == DATA_SOURCE
            question = row["prompt"][0]["content"]
            assert question.endswith("=") and row["reward_spec"]["ground_truth"] == solve(question)


TINY = [
    "trainer.train_batch_size=4",
    "trainer.policy_mini_batch_size=2",
    "generator.n_samples_per_prompt=4",
    "trainer.micro_train_batch_size_per_gpu=4",  # 2 prompts * 4 samples over 2 ranks: one micro-batch per rank
    "trainer.micro_forward_batch_size_per_gpu=8",
    "trainer.max_training_steps=2",
    "trainer.eval_before_train=false",
]


@pytest.fixture
def user_env_deregistered():
    """The run registers the user env in this process; remove it afterwards so later tests see the built-ins."""
    yield
    skyrl_gym.deregister(ENV_ID)


@pytest.mark.integration
@pytest.mark.slow
def test_two_training_steps_use_the_user_env_rewards(own_ray, user_env_deregistered, tmp_path):
    run = train_custom_env(tmp_path, TINY, train_size=16, test_size=8)
    assert run.result.global_step == 2
    history = run.result.history
    rewards = history["reward/mean"]
    env_rewards = history[f"environment/{ENV_ID}/episode_reward"]
    assert [step for step, _ in rewards] == [step for step, _ in env_rewards] == [1, 2]
    for (_, trained_on), (_, from_env) in zip(rewards, env_rewards):
        assert math.isfinite(trained_on) and trained_on == pytest.approx(from_env)  # the trainer used these rewards
    for key in ("policy/loss", "policy/grad_norm", f"environment/{ENV_ID}/digit_share", f"environment/{ENV_ID}/exact"):
        assert all(math.isfinite(value) for _, value in history[key]), key
    assert 0.0 <= run.result.final_eval[f"eval/{DATA_SOURCE}/mean_reward"] <= 1.0
    # every evaluated reply, re-scored with the user's reward function, got exactly the score the run recorded
    dump = tmp_path / "exports" / "dumped_evals" / "global_step_2.jsonl"
    records = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(records) == 8
    for record in records:
        truth = record["env_extras"]["reward_spec"]["ground_truth"]
        assert record["score"] == pytest.approx(digit_credit_reward(record["response"], truth, exact_bonus=0.5))
