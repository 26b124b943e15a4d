"""Tests for SkyRLGymGenerator with the real hf engine, the tiny model and real skyrl-gym envs."""

import asyncio
import json
import threading
import time
from dataclasses import replace

import pytest

import skyrl_gym
from skyrl_gym import BaseTextEnv
from skyrl_train.generators import GeneratorInput, GeneratorSettings, SkyRLGymGenerator
from skyrl_train.generators.chat import prompt_token_ids
from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient, SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

EVERY_CHAR_STOPS = tuple(range(5, 102))  # every non-special token id ends a turn: deterministic short turns


class ChattyEnv(BaseTextEnv):
    """Never done by itself: answers each turn with an observation and reward 0.25 * turn."""

    def _step(self, action):
        return {
            "observations": [{"role": "user", "content": f"turn {self.turns} said {action!r}"}],
            "reward": 0.25 * self.turns,
            "done": False,
        }


class BrokenEnv(BaseTextEnv):
    def _step(self, action):
        raise RuntimeError("grader crashed")


class SlowEnv(BaseTextEnv):
    def _step(self, action):
        time.sleep(2)
        return {"observations": [], "reward": 1.0, "done": True}


class SlowStartEnv(BaseTextEnv):
    def init(self, prompt):
        time.sleep(2)
        return super().init(prompt)

    def _step(self, action):
        return {"observations": [], "reward": 1.0, "done": True}


class LeakyEnv(BaseTextEnv):
    """Scores like a correct answer, then fails to clean up."""

    def _step(self, action):
        return {"observations": [], "reward": 1.0, "done": True}

    def close(self):
        raise OSError("could not remove the scratch dir")


class RecordingEnv(BaseTextEnv):
    """Records, per env object, the calls the generator makes after init; its init fails on the prompt "fail"."""

    events: list[tuple[int, str]] = []

    def init(self, prompt):
        if prompt[0]["content"] == "fail":
            raise ValueError("cannot start from this prompt")
        return super().init(prompt)

    def _step(self, action):
        RecordingEnv.events.append((id(self), "step"))
        return {"observations": [], "reward": 1.0, "done": True}

    def get_metrics(self):
        RecordingEnv.events.append((id(self), "metrics"))
        return {**super().get_metrics(), "recorded": 1.0}

    def close(self):
        RecordingEnv.events.append((id(self), "close"))
        super().close()


@pytest.fixture(scope="module", autouse=True)
def test_envs():
    envs = {
        "chatty": ChattyEnv,
        "broken": BrokenEnv,
        "slow": SlowEnv,
        "slow_start": SlowStartEnv,
        "leaky": LeakyEnv,
        "recording": RecordingEnv,
    }
    for name, cls in envs.items():
        skyrl_gym.register(name, cls)
    yield
    for name in envs:
        skyrl_gym.deregister(name)


@pytest.fixture(scope="module")
def client(tokenizer):
    return InferenceEngineClient([HFInferenceEngine(build_tiny_model(TinyModelSpec(size=1), seed=3), tokenizer)])


