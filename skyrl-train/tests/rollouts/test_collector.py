"""`RolloutCollector`: DAPO soft overlong punishment, and `replace` and `filter` dynamic sampling over rounds.

The tests drive `RolloutCollector` with a small scripted generator (a user-style `GeneratorInterface`
whose rewards are fixed by the prompt), because the collector's decisions depend only on the rewards; the real
generator, engines and envs run in the Ray trainer tests (tests/trainer/test_dynamic_sampling.py).
"""

import asyncio

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.types import GeneratorInput, GeneratorOutput
from skyrl_train.rollouts import DynamicSampling, DynamicSamplingError, RolloutCollector, apply_overlong_punishment


def test_soft_overlong_punishment_is_added_on_the_last_generated_token(make_trajectory):
    # max 8 tokens, buffer 4: no penalty up to 4 tokens, then (4 - length) / 4, reaching -1 at 8 tokens
    batch = [make_trajectory("a", 1.0, length) for length in (3, 5, 8)]
    batch[1].loss_mask = [1, 1, 1, 1, 0]  # an observation token does not count as generated (4 generated: no penalty)
    batch.append(make_trajectory("b", 1.0, 6, env_error={"kind": "exception"}))  # failed trajectories are left alone
    metrics = apply_overlong_punishment(batch, max_response_len=8, buffer_len=4, penalty_factor=0.5)
    assert [t.reward for t in batch] == pytest.approx([1.0, 1.0, 0.5, 1.0])
    assert batch[2].token_rewards == pytest.approx([0.0] * 7 + [0.5])
    assert metrics["reward/overlong_penalized"] == 1.0
    assert metrics["reward/overlong_penalty_mean"] == pytest.approx(-0.5 / 4)


class _ScriptedGenerator(GeneratorInterface):
    """Each prompt's content names its samples' rewards, e.g. "0,1" (mixed) or "1,1" (all right)."""

    def __init__(self, make_trajectory):
        self.make_trajectory = make_trajectory
        self.calls: list[GeneratorInput] = []

    async def generate(self, generator_input: GeneratorInput) -> GeneratorOutput:
        self.calls.append(generator_input)
        seen: dict[str, int] = {}
        trajectories = []
        for uid, prompt in zip(generator_input.uids, generator_input.prompts):
            rewards = [float(x) for x in prompt[0]["content"].split(",")]
            index = seen.get(uid, 0)
            seen[uid] = index + 1
            trajectories.append(self.make_trajectory(uid, rewards[index % len(rewards)], length=3))
        return GeneratorOutput(trajectories, {"generate/reward_mean": 0.0})


@pytest.fixture
def scripted_collector(make_trajectory):
    """`scripted_collector(batches, *overrides)`: `(collect, generator)`, a collector over a `_ScriptedGenerator` that
    draws each further batch of items from `batches[1:]`."""
    return lambda batches, *overrides: _collector(make_trajectory, batches, *overrides)


def _collector(make_trajectory, batches, *overrides):
    cfg = SkyRLConfig.from_cli_overrides(
        ["trainer.train_batch_size=2", "generator.n_samples_per_prompt=2", "trainer.policy_mini_batch_size=2"]
        + list(overrides),
        validate=False,
    )
    generator = _ScriptedGenerator(make_trajectory)
    queue = list(batches[1:])

    def make_input(items, round_index):
        repeated = [item for item in items for _ in range(2)]
        return GeneratorInput(
            prompts=[[{"role": "user", "content": item["rewards"]}] for item in repeated],
            env_classes=["t"] * len(repeated),
            env_extras=[{} for _ in repeated],
            uids=[f"{round_index}/{item['uid']}" for item in repeated],
        )

    collector = RolloutCollector(cfg, generator, DynamicSampling(cfg))

    def collect(items):
        return asyncio.run(collector.collect(items, make_input, lambda: queue.pop(0) if queue else None))

    return collect, generator


