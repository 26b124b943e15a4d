"""DAPO pieces wired into the Ray trainer (tiny model, 2 FSDP2 ranks, real engines and generator): dynamic sampling
`filter` trains only on groups with reward variance, `replace` fills the batch with copies, and the soft overlong
punishment reaches the rewards the advantages see. The async trainers do the same, and a killed one_step_off run
with `filter` resumes without losing or repeating the prompts its extra generation batches drew."""

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import skyrl_gym
from skyrl_gym import BaseTextEnv
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.rollouts import DynamicSamplingError

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class ParityEnv(BaseTextEnv):
    """Reward 1 when the response has an even number of characters: the random tiny model gets mixed groups."""

    def _step(self, action):
        return {"observations": [], "reward": float(len(action) % 2 == 0), "done": True}


class HalfParityEnv(BaseTextEnv):
    """Parity rewards on prompts whose answer is even, 0 on every sample otherwise: about half the groups carry no
    signal, so dynamic sampling always has groups to leave out."""

    def _step(self, action):
        reward = float(len(action) % 2 == 0) if int(self.ground_truth()) % 2 == 0 else 0.0
        return {"observations": [], "reward": reward, "done": True}


class NoSignalEnv(BaseTextEnv):
    """Reward 0 on every sample: no group ever has reward variance."""

    def _step(self, action):
        return {"observations": [], "reward": 0.0, "done": True}


@pytest.fixture(scope="module", autouse=True)
def parity_env():
    skyrl_gym.register("parity_test", ParityEnv)
    skyrl_gym.register("half_parity_test", HalfParityEnv)
    skyrl_gym.register("no_signal_test", NoSignalEnv)
    yield
    skyrl_gym.deregister("parity_test")
    skyrl_gym.deregister("half_parity_test")
    skyrl_gym.deregister("no_signal_test")


def _with_env(data_dir, path, env_class):
    for name in ("train.parquet", "test.parquet"):
        table = pq.read_table(data_dir / name)
        column = table.schema.get_field_index("env_class")
        table = table.set_column(column, "env_class", pa.array([env_class] * table.num_rows))
        pq.write_table(table, path / name)
    return path


@pytest.fixture(scope="module")
def parity_data_dir(data_dir, tmp_path_factory):
    """The arithmetic prompts with their rows pointing at the parity env."""
    return _with_env(data_dir, tmp_path_factory.mktemp("parity_data"), "parity_test")


@pytest.fixture(scope="module")
def half_parity_data_dir(data_dir, tmp_path_factory):
    """The arithmetic prompts with their rows pointing at the half-parity env."""
    return _with_env(data_dir, tmp_path_factory.mktemp("half_parity_data"), "half_parity_test")


@pytest.fixture(scope="module")
def run_on_parity(make_config, spread_tiny_model_dir, parity_data_dir):
    """`run_on_parity(out_dir, *overrides)`: a synchronous run of the tiny model on the parity prompts; its result."""

    def run(out_dir, *overrides):
        return BasePPOExp(make_config(spread_tiny_model_dir, parity_data_dir, out_dir, *overrides)).run()

    return run


def _step_metrics(result, step):
    return {key: dict(values).get(step) for key, values in result.history.items()}


def _last(result, key):
    return result.history[key][-1][1]


def _history(result, key):
    return [value for _, value in result.history[key]]


def test_filter_trains_on_full_batches_of_informative_groups(ray_cluster, run_on_parity, tmp_path):
    result = run_on_parity(tmp_path, "trainer.algorithm.dynamic_sampling.type=filter", "trainer.max_training_steps=2")
    assert result.global_step == 2
    for step in (1, 2):
        metrics = _step_metrics(result, step)
        assert metrics["dynamic_sampling/kept_groups"] == 4.0  # trainer.train_batch_size
        assert metrics["reward/groups_with_signal"] == 1.0  # every trained group has reward variance
        assert metrics["dynamic_sampling/sampled_groups"] == 4.0 * metrics["dynamic_sampling/rounds"]
    assert _last(result, "trainer/sampled_groups_total") == sum(
        v for _, v in result.history["dynamic_sampling/sampled_groups"]
    )


def test_replace_and_overlong_punishment_reach_the_trained_batch(ray_cluster, run_on_parity, tmp_path):
    result = run_on_parity(
        tmp_path,
        "trainer.algorithm.dynamic_sampling.type=replace",
        "trainer.algorithm.dynamic_sampling.min_replace_ratio=0.1",
        "trainer.algorithm.overlong_buffer.enabled=true",
        "trainer.algorithm.overlong_buffer.length=4",
        "trainer.algorithm.overlong_buffer.penalty_factor=0.5",
    )
    assert _last(result, "reward/groups_with_signal") == 1.0  # uninformative groups were replaced by copies
    replaced = _last(result, "dynamic_sampling/replaced_groups")
    assert _last(result, "dynamic_sampling/kept_groups") + replaced == 4.0
    # max_generate_length 6 and a 4-token buffer: responses of 3..6 tokens lose up to 0.5
    assert _last(result, "reward/overlong_penalty_mean") < 0.0