def _input(env_class, count=2, extras=None, content="What is 2+3?"):
    return GeneratorInput(
        prompts=[[{"role": "user", "content": content}] for _ in range(count)],
        env_classes=[env_class] * count,
        env_extras=[
            dict(extras or {"reward_spec": {"method": "rule", "ground_truth": "5"}}, data_source="t")
            for _ in range(count)
        ],
        uids=[str(i // 2) for i in range(count)],
    )


def _render(tokenizer, messages):
    ids = tokenizer.apply_chat_template(messages, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def test_multi_turn_is_token_in_token_out_without_drift(tokenizer, client):
    params = SamplingParams(max_tokens=4, temperature=0, stop_token_ids=EVERY_CHAR_STOPS)
    generator = SkyRLGymGenerator(
        client, tokenizer, GeneratorSettings(sampling_params=params, max_turns=3, max_input_length=400)
    )
    out = asyncio.run(generator.generate(_input("chatty", count=1)))
    (t,) = out.trajectories
    assert t.num_turns == 3 and t.stop_reason == "stop"
    # Rebuild the conversation as messages and re-render it with the chat template: the tokens must be identical.
    messages = [{"role": "user", "content": "What is 2+3?"}]
    ids, mask = t.response_ids, t.loss_mask
    turns, start = [], 0
    while start < len(ids):
        end = start
        while end < len(ids) and mask[end] == 1:
            end += 1
        turns.append(ids[start:end])
        start = end
        while start < len(ids) and mask[start] == 0:
            start += 1
    for number, generated in enumerate(turns, start=1):
        content = tokenizer.decode([i for i in generated if i != tokenizer.eos_token_id])
        messages.append({"role": "assistant", "content": content})
        if number < 3:
            messages.append({"role": "user", "content": f"turn {number} said {content!r}"})
    rendered = _render(tokenizer, messages)
    assert t.prompt_token_ids + t.response_ids == rendered[: len(t.prompt_token_ids) + len(t.response_ids)]
    # turn rewards sit on each turn's last generated token: 0.25, 0.5, 0.75
    placed = [r for r in t.token_rewards if r]
    assert placed == [0.25, 0.5, 0.75] and t.reward == pytest.approx(1.5)
    assert len(t.rollout_logprobs) == len(t.response_ids)
    assert all(lp == 0.0 for lp, m in zip(t.rollout_logprobs, mask) if m == 0)


def test_step_wise_trajectories_one_per_turn(tokenizer, client):
    params = SamplingParams(max_tokens=4, temperature=0, stop_token_ids=EVERY_CHAR_STOPS)
    settings = GeneratorSettings(sampling_params=params, max_turns=3, step_wise_trajectories=True)
    out = asyncio.run(SkyRLGymGenerator(client, tokenizer, settings).generate(_input("chatty", count=1)))
    assert [t.step_index for t in out.trajectories] == [0, 1, 2]
    assert [t.is_last_step for t in out.trajectories] == [False, False, True]
    first, second = out.trajectories[0], out.trajectories[1]
    # the second step's prompt is the first step's prompt + its output + the observation tokens
    assert (
        second.prompt_token_ids[: len(first.prompt_token_ids) + len(first.response_ids)]
        == first.prompt_token_ids + first.response_ids
    )
    assert all(t.reward == pytest.approx(1.5) for t in out.trajectories) and all(
        set(t.loss_mask) == {1} for t in out.trajectories
    )


def test_single_turn_real_env_metrics_and_batched_mode_agree(tokenizer, client):
    params = SamplingParams(max_tokens=6, temperature=0)
    extras = {"reward_spec": {"method": "rule", "ground_truth": "5"}}
    looped = asyncio.run(
        SkyRLGymGenerator(client, tokenizer, GeneratorSettings(sampling_params=params)).generate(
            _input("arithmetic", 4, extras)
        )
    )
    batched = asyncio.run(
        SkyRLGymGenerator(client, tokenizer, GeneratorSettings(sampling_params=params, batched=True)).generate(
            _input("arithmetic", 4, extras)
        )
    )
    assert [t.response_ids for t in looped.trajectories] == [t.response_ids for t in batched.trajectories]
    # the rows of one prompt share its ids in the engine request, but each trajectory has its own list
    first, second = batched.trajectories[0].prompt_token_ids, batched.trajectories[1].prompt_token_ids
    assert first == second and first is not second
    for out in (looped, batched):
        assert all(set(t.loss_mask) == {1} for t in out.trajectories)
        assert out.metrics["generate/env_errors"] == 0.0
        assert "environment/arithmetic/correct" in out.metrics
        assert out.metrics["generate/reward_mean"] == pytest.approx(sum(t.reward for t in out.trajectories) / 4)
        assert sum(v for k, v in out.metrics.items() if k.startswith("generate/stop_reason/")) == pytest.approx(1.0)


def test_env_failures_are_recorded_masked_counted_and_each_new_reason_logged_once(tokenizer, client, caplog):
    params = SamplingParams(max_tokens=3, temperature=0)
    generator = SkyRLGymGenerator(client, tokenizer, GeneratorSettings(sampling_params=params, env_step_timeout_s=0.3))
    with caplog.at_level("WARNING"):
        broken = asyncio.run(generator.generate(_input("broken", 2)))
    warnings = [r.getMessage() for r in caplog.records if "failed in their env" in r.getMessage()]
    assert len(warnings) == 1 and "2 of 2 episodes" in warnings[0] and "grader crashed" in warnings[0]
    assert "Traceback" in warnings[0]  # where the env raised, not only what
    caplog.clear()
    with caplog.at_level("WARNING"):
        asyncio.run(generator.generate(_input("broken", 2)))  # the same failure again: the metric counts it, no log
    assert "failed in their env" not in caplog.text
    for t in broken.trajectories:
        assert t.env_error["kind"] == "exception" and "grader crashed" in t.env_error["reason"]
        # the generated tokens stay marked as generated; the trajectory leaves the loss and the group statistics
        assert not t.is_valid and not t.is_trained and set(t.loss_mask) == {1}
    assert broken.metrics["generate/env_errors"] == 2.0
    slow = asyncio.run(generator.generate(_input("slow", 1)))
    assert slow.trajectories[0].env_error["kind"] == "timeout"
    missing = asyncio.run(generator.generate(_input("arithmetic", 1, extras={"reward_spec": {"method": "rule"}})))
    assert (
        missing.trajectories[0].env_error["kind"] == "init"
        and "ground_truth" in missing.trajectories[0].env_error["reason"]
    )


def test_batched_mode_starts_every_episode_keeps_failures_per_row_and_templates_each_prompt(tokenizer, client):
    params = SamplingParams(max_tokens=4, temperature=0)
    good = {"reward_spec": {"method": "rule", "ground_truth": "5"}, "data_source": "t"}
    gi = GeneratorInput(
        prompts=[[{"role": "user", "content": text}] for text in ["What is 2+3?", "What is 2+3?", "Hi", "What?"]],
        env_classes=["arithmetic", "arithmetic", "arithmetic", "arithmetic"],
        env_extras=[good, good, {"reward_spec": {"method": "rule"}, "data_source": "t"}, good],
        uids=["a", "a", "b", "c"],
    )
    out = asyncio.run(
        SkyRLGymGenerator(client, tokenizer, GeneratorSettings(sampling_params=params, batched=True)).generate(gi)
    )
    rows = out.trajectories
    assert [t.uid for t in rows] == ["a", "a", "b", "c"]  # row order kept although episodes start concurrently
    assert rows[2].env_error["kind"] == "init" and "ground_truth" in rows[2].env_error["reason"]
    assert all(t.env_error is None for t in (rows[0], rows[1], rows[3]))
    for row, prompt in zip([rows[0], rows[1], rows[3]], [gi.prompts[0], gi.prompts[1], gi.prompts[3]]):
        assert row.prompt_token_ids == prompt_token_ids(tokenizer, prompt)
    assert rows[0].prompt_token_ids != rows[3].prompt_token_ids
    rows[0].prompt_token_ids.append(-1)  # each row owns its ids, even where the template was computed once
    assert rows[1].prompt_token_ids != rows[0].prompt_token_ids


def test_batched_mode_times_out_slow_rows_alone_and_keeps_rollouts_whose_close_fails(tokenizer, client, caplog):
    params = SamplingParams(max_tokens=3, temperature=0)
    settings = GeneratorSettings(sampling_params=params, batched=True, env_step_timeout_s=0.5)
    extras = {"reward_spec": {"method": "rule", "ground_truth": "5"}, "data_source": "t"}
    classes = ["arithmetic", "slow", "slow_start", "broken", "leaky"]
    gi = GeneratorInput(
        prompts=[[{"role": "user", "content": "What is 2+3?"}] for _ in classes],
        env_classes=classes,
        env_extras=[dict(extras) for _ in classes],
        uids=[str(i) for i in range(len(classes))],
    )
    with caplog.at_level("WARNING"):
        out = asyncio.run(SkyRLGymGenerator(client, tokenizer, settings).generate(gi))
    arithmetic, slow, slow_start, broken, leaky = out.trajectories
    assert arithmetic.env_error is None and arithmetic.is_valid
    assert slow.env_error["kind"] == "timeout" and "0.5 s" in slow.env_error["reason"]
    assert slow_start.env_error["kind"] == "init" and "did not return within 0.5 s" in slow_start.env_error["reason"]
    assert broken.env_error["kind"] == "exception" and "grader crashed" in broken.env_error["reason"]
    assert leaky.env_error is None and leaky.reward == 1.0  # a failed close loses nothing ...
    assert "1 of 4 env close() calls failed" in caplog.text and "scratch dir" in caplog.text  # ... and is reported
    assert out.metrics["generate/env_errors"] == 3.0


def test_batched_mode_steps_reads_metrics_and_closes_each_env_once_in_that_order(tokenizer, client):
    RecordingEnv.events.clear()
    settings = GeneratorSettings(sampling_params=SamplingParams(max_tokens=3, temperature=0), batched=True)
    gi = _input("recording", 3)
    gi.prompts[1] = [{"role": "user", "content": "fail"}]
    out = asyncio.run(SkyRLGymGenerator(client, tokenizer, settings).generate(gi))
    started, failed, other = out.trajectories
    assert failed.env_error["kind"] == "init" and "cannot start" in failed.env_error["reason"]
    assert started.env_metrics["recorded"] == other.env_metrics["recorded"] == 1.0 and started.reward == 1.0
    per_env: dict[int, list[str]] = {}
    for env_id, call in RecordingEnv.events:
        per_env.setdefault(env_id, []).append(call)
    # two episodes stepped, measured and closed; the env whose init failed is closed too, and nothing runs twice
    assert sorted(per_env.values()) == [["close"], ["step", "metrics", "close"], ["step", "metrics", "close"]]


def test_length_limit_overlong_filtering_and_zero_reward_on_non_stop(tokenizer, client):
    params = SamplingParams(max_tokens=50, temperature=0, ignore_eos=True)
    settings = GeneratorSettings(
        sampling_params=params, max_input_length=40, apply_overlong_filtering=True, zero_reward_on_non_stop=True
    )
    out = asyncio.run(SkyRLGymGenerator(client, tokenizer, settings).generate(_input("arithmetic", 1)))
    (t,) = out.trajectories
    assert t.stop_reason == "length" and len(t.response_ids) == 50  # the turn's max_tokens ran out
    assert t.filtered == "overlong" and not t.is_trained and t.is_valid and t.reward == 0.0
    assert out.metrics["generate/filtered"] == 1.0


def test_invalid_settings_and_inputs_are_rejected(tokenizer, client):
    with pytest.raises(ValueError, match="batched=True needs max_turns == 1"):
        GeneratorSettings(batched=True, max_turns=2)
    with pytest.raises(ValueError, match="one entry per prompt"):
        GeneratorInput(prompts=[[]], env_classes=[], env_extras=[{}], uids=["0"])
    generator = SkyRLGymGenerator(client, tokenizer, GeneratorSettings())
    with pytest.raises(ValueError, match="expects sampling_params.n == 1"):
        asyncio.run(
            generator.generate(
                GeneratorInput(
                    [[{"role": "user", "content": "x"}]],
                    ["arithmetic"],
                    [{}],
                    ["0"],
                    sampling_params=SamplingParams(n=2),
                )
            )
        )


def test_context_over_max_input_length_ends_a_multi_turn_trajectory(tokenizer, client):
    params = SamplingParams(max_tokens=4, temperature=0, stop_token_ids=EVERY_CHAR_STOPS)
    settings = GeneratorSettings(sampling_params=params, max_turns=5, max_input_length=40)
    out = asyncio.run(SkyRLGymGenerator(client, tokenizer, settings).generate(_input("chatty", count=1)))
    (t,) = out.trajectories
    # the prompt is ~32 tokens; after one turn plus its observation the context passes 40, so no second turn
    assert t.num_turns == 1 and t.stop_reason == "length"


def test_top_logprobs_ride_on_the_trajectory_aligned_with_its_tokens(tokenizer, client):
    params = SamplingParams(max_tokens=4, temperature=0, stop_token_ids=EVERY_CHAR_STOPS, top_logprobs=2)
    settings = GeneratorSettings(sampling_params=params, max_turns=2, max_input_length=400)
    (t,) = asyncio.run(SkyRLGymGenerator(client, tokenizer, settings).generate(_input("chatty", count=1))).trajectories
    assert len(t.rollout_top_logprobs) == len(t.response_ids)
    for token, logprob, mask, top in zip(t.response_ids, t.rollout_logprobs, t.loss_mask, t.rollout_top_logprobs):
        if mask == 0:
            assert top == []  # observation tokens were not sampled
            continue
        assert len(top) == 2 and top[0][1] >= top[1][1]
        assert top[0] == (token, pytest.approx(logprob, abs=1e-6))  # greedy: the sampled token is the most likely
    step_wise = GeneratorSettings(sampling_params=params, max_turns=2, step_wise_trajectories=True)
    steps = asyncio.run(SkyRLGymGenerator(client, tokenizer, step_wise).generate(_input("chatty", count=1)))
    assert all(len(s.rollout_top_logprobs) == len(s.response_ids) for s in steps.trajectories)
    batched = GeneratorSettings(sampling_params=replace(params, stop_token_ids=()), batched=True)
    (b,) = asyncio.run(SkyRLGymGenerator(client, tokenizer, batched).generate(_input("chatty", count=1))).trajectories
    assert len(b.rollout_top_logprobs) == len(b.response_ids) > 0


def test_weights_updated_between_turns_keep_each_tokens_version_and_logprob(tokenizer):
    """An in-flight update (fully_async): the engine pauses after turn 1, takes new weights, and the rollouts go on.
    Each generated token records the version that produced it, and its rollout logprob equals a recomputation with
    exactly those weights."""
    import threading

    import torch

    old_model = build_tiny_model(TinyModelSpec(size=1), seed=3)
    new_model = build_tiny_model(TinyModelSpec(size=1), seed=4)
    engine = HFInferenceEngine(build_tiny_model(TinyModelSpec(size=1), seed=3), tokenizer)
    engine_client = InferenceEngineClient([engine])
    first_turn_done, updated = threading.Event(), threading.Event()
    finished_first_turns, lock = [], threading.Lock()

    class SignallingEnv(ChattyEnv):
        def _step(self, action):  # turn 1 of every episode ends before the update, turn 2 starts after it
            if self.turns == 1:
                with lock:
                    finished_first_turns.append(self)
                    if len(finished_first_turns) == 4:
                        first_turn_done.set()
                updated.wait(timeout=30)
            return super()._step(action)

    skyrl_gym.register("signalling", SignallingEnv)
    # every token ends a turn: with only the char tokens as stops, ~1.5 % of sampled turns ran 4 special tokens to
    # the length limit, which ends the episode after turn 1 (all its tokens then version 0); and with only the
    # tokenizer's ids as stops, ~1 run in 15 sampled 4 of the model's padding ids (vocab_size > len(tokenizer)) in turn 2
    vocab_size = max(int(old_model.config.vocab_size), len(tokenizer))
    params = SamplingParams(max_tokens=4, temperature=1.0, stop_token_ids=tuple(range(vocab_size)))
    generator = SkyRLGymGenerator(
        engine_client, tokenizer, GeneratorSettings(sampling_params=params, max_turns=2, max_input_length=400)
    )

    async def scenario():
        rollouts = asyncio.create_task(generator.generate(_input("signalling", count=4)))
        while not first_turn_done.is_set():
            await asyncio.sleep(0.001)
        await engine_client.pause()  # what AsyncPPOTrainer.sync_weights does around a sync
        await engine_client.update_weights(list(new_model.state_dict().items()), version=1)
        await engine_client.resume()
        updated.set()
        return await rollouts

    try:
        out = asyncio.run(scenario())
    finally:
        skyrl_gym.deregister("signalling")
    for t in out.trajectories:
        assert t.num_turns == 2 and t.stop_reason == "stop", (t.num_turns, t.stop_reason, t.env_error)
        versions = [v for v, m in zip(t.token_versions, t.loss_mask) if m]
        assert set(versions) == {0, 1} and versions == sorted(versions)  # turn 1 old weights, turn 2 new ones
        assert t.oldest_version == 0 and t.weight_version == 1
        ids = torch.tensor([t.prompt_token_ids + t.response_ids])
        start = len(t.prompt_token_ids)
        for version, model in ((0, old_model), (1, new_model)):
            with torch.no_grad():
                logits = model(ids).logits[0, start - 1 : -1].float()
            recomputed = torch.log_softmax(logits, -1).gather(-1, ids[0, start:].unsqueeze(-1)).squeeze(-1)
            for position, (v, m) in enumerate(zip(t.token_versions, t.loss_mask)):
                if m and v == version:
                    assert t.rollout_logprobs[position] == pytest.approx(float(recomputed[position]), abs=1e-5)


def test_prompt_ids_taken_from_the_dataset_are_not_templated_again(tokenizer, client, tmp_path):
    from skyrl_train.dataset import PromptDataset

    rows = [
        {"prompt": [{"role": "user", "content": content}], "env_class": "arithmetic", "data_source": "t"}
        | {"reward_spec": {"method": "rule", "ground_truth": "5"}}
        for content in ("What is 2+3?", "What is 1+4?")
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    dataset = PromptDataset([path], tokenizer, max_prompt_length=64)
    params = SamplingParams(max_tokens=4, temperature=0)
    generator = SkyRLGymGenerator(client, tokenizer, GeneratorSettings(sampling_params=params, batched=True))
    assert generator.remember_prompt_ids(dataset.templated_prompts(), {"enable_thinking": False}) == 0  # other kwargs
    assert generator.remember_prompt_ids(dataset.templated_prompts(), dataset.chat_template_kwargs) == 2
    out = asyncio.run(generator.generate(_input("arithmetic", count=4, content="What is 1+4?")))
    assert generator.prompt_ids.misses == 0 and generator.prompt_ids.hits == 1  # one distinct prompt, found
    expected = prompt_token_ids(tokenizer, [{"role": "user", "content": "What is 1+4?"}])
    assert [t.prompt_token_ids for t in out.trajectories] == [expected] * 4


def test_batched_mode_ends_the_episodes_of_each_engine_as_soon_as_that_engine_is_done(tokenizer):
    """With two engines, the rows of the engine that finishes first are stepped, measured and closed while the other
    still decodes (here it is held until some env was closed, which waiting for every engine first would never do),
    and the trajectories equal those of a generator given the same engines as one part."""
    engines = [HFInferenceEngine(build_tiny_model(TinyModelSpec(size=1), seed=3), tokenizer) for _ in range(2)]
    settings = GeneratorSettings(sampling_params=SamplingParams(max_tokens=3, temperature=0), batched=True)
    gi = _input("recording", 4)

    async def run_with_engine_1_held():
        held = engines[1].generate

        async def held_until_an_env_closed(request):
            while not any(call == "close" for _, call in RecordingEnv.events):
                await asyncio.sleep(0.01)
            return await held(request)

        engines[1].generate = held_until_an_env_closed
        try:
            return await SkyRLGymGenerator(InferenceEngineClient(engines), tokenizer, settings).generate(gi)
        finally:
            engines[1].generate = held

    RecordingEnv.events.clear()
    streamed = asyncio.run(asyncio.wait_for(run_with_engine_1_held(), timeout=60))
    closed = [env_id for env_id, call in RecordingEnv.events if call == "close"]
    assert len(closed) == 4 and len(set(closed)) == 4  # every env closed once

    class OneCall:  # the same engines behind a plain `generate`: the generator then takes the output as one part
        def __init__(self, client):
            self.generate = client.generate

    whole = asyncio.run(SkyRLGymGenerator(OneCall(InferenceEngineClient(engines)), tokenizer, settings).generate(gi))
    assert [t.response_ids for t in streamed.trajectories] == [t.response_ids for t in whole.trajectories]
    assert [t.reward for t in streamed.trajectories] == [t.reward for t in whole.trajectories]
    assert [t.uid for t in streamed.trajectories] == gi.uids


class InlineEnv(BaseTextEnv):
    """Declares `nonblocking`; records the thread of each call."""

    nonblocking = True
    threads: set[int] = set()

    def init(self, prompt):
        InlineEnv.threads.add(threading.get_ident())
        return super().init(prompt)

    def _step(self, action):
        InlineEnv.threads.add(threading.get_ident())
        return {"observations": [], "reward": 1.0, "done": True}


class PooledEnv(InlineEnv):
    """The same env without the declaration: its calls go to the env pool's threads."""

    nonblocking = False


def test_batched_mode_calls_nonblocking_envs_on_its_own_thread_and_other_envs_on_the_pool(tokenizer, client):
    """Envs that declare `nonblocking` are made, stepped and closed on the generator's thread (no thread hop); a
    batch with any env that does not declare it runs on the pool's threads, with its time limit."""
    settings = GeneratorSettings(sampling_params=SamplingParams(max_tokens=3, temperature=0), batched=True)
    skyrl_gym.register("inline", InlineEnv)
    skyrl_gym.register("pooled", PooledEnv)
    try:
        for env_class, expect_here in (("inline", True), ("pooled", False)):
            InlineEnv.threads = set()

            async def run(env_class=env_class):
                out = await SkyRLGymGenerator(client, tokenizer, settings).generate(_input(env_class, 4))
                return out, threading.get_ident()

            out, loop_thread = asyncio.run(run())
            assert [t.reward for t in out.trajectories] == [1.0] * 4
            assert (InlineEnv.threads == {loop_thread}) is expect_here
            assert expect_here or loop_thread not in InlineEnv.threads
        assert skyrl_gym.spec("addition").load().nonblocking  # the synthetic envs declare it
    finally:
        skyrl_gym.deregister("inline")
        skyrl_gym.deregister("pooled")
