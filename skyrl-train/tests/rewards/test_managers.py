"""The naive, batch and parallel reward managers on a user function written to a file."""

import types

import pytest

from skyrl_train.rewards.functions import RewardFunctionError, load_reward_function
from skyrl_train.rewards.managers import (
    BatchRewardManager,
    NaiveRewardManager,
    ParallelRewardManager,
    ScoreRequest,
    make_reward_manager,
)


def _requests(*items):
    return [ScoreRequest(data_source=d, solution_str=s, ground_truth="4", extra_info=e) for d, s, e in items]


def test_naive_calls_once_per_response_and_reports_failures(scorer_file):
    manager = NaiveRewardManager(load_reward_function(f"{scorer_file}:score"))
    outcomes = manager.score(
        _requests(
            ("math", "4", {}), ("math", "5", {}), ("math", "4", {"kind": "raise"}), ("m", "4", {"kind": "bad_type"})
        )
    )
    assert [o.status for o in outcomes] == ["ok", "ok", "error", "error"]
    assert [o.score for o in outcomes[:2]] == [1.0, 0.0]
    assert outcomes[0].extras["length"] == 1.0
    assert outcomes[2].reason == "ValueError: cannot parse the answer"
    assert "returned 'one' (str)" in outcomes[3].reason


def test_batch_calls_once_with_lists(scorer_file):
    calls = []
    function = load_reward_function(f"{scorer_file}:batch_score")

    def counted(**kwargs):
        calls.append(kwargs)
        return function(**kwargs)

    manager = BatchRewardManager(counted)
    outcomes = manager.score(_requests(("math", "4", None), ("bonus", "4", None), ("bonus", "3", None)))
    assert [o.score for o in outcomes] == [1.0, 1.5, 0.5]
    assert len(calls) == 1 and calls[0]["solution_strs"] == ["4", "4", "3"]
    assert set(calls[0]) == {"data_sources", "solution_strs", "ground_truths", "extra_infos"}
    assert manager.score([]) == [] and len(calls) == 1


def test_batch_failures_fail_every_row_and_a_wrong_length_raises(scorer_file):
    manager = BatchRewardManager(load_reward_function(f"{scorer_file}:batch_score"))
    outcomes = manager.score(_requests(("m", "4", None), ("m", "raise", None)))
    assert [o.status for o in outcomes] == ["error", "error"]
    assert outcomes[0].reason == "RuntimeError: the batch scorer failed"
    with pytest.raises(RewardFunctionError, match="one score per response; it got 2 responses and returned 1"):
        manager.score(_requests(("m", "4", None), ("m", "short", None)))


@pytest.mark.integration
def test_parallel_scores_in_processes_with_timeouts_and_errors(scorer_file):
    manager = ParallelRewardManager(f"{scorer_file}:score", num_workers=2, timeout_s=1.0)
    try:
        outcomes = manager.score(
            _requests(
                ("m", "4", {}),
                ("m", "4", {"kind": "sleep", "seconds": 600}),
                ("m", "4", {"kind": "raise"}),
                ("m", "5", {}),
            )
        )
    finally:
        manager.close()
    assert [o.status for o in outcomes] == ["ok", "timeout", "error", "ok"]
    assert [outcomes[0].score, outcomes[3].score] == [1.0, 0.0]
    assert "reward.timeout_s=1.0" in outcomes[1].reason and outcomes[1].score is None
    assert outcomes[2].reason == "ValueError: cannot parse the answer"


def test_make_reward_manager_follows_the_config(scorer_file):
    config = types.SimpleNamespace(manager="env", function=None, num_workers=1, timeout_s=1.0)
    assert make_reward_manager(config) is None
    config.manager, config.function = "naive", f"{scorer_file}:score"
    assert isinstance(make_reward_manager(config), NaiveRewardManager)
    config.manager, config.function = "batch", f"{scorer_file}:batch_score"
    assert isinstance(make_reward_manager(config), BatchRewardManager)
    config.function = None
    with pytest.raises(ValueError, match="reward.manager=batch needs reward.function"):
        make_reward_manager(config)