def _items(*rewards):
    return [{"uid": str(i), "rewards": r} for i, r in enumerate(rewards)]


def test_filter_generates_until_the_batch_is_full_of_informative_groups(scripted_collector):
    batches = [_items("1,1", "0,1"), _items("0,0", "0,0"), _items("1,0", "0,1")]
    collect, generator = scripted_collector(batches, "trainer.algorithm.dynamic_sampling.type=filter")
    rollouts = collect(batches[0])
    assert len(generator.calls) == 3 and rollouts.rounds == 3 and rollouts.sampled_groups == 6
    # kept: round 0's mixed group, then round 2's first mixed group; round 2's second group is surplus
    assert [t.uid for t in rollouts.output.trajectories] == ["0/1", "0/1", "2/0", "2/0"]
    metrics = rollouts.output.metrics
    assert metrics["dynamic_sampling/rounds"] == 3.0 and metrics["dynamic_sampling/kept_groups"] == 2.0
    assert metrics["dynamic_sampling/sampled_groups"] == 6.0


def test_filter_stops_with_a_clear_error_after_max_sample_batches(scripted_collector):
    batches = [_items("1,1", "0,0")] * 3
    collect, _ = scripted_collector(
        batches,
        "trainer.algorithm.dynamic_sampling.type=filter",
        "trainer.algorithm.dynamic_sampling.max_sample_batches=2",
    )
    with pytest.raises(DynamicSamplingError, match="max_sample_batches=2"):
        collect(batches[0])


def test_filter_trains_on_what_it_has_when_the_data_runs_out(scripted_collector):
    batches = [_items("1,1", "0,1")]
    collect, _ = scripted_collector(batches, "trainer.algorithm.dynamic_sampling.type=filter")
    rollouts = collect(batches[0])
    assert [t.uid for t in rollouts.output.trajectories] == ["0/1", "0/1"]


def test_replace_samples_another_batch_when_too_few_groups_are_informative(scripted_collector):
    batches = [_items("1,1", "0,0"), _items("0,1", "1,1")]
    collect, generator = scripted_collector(
        batches,
        "trainer.algorithm.dynamic_sampling.type=replace",
        "trainer.algorithm.dynamic_sampling.min_replace_ratio=0.3",
    )
    rollouts = collect(batches[0])
    assert len(generator.calls) == 2 and rollouts.sampled_groups == 4
    assert [t.uid for t in rollouts.output.trajectories] == ["1/0", "1/0", "1/0#copy1", "1/0#copy1"]
    assert rollouts.output.metrics["dynamic_sampling/replaced_groups"] == 1.0


def test_no_dynamic_sampling_generates_once_and_shapes_rewards(scripted_collector):
    batches = [_items("1,1", "0,0")]
    collect, generator = scripted_collector(
        batches,
        "trainer.algorithm.overlong_buffer.enabled=true",
        "trainer.algorithm.overlong_buffer.length=2",
        "generator.sampling_params.max_generate_length=3",
    )
    rollouts = collect(batches[0])
    assert len(generator.calls) == 1 and rollouts.rounds == 1
    # 3 generated tokens of a 3-token budget with a 2-token buffer: penalty (1 - 3) / 2 = -1
    assert [t.reward for t in rollouts.output.trajectories] == pytest.approx([0.0, 0.0, -1.0, -1.0])
    assert rollouts.output.metrics["reward/overlong_penalized"] == 4.0  # shaping metrics reach the step's metrics


def test_replace_trains_on_the_last_batch_as_it_is_when_the_data_runs_out(scripted_collector):
    batches = [_items("1,1", "0,0")]
    collect, generator = scripted_collector(batches, "trainer.algorithm.dynamic_sampling.type=replace")
    rollouts = collect(batches[0])
    assert len(generator.calls) == 1 and [t.reward for t in rollouts.output.trajectories] == [1.0, 1.0, 0.0, 0.0]
    assert rollouts.output.metrics["dynamic_sampling/replaced_groups"] == 0.0
