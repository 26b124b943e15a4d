"""SkyRL's multiply example: the env's rewards and feedback, the dataset script's rows, and both entrypoint module
paths registering the env so a config naming it passes `--dry-run`."""

import runpy
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import skyrl_gym

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the examples.* module paths resolve from the repo root, as upstream's scripts run

from examples.multiply.multiply_dataset import main as write_dataset  # noqa: E402
from examples.multiply.multiply_env import ENV_ID, FORMAT_HINT, register_env  # noqa: E402


def _env(truth="391", **extras):
    register_env()
    env = skyrl_gym.make(ENV_ID, env_config={}, extras={"reward_spec": {"ground_truth": truth}, **extras})
    env.init([{"role": "user", "content": "17 * 23"}])
    return env


def test_the_right_boxed_product_ends_the_episode_with_reward_one():
    out = _env(truth=391).step("17 * 23 = 391, so \\boxed{ 391 }")
    assert (out["reward"], out["done"], out["metadata"]["parsed_answer"]) == (1.0, True, "391")


def test_wrong_turns_get_feedback_until_the_last_which_scores_the_format():
    env = _env(max_turns=3)
    first = env.step("I think it is 400")
    assert (first["reward"], first["done"]) == (0.0, False)
    assert first["observations"] == [{"role": "user", "content": FORMAT_HINT}]
    second = env.step("\\boxed{381}")
    assert (second["reward"], second["done"]) == (0.0, False)
    assert second["observations"][0]["content"] == "Your answer '381' is incorrect. Please try again."
    last = env.step("\\boxed{390}")
    assert (last["reward"], last["done"], last["observations"]) == (0.5, True, [])
    unboxed = _env(max_turns=1).step("390")
    assert (unboxed["reward"], unboxed["done"]) == (0.0, True)
    assert _env().max_turns == 5  # SkyRL's default when the generator passes none


def test_a_missing_or_empty_product_is_refused_by_name():
    with pytest.raises(ValueError, match="reward_spec.ground_truth must be the product"):
        _env(truth=" ")


def test_dataset_rows_name_the_env_and_hold_the_product(tmp_path, capsys):
    assert (
        write_dataset(["--output_dir", str(tmp_path), "--num_digits", "3", "--train_size", "5", "--test_size", "2"])
        == 0
    )
    train = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert len(train) == 5 and len(pq.read_table(tmp_path / "validation.parquet").to_pylist()) == 2
    for row in train:
        first, second = (int(n) for n in row["prompt"][1]["content"].split(" * "))
        assert 100 <= first <= 999 and 100 <= second <= 999
        assert row["env_class"] == "multiply" and row["reward_spec"]["ground_truth"] == str(first * second)
        env = _env(truth=row["reward_spec"]["ground_truth"])
        assert env.step(f"\\boxed{{{first * second}}}")["reward"] == 1.0


def _dry_run(module, monkeypatch, capsys):
    monkeypatch.setattr(
        sys, "argv", [module, "environment.env_class=multiply", "trainer.resume_mode=null", "--dry-run"]
    )
    code = 0
    try:
        runpy.run_module(module, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr()


@pytest.mark.parametrize("module", ["examples.multiply.main_multiply", "examples.train.multiply.main_multiply"])
def test_both_module_paths_register_the_env_for_the_run(module, monkeypatch, capsys):
    if ENV_ID in skyrl_gym.registry:
        skyrl_gym.deregister(ENV_ID)
    code, captured = _dry_run("skyrl.train.entrypoints.main_base", monkeypatch, capsys)
    assert code == 2 and "multiply" in captured.err  # not registered: main_base refuses the env class
    code, captured = _dry_run(module, monkeypatch, capsys)
    assert code == 0, captured.err
    assert '  env_class: "multiply"\n' in captured.out
