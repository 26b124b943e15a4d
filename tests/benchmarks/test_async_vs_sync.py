"""The envs and the models of benchmarks/async_vs_sync.py, against the real bundled search server (no delay)."""

import argparse
import importlib.util
from pathlib import Path

import pytest

from skyrl_gym.envs.synthetic.generate import generate_splits

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("async_vs_sync", REPO / "benchmarks" / "async_vs_sync.py")
async_vs_sync = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(async_vs_sync)


@pytest.fixture(scope="module")
def search_server(tmp_path_factory):
    process = async_vs_sync.start_search_server(tmp_path_factory.mktemp("search"), "0")
    yield
    process.terminate()
    process.wait(timeout=10)


def _env(turns: int):
    row = generate_splits("addition", train_size=1, test_size=1, difficulty=2, seed=0, progress=False)["train"][0]
    env = async_vs_sync.CheckedAdditionEnv(env_config={}, extras={**row, "max_turns": turns})
    env.init(row["prompt"])
    return env, row


def test_each_right_answer_earns_its_share_and_the_next_question_reads_as_the_warm_start_wrote_it(search_server):
    env, row = _env(turns=3)
    first = row["extra_info"]["answer"]
    out = env.step(first)
    assert out["reward"] == pytest.approx(1 / 3) and not out["done"]
    (note,) = out["observations"]
    question = note["content"].rsplit("\n", 1)[1]
    # after a right answer the env shows exactly what the multi-turn model was warm-started on
    assert note["content"] == async_vs_sync.FOLLOW_UP.format(previous_answer=first, question=question)
    a, b = (int(x) for x in question.removesuffix("=").split("+"))
    out = env.step("0" if a + b else "1")  # wrong: no reward, the episode goes on
    assert out["reward"] == 0.0 and not out["done"]
    last = out["observations"][0]["content"].rsplit("\n", 1)[1]
    a, b = (int(x) for x in last.removesuffix("=").split("+"))
    out = env.step(str(a + b))
    assert out["reward"] == pytest.approx(1 / 3) and out["done"] and out["observations"] == []


def test_the_later_questions_are_fixed_by_the_row(search_server):
    shown = []
    for _ in range(2):
        env, row = _env(turns=2)
        shown.append(env.step(row["extra_info"]["answer"])["observations"][0]["content"])
    assert shown[0] == shown[1]


def test_multi_turn_configs_train_a_model_warm_started_on_their_episodes():
    single, two, four = (
        async_vs_sync.model_for(async_vs_sync.CONFIGS[name]) for name in ("plain", "tool-wait", "tool-wait-4")
    )
    assert single is async_vs_sync.MODEL and single.turns == 1
    assert (two.turns, four.turns) == (2, 4) and two.follow_up == four.follow_up == async_vs_sync.FOLLOW_UP


def test_overrides_reach_every_run_and_a_bad_one_stops_the_benchmark_before_it_starts(tmp_path, capsys):
    config = async_vs_sync.CONFIGS["plain"]
    for mode in ("sync", "one_step_off"):
        cfg = async_vs_sync.run_config(
            "model", tmp_path, tmp_path, config, mode, 5, ["trainer.policy.optimizer.lr=2e-4"]
        )
        assert cfg.trainer.policy.optimizer.lr == 2e-4  # the user's value wins over the shared 1e-4
    parser = argparse.ArgumentParser()
    args = argparse.Namespace(
        configs=["plain"], modes=["sync", "one_step_off"], steps=5, overrides=["trainer.policy.optimizr.lr=1e-4"]
    )
    with pytest.raises(SystemExit):
        async_vs_sync.check_overrides(parser, args)
    assert "has no field 'optimizr'" in capsys.readouterr().err


def test_the_latency_bound_config_is_four_turns_on_its_own_slower_api_with_the_four_turn_model():
    config = async_vs_sync.CONFIGS["latency-bound"]
    assert (config.env_class, config.turns, config.delay_ms) == ("checked_addition", 4, "200-1000")
    assert async_vs_sync.model_for(config) == async_vs_sync.model_for(async_vs_sync.CONFIGS["tool-wait-4"])
    # each step waits on an HTTP call, so the episodes must run on env threads, not one after another
    assert not async_vs_sync.CheckedAdditionEnv.nonblocking and not async_vs_sync.GradedAdditionEnv.nonblocking
