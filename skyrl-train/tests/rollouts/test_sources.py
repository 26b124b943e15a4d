"""The rollout sources of the three modes, driven without Ray: which batch each step gets, seeded by what, and what
a fully async source does with stale or uninformative groups. A scripted generator stands in for the engines (the
sources' decisions depend only on the rewards and versions it reports; tests/trainer runs the real stack)."""

import asyncio

from skyrl_train.config import SkyRLConfig
from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.types import GeneratorInput, GeneratorOutput, Trajectory
from skyrl_train.rollouts import (
    FULLY_ASYNC_SEED_KEY,
    DynamicSampling,
    FullyAsyncSource,
    OneStepOffSource,
    PromptSource,
    RolloutCollector,
    SyncSource,
)
from skyrl_train.rollouts.fully_async import Lookahead
from skyrl_train.rollouts.inputs import row_seeds


class _Generator(GeneratorInterface):
    """Rewards alternate 0, 1 within each uid unless the prompt says "flat"; `versions` sets each call's
    weight version (default 0)."""

    def __init__(self, versions=None):
        self.calls: list[GeneratorInput] = []
        self.versions = list(versions or [])

    async def generate(self, generator_input: GeneratorInput) -> GeneratorOutput:
        self.calls.append(generator_input)
        version = self.versions.pop(0) if self.versions else 0
        seen: dict[str, int] = {}
        trajectories = []
        for uid, prompt in zip(generator_input.uids, generator_input.prompts):
            index = seen.get(uid, 0)
            seen[uid] = index + 1
            reward = 0.0 if prompt[0]["content"] == "flat" else float(index % 2)
            trajectories.append(
                Trajectory(
                    uid=uid,
                    env_class="t",
                    prompt_token_ids=[1],
                    response_ids=[5],
                    loss_mask=[1],
                    token_rewards=[reward],
                    rollout_logprobs=None,
                    stop_reason="stop",
                    num_turns=1,
                    weight_version=version,
                )
            )
        await asyncio.sleep(0)
        return GeneratorOutput(trajectories, {})


class _Loader:
    def __init__(self, contents):
        self.contents, self.position = contents, 0

    def next_batch(self, max_epochs):
        batch = self.contents[self.position : self.position + 2]
        self.position += 2
        return batch if len(batch) == 2 else None


def _parts(mode, contents, *overrides, versions=None):
    cfg = SkyRLConfig.from_cli_overrides(
        [
            f"trainer.mode={mode}",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "generator.n_samples_per_prompt=2",
            "generator.sampling_params.seed=3",
            *overrides,
        ],
        validate=False,
    )
    items = [
        {"prompt": [{"role": "user", "content": c}], "env_class": "t", "env_extras": {}, "uid": str(i)}
        for i, c in enumerate(contents)
    ]
    prompts = PromptSource(_Loader(items), epochs=1, batch_size=2)
    generator = _Generator(versions)
    sampling = DynamicSampling(cfg)
    return cfg, prompts, RolloutCollector(cfg, generator, sampling), generator, sampling


def test_a_sync_step_generates_its_own_batch_seeded_by_its_step():
    cfg, prompts, collector, generator, _ = _parts("sync", ["a", "b", "c", "d"])
    source = SyncSource(cfg, prompts, collector)

    async def run():
        await source.start(0, 2)
        taken = await source.next(1, 0)
        assert "generate" in taken.timer.seconds and await source.done(taken, 0) == {}
        return taken

    taken = asyncio.run(run())
    assert generator.calls[0].uids == ["1/0", "1/0", "1/1", "1/1"]
    assert generator.calls[0].seeds == row_seeds(3, 1, 0, 4)
    assert [t.uid for t in taken.rollouts.output.trajectories] == ["1/0", "1/0", "1/1", "1/1"]
    assert prompts.used_uids == [["0", "1"]] and prompts.state() == []