ASYNC = ("generator.inference_engine.num_engines=1", "trainer.max_training_steps=3")


@pytest.mark.parametrize(
    "mode, kind", [("fully_async", "filter"), ("fully_async", "replace"), ("one_step_off", "replace")]
)
def test_the_async_trainers_train_only_on_informative_groups(
    ray_cluster, make_config, spread_tiny_model_dir, half_parity_data_dir, tmp_path, mode, kind
):
    cfg = make_config(
        spread_tiny_model_dir,
        half_parity_data_dir,
        tmp_path,
        f"trainer.mode={mode}",
        f"trainer.algorithm.dynamic_sampling.type={kind}",
        *ASYNC,
        colocate=False,
    )
    experiment = BasePPOExp(cfg)
    result = experiment.run()
    assert result.global_step == 3
    sampled = 0.0
    for step in (1, 2, 3):
        metrics = _step_metrics(result, step)
        assert metrics["reward/groups_with_signal"] == 1.0  # every trained group has reward variance
        assert metrics["dynamic_sampling/kept_groups"] + metrics["dynamic_sampling/replaced_groups"] == 4.0
        sampled += metrics["dynamic_sampling/sampled_groups"]
    assert _last(result, "trainer/sampled_groups_total") == sampled
    used = [uid for step in experiment.trainer.used_uids for uid in step]
    assert len(used) == len(set(used)) == sampled  # each sampled prompt used up once, left out or trained
    if kind == "filter":  # about half the prompts give a group without signal: some were left out
        assert sampled > 3 * 4 and sum(_history(result, "dynamic_sampling/replaced_groups")) == 0


def test_a_killed_one_step_off_run_with_filter_resumes_without_losing_or_repeating_prompts(
    ray_cluster, make_config, spread_tiny_model_dir, half_parity_data_dir, tmp_path
):
    steps = (
        "trainer.mode=one_step_off",
        "trainer.algorithm.dynamic_sampling.type=filter",
        "generator.inference_engine.num_engines=1",
        "trainer.ckpt_interval=1",
    )
    first = BasePPOExp(
        make_config(
            spread_tiny_model_dir,
            half_parity_data_dir,
            tmp_path,
            *steps,
            "trainer.max_training_steps=3",
            colocate=False,
        )
    )
    first.run()
    # "killed after step 2": batch 3 (with every extra batch its filter drew) was generated, not trained
    shutil.rmtree(tmp_path / "ckpts" / "global_step_3")
    (tmp_path / "ckpts" / "latest_checkpointed_step.txt").write_text("2")
    saved = json.loads((tmp_path / "ckpts" / "global_step_2" / "trainer_state.json").read_text())
    pending = {str(item["uid"]) for item in saved["extra"]["pending_prompts"]}
    assert pending == set(first.trainer.used_uids[2])  # the step-3 prompts, extra batches included, were held
    resumed = BasePPOExp(
        make_config(
            spread_tiny_model_dir,
            half_parity_data_dir,
            tmp_path,
            *steps,
            "trainer.max_training_steps=4",
            "trainer.resume_mode=latest",
            colocate=False,
        )
    )
    result = resumed.run()
    assert result.global_step == 4 and _step_metrics(result, 4)["dynamic_sampling/kept_groups"] == 4.0
    before = [uid for step in first.trainer.used_uids[:2] for uid in step]
    after = [uid for step in resumed.trainer.used_uids for uid in step]
    assert len(after) == len(set(after)) and not set(before) & set(after)  # nothing used twice
    still_held = {str(item["uid"]) for item in resumed.trainer.state()["pending_prompts"]}
    assert pending <= set(after) | still_held  # nothing lost: the held prompts were generated again first


def test_fully_async_filter_gives_up_after_max_sample_batches_saying_so(
    ray_cluster, make_config, spread_tiny_model_dir, data_dir, tmp_path
):
    cfg = make_config(
        spread_tiny_model_dir,
        _with_env(data_dir, tmp_path, "no_signal_test"),
        tmp_path,
        "trainer.mode=fully_async",
        "trainer.algorithm.dynamic_sampling.type=filter",
        "trainer.algorithm.dynamic_sampling.max_sample_batches=2",
        *ASYNC,
        colocate=False,
    )
    with pytest.raises(DynamicSamplingError, match=r"kept 0 of the 4 prompt groups .*max_sample_batches=2"):
        BasePPOExp(cfg).run()
