"""DAPO pieces wired into the Ray trainer (tiny model, 2 FSDP2 ranks, real engines and generator): dynamic sampling
`filter` trains only on groups with reward variance, `replace` fills the batch with copies, and the soft overlong
punishment reaches the rewards the advantages see."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import skyrl_gym
from skyrl_gym import BaseTextEnv
from skyrl_train.entrypoints.main_base import BasePPOExp

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class ParityEnv(BaseTextEnv):
    """Reward 1 when the response has an even number of characters: the random tiny model gets mixed groups."""

    def _step(self, action):
        return {"observations": [], "reward": float(len(action) % 2 == 0), "done": True}


@pytest.fixture(scope="module", autouse=True)
def parity_env():
    skyrl_gym.register("parity_test", ParityEnv)
    yield
    skyrl_gym.deregister("parity_test")


@pytest.fixture(scope="module")
def parity_data_dir(data_dir, tmp_path_factory):
    """The arithmetic prompts with their rows pointing at the parity env."""
    path = tmp_path_factory.mktemp("parity_data")
    for name in ("train.parquet", "test.parquet"):
        table = pq.read_table(data_dir / name)
        column = table.schema.get_field_index("env_class")
        table = table.set_column(column, "env_class", pa.array(["parity_test"] * table.num_rows))
        pq.write_table(table, path / name)
    return path


def _run(make_config, model_dir, data_dir, out_dir, *extra):
    return BasePPOExp(make_config(model_dir, data_dir, out_dir, *extra)).run()


def _last(result, key):
    return result.history[key][-1][1]


def test_filter_trains_on_full_batches_of_informative_groups(
    ray_cluster, make_config, tiny_model_dir, parity_data_dir, tmp_path
):
    result = _run(
        make_config,
        tiny_model_dir,
        parity_data_dir,
        tmp_path,
        "trainer.algorithm.dynamic_sampling.type=filter",
        "trainer.max_training_steps=2",
    )
    assert result.global_step == 2
    for step in (1, 2):
        metrics = {key: dict(values).get(step) for key, values in result.history.items()}
        assert metrics["dynamic_sampling/kept_groups"] == 4.0  # trainer.train_batch_size
        assert metrics["reward/groups_with_signal"] == 1.0  # every trained group has reward variance
        assert metrics["dynamic_sampling/sampled_groups"] == 4.0 * metrics["dynamic_sampling/rounds"]
    assert _last(result, "trainer/sampled_groups_total") == sum(
        v for _, v in result.history["dynamic_sampling/sampled_groups"]
    )


def test_replace_and_overlong_punishment_reach_the_trained_batch(
    ray_cluster, make_config, tiny_model_dir, parity_data_dir, tmp_path
):
    result = _run(
        make_config,
        tiny_model_dir,
        parity_data_dir,
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