def test_one_step_off_keeps_two_batches_generating_each_seeded_by_the_step_before_its_own():
    cfg, prompts, collector, generator, _ = _parts("one_step_off", ["a", "b", "c", "d", "e", "f", "g", "h"])
    source = OneStepOffSource(cfg, prompts, collector)

    async def run():
        await source.start(0, 3)
        assert sorted(source.pending) == [1, 2]  # the batches of steps 1 and 2 start before the loop
        first = await source.next(1, 0)
        await source.before_publish(first.timer)  # waits for nothing: the sync lands in the running batch
        metrics = await source.done(first, trained_version=1)  # the trajectories' version 0: one version old
        assert sorted(source.pending) == [2, 3]  # step 1's weights are served: step 3's batch starts
        second = await source.next(2, 1)
        third = source.pending[3]
        await source.stop()  # cancels batch 3 and waits for it
        assert third.cancelled() and source.pending == {}
        return metrics, second

    metrics, second = asyncio.run(run())
    assert [call.uids[0] for call in generator.calls][:2] == ["0/0", "1/2"]
    assert generator.calls[1].seeds == row_seeds(3, 1, 0, 4)  # step 2's batch, seeded by step 1
    assert metrics["async/staleness_mean"] == 1.0 and "timing/generate" in metrics
    assert second.rollouts.output.trajectories[0].uid == "1/2"
    assert prompts.used_uids == [["0", "1"]]


def _one_fully_async_step(source, version):
    """Start `source` for one step, take step 1's rollouts with the policy at `version`, report them trained, stop."""

    async def run():
        await source.start(0, 1)
        taken = await source.next(1, version)
        metrics = await source.done(taken, version)
        await source.stop()
        return taken, metrics

    return asyncio.run(run())


def test_fully_async_groups_are_seeded_by_their_key_and_stale_ones_generated_again():
    # the first group comes back 2 versions old at version 2 (max_staleness 1): it is dropped, to be generated again
    cfg, prompts, collector, generator, sampling = _parts(
        "fully_async", ["a", "b", "c", "d"], "trainer.async_rl.max_staleness=1", versions=[0, 2, 2, 2]
    )
    taken, metrics = _one_fully_async_step(FullyAsyncSource(cfg, prompts, collector, sampling), version=2)
    key_of = {call.uids[0]: call for call in generator.calls}
    assert key_of["g0/0"].seeds == row_seeds(3, FULLY_ASYNC_SEED_KEY, 0, 2)
    assert metrics["async/dropped_stale_groups"] == 1.0 and metrics["async/staleness_max"] == 0.0
    # 4 groups may start ((0 steps + 1 + 1) x 2); group 0 is dropped, its prompt waits first in line
    assert sorted({t.uid for t in taken.rollouts.output.trajectories}) == ["g1/1", "g2/2"]
    assert prompts.used_uids == [["1", "2"]] and prompts.state()[0]["uid"] in {"0", "3"}


def test_fully_async_filter_leaves_out_groups_without_reward_variance():
    cfg, prompts, collector, generator, sampling = _parts(
        "fully_async", ["flat", "b", "c", "d"], "trainer.algorithm.dynamic_sampling.type=filter"
    )
    taken, metrics = _one_fully_async_step(FullyAsyncSource(cfg, prompts, collector, sampling), version=0)
    assert "g0/0" not in {t.uid for t in taken.rollouts.output.trajectories}
    assert metrics["dynamic_sampling/kept_groups"] == 2.0 and metrics["dynamic_sampling/sampled_groups"] == 3.0
    assert prompts.used_uids[0][0] == "0"  # the left-out prompt is used up by this step


def test_the_lookahead_covers_a_group_latency_with_trainer_steps_within_the_staleness_bound():
    lookahead = Lookahead(max_staleness=3)
    assert lookahead.batches == 2  # nothing measured yet: one step ahead
    lookahead.note_step(1.0)
    lookahead.note_group(2.5)
    assert lookahead.batches == 4  # a group outlasts 2.5 steps: 1 + 3 batches keep the trainer busy
    lookahead.note_group(0.5)  # moving average: 0.7 * 2.5 + 0.3 * 0.5 = 1.9
    assert lookahead.batches == 3
    capped = Lookahead(max_staleness=1)
    capped.note_step(0.1)
    capped.note_group(10.0)
    assert capped.batches == 2  # never past max_staleness + 1
    assert Lookahead(max_staleness=0).batches == 1
