"""Loading user scoring functions by `package.module:name` or file path, and reading what they return."""

import math

import numpy as np
import pytest

from skyrl_train.rewards.functions import RewardFunctionError, load_reward_function, parse_score, split_function_spec

SCORER = """
def exact(data_source, solution_str, ground_truth, extra_info):
    return float(solution_str.strip() == str(ground_truth))

NOT_A_FUNCTION = 3
"""


def test_file_and_module_specs_load_the_named_function(tmp_path, monkeypatch):
    (tmp_path / "my_scorer.py").write_text(SCORER)
    by_file = load_reward_function(f"{tmp_path / 'my_scorer.py'}:exact")
    assert by_file(data_source="d", solution_str=" 4 ", ground_truth=4, extra_info={}) == 1.0
    monkeypatch.syspath_prepend(str(tmp_path))
    by_module = load_reward_function("my_scorer:exact")
    assert by_module(data_source="d", solution_str="5", ground_truth=4, extra_info={}) == 0.0


def test_two_files_with_the_same_name_do_not_replace_each_other(tmp_path):
    for name, value in (("a", 1.0), ("b", 2.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "scorer.py").write_text(f"def fn(**kwargs):\n    return {value}\n")
    first = load_reward_function(f"{tmp_path / 'a' / 'scorer.py'}:fn")
    second = load_reward_function(f"{tmp_path / 'b' / 'scorer.py'}:fn")
    assert (first(), second()) == (1.0, 2.0)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_colon", "must look like"),
        ("module:not-an-identifier", "must look like"),
        ("/nowhere/scorer.py:fn", "does not exist"),
        ("skyrl_no_such_module_xyz:fn", "is not importable"),
        ("math:no_such_function", "has no function 'no_such_function'"),
        ("math:pi", r"found float"),
    ],
)
def test_bad_specs_name_reward_function(spec, message):
    with pytest.raises(RewardFunctionError, match=message) as info:
        load_reward_function(spec)
    assert "reward.function" in str(info.value)


def test_errors_inside_the_users_module_propagate_unchanged(tmp_path):
    (tmp_path / "broken.py").write_text("import skyrl_module_that_does_not_exist\n")
    with pytest.raises(ModuleNotFoundError, match="skyrl_module_that_does_not_exist"):
        load_reward_function(f"{tmp_path / 'broken.py'}:fn")


def test_split_function_spec_keeps_colons_in_the_target():
    assert split_function_spec("/a:b/file.py:fn") == ("/a:b/file.py", "fn")


def test_parse_score_reads_numbers_and_dicts():
    assert parse_score(1) == (1.0, {})
    assert parse_score(True) == (1.0, {})
    assert parse_score(np.float32(0.5)) == (0.5, {})
    score, extras = parse_score({"score": 0.25, "acc": True, "pred": "42", "length": 7})
    assert score == 0.25 and extras == {"acc": 1.0, "length": 7.0}


@pytest.mark.parametrize(
    "result, message",
    [
        (None, r"returned None \(NoneType\)"),
        ("1.0", "returned '1.0' \\(str\\)"),
        ({"reward": 1.0}, "without a 'score' key"),
        (math.nan, "non-finite"),
        ({"score": math.inf}, "non-finite"),
    ],
)
def test_parse_score_refuses_what_is_not_a_score(result, message):
    with pytest.raises(RewardFunctionError, match=message):
        parse_score(result)
