"""`SkyRLGymGenerator`: multi-turn, token-in/token-out rollouts of skyrl-gym environments through an engine client.

Per trajectory: make the env by class, `init`, chat-template the prompt, then loop generate -> `env.step` -> append
the tokenized observation, until the env is done, `max_turns` is reached or the context is full. Env calls run in a
bounded thread pool off the event loop, with a timeout; an env failure ends the trajectory, marks it invalid (loss
mask zeroed) and is counted, never turned into an unannounced zero reward.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from transformers import PreTrainedTokenizerBase

import skyrl_gym
from skyrl_gym import check_step_output, failed_step
from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.chat import (
    ObservationRenderer,
    PromptIdsCache,
    conversation_key,
    prompt_token_ids,
)
from skyrl_train.generators.env_pool import EnvCallResult, EnvPool
from skyrl_train.generators.metrics import rollout_metrics
from skyrl_train.generators.types import GeneratorInput, GeneratorOutput, Trajectory
from skyrl_train.inference.client import InferenceEngineClient
from skyrl_train.inference.types import InferenceEngineInput, Messages, SamplingParams

logger = logging.getLogger(__name__)
MAX_REPORTED_ENV_FAILURES = 20
"""Distinct env failure reasons a generator logs; beyond them the `generate/env_errors` metric alone counts."""


@dataclass
class GeneratorSettings:
    """How rollouts are produced (the trainer fills this from the `generator` and `environment` config)."""

    sampling_params: SamplingParams = field(default_factory=SamplingParams)
    """Default sampling for training rollouts; `max_tokens` is the per-turn budget."""
    max_turns: int = 1
    """Most model turns per trajectory (passed to envs as `max_turns`)."""
    max_input_length: int = 1024
    """Most tokens of context (prompt, earlier turns, observations) before a model turn; a longer context ends the
    trajectory with reason 'length'. Each turn then generates up to `sampling_params.max_tokens`."""
    batched: bool = False
    """Single-turn only: one engine call for the whole batch instead of one per trajectory."""
    step_wise_trajectories: bool = False
    """Emit one trajectory per turn (prompt = everything before that turn) instead of one per episode."""
    env_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per env class, the `env_config` passed to its constructor."""
    max_env_workers: int = 16
    """Threads for env init/step calls."""
    env_step_timeout_s: Optional[float] = 60.0
    """An env call that takes longer fails the trajectory with kind 'timeout' (None: no limit)."""
    zero_reward_on_non_stop: bool = False
    """Give reward 0 to trajectories whose last turn did not stop by itself (e.g. hit the length limit)."""
    apply_overlong_filtering: bool = False
    """Zero the loss mask of trajectories that hit the length limit (DAPO overlong filtering)."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for `apply_chat_template`."""
    use_conversation_multi_turn: bool = True
    """Each observation is a new chat message (templated, followed by the next generation prompt). False: the episode
    is one assistant message, the model's turns and the observations' raw text one after the other (SkyRL's
    `use_conversation_multi_turn=false`); a turn's closing eos leaves the context when the episode goes on."""
    retokenize_chat_history: bool = False
    """Each turn's context is the chat template applied to the conversation so far as messages (the model's earlier
    turns as their text) instead of the tokens so far, so a template that rewrites earlier turns (Qwen3 drops their
    thinking) shows the model what it sees at inference. Needs `step_wise_trajectories`: each step then trains on its
    own templated prompt and the tokens the model generated from it."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"GeneratorSettings.max_turns must be >= 1, got {self.max_turns}")
        if self.batched and self.max_turns != 1:
            raise ValueError("GeneratorSettings.batched=True needs max_turns == 1 (batched mode is single-turn)")
        if self.batched and self.step_wise_trajectories:
            raise ValueError("GeneratorSettings.batched and step_wise_trajectories cannot both be on")
        if self.step_wise_trajectories and not self.use_conversation_multi_turn:
            raise ValueError(
                "GeneratorSettings.step_wise_trajectories needs use_conversation_multi_turn=True (a step's prompt is"
                " the conversation so far as chat messages)"
            )
        if self.retokenize_chat_history and not self.step_wise_trajectories:
            raise ValueError(
                "GeneratorSettings.retokenize_chat_history needs step_wise_trajectories=True (each turn's prompt is"
                " templated anew, so the turns no longer form one token sequence)"
            )


@dataclass
class _Finished:
    """What the pool call ending a batched single-turn episode did: its step, its `get_metrics()` and its close."""

    step: EnvCallResult
    metrics: EnvCallResult = field(default_factory=EnvCallResult)
    close: EnvCallResult = field(default_factory=EnvCallResult)

    @classmethod
    def of(cls, result: EnvCallResult) -> _Finished:
        """The record `_finish_episode` returned; for a call that timed out, a timed-out step (its close is not a
        failure: it runs in the pool thread once the step returns)."""
        if result.timed_out:  # the pool thread still runs it: the env is closed once its step returns
            return cls(step=result)
        if result.error is not None:  # a BaseException that `_run` lets through
            return cls(step=result, close=result)
        return result.value

    def env_metrics(self) -> dict[str, Any]:
        """The env's metrics; raises what `get_metrics()` raised (as calling it here would have)."""
        if self.metrics.error is not None:
            raise self.metrics.error
        return self.metrics.value


def _run(call) -> EnvCallResult:
    try:
        return EnvCallResult(value=call())
    except Exception as exc:  # noqa: BLE001 - user env code: the caller decides what each failure means
        return EnvCallResult(error=exc)


def _drop_closing_eos(token_rewards: list[float], *per_token: list[Any]) -> None:
    """Remove a turn's last token (its eos) from the trajectory's per-token lists: the episode goes on inside the
    same assistant message, so the eos never reaches the next turn's context. Its reward moves to the token before."""
    reward = token_rewards.pop()
    for values in per_token:
        values.pop()
    if token_rewards:
        token_rewards[-1] += reward


def _finish_episode(env, text: str) -> _Finished:
    """In a pool thread: step the env with the model's answer, read its metrics and close it. Each part's failure is
    kept for the caller (a failed step still closes the env); metrics are read only after a step that returned."""
    step = _run(lambda: env.step(text))
    metrics = _run(env.get_metrics) if step.error is None else EnvCallResult(value={})
    return _Finished(step=step, metrics=metrics, close=_run(env.close))


@dataclass
class _Turn:
    input_ids: list[int]
    output_ids: list[int]
    reward: float
    start: int
    """Where `output_ids` start in the episode's response tokens (and its per-token lists)."""


class SkyRLGymGenerator(GeneratorInterface):
    """Rolls out skyrl-gym environments with an `InferenceEngineClient` (or any engine with the same `generate`)."""

    def __init__(
        self, client: InferenceEngineClient, tokenizer: PreTrainedTokenizerBase, settings: GeneratorSettings
    ) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.settings = settings
        # the tokens after a model turn are rendered once per observation, unless each turn is templated anew
        as_messages = settings.max_turns > 1 and settings.use_conversation_multi_turn
        as_messages = as_messages and not settings.retokenize_chat_history
        self.renderer = ObservationRenderer(tokenizer, settings.chat_template_kwargs) if as_messages else None
        self.env_pool = EnvPool(settings.max_env_workers, settings.env_step_timeout_s)
        self.prompt_ids = PromptIdsCache()  # single-turn prompts seen again are not templated again
        self._llm_seconds = 0.0
        self._reported_env_failures: set[str] = set()

    def remember_prompt_ids(
        self, templated: Iterable[tuple[Messages, list[int]]], chat_template_kwargs: dict[str, Any]
    ) -> int:
        """Take prompt ids computed elsewhere (`PromptDataset.templated_prompts`, with this generator's tokenizer) for
        the prompts' messages without tools, so the first epoch does not template those prompts again; an env that
        returns other messages from `init` is templated as usual. Ignored (returns 0) unless `chat_template_kwargs`
        are this generator's. Returns how many prompts it took."""
        if chat_template_kwargs != self.settings.chat_template_kwargs:
            return 0
        count = 0
        for messages, ids in templated:
            self.prompt_ids.remember(conversation_key(messages, None), ids)
            count += 1
        return count

    async def generate(self, generator_input: GeneratorInput) -> GeneratorOutput:
        """Roll out every prompt; returns trajectories in input order and the batch metrics."""
        self._llm_seconds, self.env_pool.seconds = 0.0, 0.0
        params = generator_input.sampling_params or self.settings.sampling_params
        if params.n != 1:
            raise ValueError(
                "SkyRLGymGenerator expects sampling_params.n == 1; repeat prompts (same uid) for n samples"
            )
        count = len(generator_input.prompts)
        if self.settings.batched:
            episodes = await self._batched(generator_input, params)
        else:
            episodes = await asyncio.gather(*(self._episode(generator_input, i, params) for i in range(count)))
        finals = [steps[-1] for steps in episodes]
        self._report_env_failures(finals)
        metrics = rollout_metrics(finals, self._llm_seconds, self.env_pool.seconds)
        trajectories = [t for steps in episodes for t in steps] if self.settings.step_wise_trajectories else finals
        return GeneratorOutput(trajectories=trajectories, metrics=metrics)

    def _report_env_failures(self, finals: list[Trajectory]) -> None:
        """Log a WARNING for each env failure not seen before (its reason, how many episodes of the batch failed), so
        that a broken env cannot pass for a reward of 0: invalid episodes leave the loss, and only the
        `generate/env_errors` metric would count them. After `MAX_REPORTED_ENV_FAILURES` distinct reasons, only the
        metric does."""
        failed = [t.env_error for t in finals if t.env_error is not None]
        new = [error for error in failed if error.get("reason") not in self._reported_env_failures]
        if not new or len(self._reported_env_failures) >= MAX_REPORTED_ENV_FAILURES:
            return
        reason = str(new[0].get("reason"))
        self._reported_env_failures.add(reason)
        logger.warning(
            "%d of %d episodes of this batch failed in their env (kept out of the loss, counted in "
            "generate/env_errors); new failure [%s]: %s%s",
            len(failed),
            len(finals),
            new[0].get("kind"),
            reason,
            f"\n{new[0]['detail']}" if new[0].get("detail") else "",
        )

    # ----- env calls off the event loop ---------------------------------------------------------------------------
    async def _safe_step(self, env, text: str) -> dict[str, Any]:
        try:
            return self._step_outcome(env, EnvCallResult(value=await self.env_pool.call(env.step, text)))
        except TimeoutError:
            return self._step_outcome(env, EnvCallResult(timed_out=True))
        except Exception as exc:
            return self._step_outcome(env, EnvCallResult(error=exc))

    def _step_outcome(self, env, result: EnvCallResult) -> dict[str, Any]:
        """The checked step output, or a failed step naming the timeout or the exception."""
        name = type(env).__name__
        if result.timed_out:
            return failed_step(f"{name}.step did not return within {self.settings.env_step_timeout_s} s", "timeout")
        if result.error is not None:
            exc = result.error
            detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            return failed_step(f"{name}.step raised {type(exc).__name__}: {exc}", "exception", detail)
        if type(env).step is skyrl_gym.BaseTextEnv.step:  # it returns the output it checked: no second pass
            return result.value
        try:
            return check_step_output(result.value, name)
        except Exception as exc:
            return self._step_outcome(env, EnvCallResult(error=exc))

    async def _generate(self, input_ids: list[int], params: SamplingParams, session: str):
        start = time.perf_counter()
        try:
            request = InferenceEngineInput(prompt_token_ids=[input_ids], sampling_params=params, session_ids=[session])
            return await self.client.generate(request)
        finally:
            self._llm_seconds += time.perf_counter() - start

    # ----- one episode ------------------------------------------------------------------------------------------
    def _make_env(self, env_class: str, extras: dict[str, Any]):
        config = self.settings.env_configs.get(env_class, {})
        return skyrl_gym.make(env_class, env_config=config, extras={**extras, "max_turns": self.settings.max_turns})

    async def _episode(self, gi: GeneratorInput, index: int, params: SamplingParams) -> list[Trajectory]:
        env_class, extras, uid = gi.env_classes[index], gi.env_extras[index], gi.uids[index]
        base = dict(uid=uid, env_class=env_class, data_source=extras.get("data_source"))
        try:
            env = await self.env_pool.call(self._make_env, env_class, extras)
            messages, info = await self.env_pool.call(env.init, gi.prompts[index])
        except Exception as exc:
            error = {"kind": "init", "reason": f"{type(exc).__name__}: {exc}", "detail": traceback.format_exc()}
            return [self._failed_before_start(base, gi.prompts[index], error)]
        seed = gi.seeds[index] if gi.seeds is not None else None
        try:
            return await self._run_turns(env, messages, info, params, base, session=f"{uid}/{index}", seed=seed)
        finally:
            await self.env_pool.call(env.close)

    async def _run_turns(self, env, messages, info, params, base, session, seed=None) -> list[Trajectory]:
        prompt_ids = prompt_token_ids(self.tokenizer, messages, info.get("tools"), self.settings.chat_template_kwargs)
        response_ids: list[int] = []
        loss_mask: list[int] = []
        logprobs: list[float] = []
        tops: list[list[tuple[int, float]]] = []
        token_rewards: list[float] = []
        versions: list[int] = []
        turns: list[_Turn] = []
        stop_reason, env_error, version, text = "length", None, 0, ""
        chat = list(messages) if self.settings.retokenize_chat_history else None
        for _ in range(self.settings.max_turns):
            if chat is None or not turns:
                context = prompt_ids + response_ids
            else:
                context = prompt_token_ids(self.tokenizer, chat, info.get("tools"), self.settings.chat_template_kwargs)
            if len(context) > self.settings.max_input_length:
                stop_reason = "length"
                break
            turn_params = params if seed is None else replace(params, seed=seed + len(turns))
            out = await self._generate(context, turn_params, session)
            ids, text, stop_reason, version = (
                out.response_ids[0],
                out.responses[0],
                out.stop_reasons[0],
                out.weight_version,
            )
            start = len(response_ids)
            response_ids += ids
            loss_mask += [1] * len(ids)
            versions += out.response_token_versions[0] if out.response_token_versions else [version] * len(ids)
            logprobs += out.response_logprobs[0] if out.response_logprobs else [0.0] * len(ids)
            tops += out.response_top_logprobs[0] if out.response_top_logprobs else [[] for _ in ids]
            token_rewards += [0.0] * len(ids)
            step = await self._safe_step(env, text)
            if ids:
                token_rewards[-1] += step["reward"]
            turns.append(_Turn(context, ids, step["reward"], start))
            env_error = step["metadata"].get("env_error")
            if step["done"] or env_error or stop_reason != "stop":
                break
            if not self.settings.use_conversation_multi_turn and ids and ids[-1] == self.tokenizer.eos_token_id:
                _drop_closing_eos(token_rewards, response_ids, loss_mask, versions, logprobs, tops)
            if chat is not None:  # the next context is templated from `chat`; the steps need no continuation
                chat += [{"role": "assistant", "content": text}, *step["observations"]]
                continue
            continuation = self._continuation(ids, step["observations"])
            response_ids += continuation
            loss_mask += [0] * len(continuation)
            versions += [-1] * len(continuation)
            logprobs += [0.0] * len(continuation)
            tops += [[] for _ in continuation]
            token_rewards += [0.0] * len(continuation)
        env_metrics = {} if env_error else env.get_metrics()
        final = Trajectory(
            **base,
            prompt_token_ids=prompt_ids,
            response_ids=response_ids,
            loss_mask=loss_mask,
            token_rewards=token_rewards,
            rollout_logprobs=logprobs if params.logprobs else None,
            rollout_top_logprobs=tops if params.top_logprobs > 0 else None,
            stop_reason=stop_reason,
            num_turns=len(turns),
            weight_version=version,
            env_metrics=env_metrics,
            env_error=env_error,
            response_text=text,
            token_versions=versions,
        )
        self._apply_reward_rules(final)
        if not self.settings.step_wise_trajectories:
            return [final]
        return self._step_wise(final, turns, logprobs)

    def _continuation(self, generated: list[int], observations) -> list[int]:
        """Tokens between this model turn and the next: eos if the model stopped on a stop string, then the
        template's rendering of the observations and the next generation prompt. With
        `use_conversation_multi_turn=False`, the observations' text alone (each message's content, a string the step
        check guarantees, tokenized as it is with no template around it), inside the assistant message the model
        goes on writing."""
        if not self.settings.use_conversation_multi_turn:
            encode = self.tokenizer.encode
            return [token for message in observations for token in encode(message["content"], add_special_tokens=False)]
        prefix = [] if generated and generated[-1] == self.renderer.eos_token_id else [self.renderer.eos_token_id]
        return prefix + self.renderer.continuation_ids(observations)

    def _apply_reward_rules(self, trajectory: Trajectory) -> None:
        if self.settings.zero_reward_on_non_stop and trajectory.stop_reason != "stop":
            trajectory.token_rewards = [0.0] * len(trajectory.token_rewards)
        if self.settings.apply_overlong_filtering and trajectory.stop_reason == "length" and trajectory.is_valid:
            trajectory.filtered = "overlong"

    def _step_wise(self, final: Trajectory, turns: list[_Turn], logprobs: list[float]):
        """One trajectory per turn; every step carries the episode's return as its reward on its last token."""
        steps = []
        for index, turn in enumerate(turns):
            start = turn.start
            step_logprobs = logprobs[start : start + len(turn.output_ids)]
            rewards = [0.0] * len(turn.output_ids)
            if rewards:
                rewards[-1] = final.reward
            last = index == len(turns) - 1
            steps.append(
                replace(
                    final,
                    prompt_token_ids=turn.input_ids,
                    response_ids=turn.output_ids,
                    loss_mask=[1] * len(turn.output_ids),
                    token_rewards=rewards,
                    rollout_logprobs=step_logprobs if final.rollout_logprobs is not None else None,
                    rollout_top_logprobs=(
                        final.rollout_top_logprobs[start : start + len(turn.output_ids)]
                        if final.rollout_top_logprobs is not None
                        else None
                    ),
                    stop_reason=final.stop_reason if last else "stop",
                    token_versions=final.token_versions[start : start + len(turn.output_ids)],
                    step_index=index,
                    is_last_step=last,
                )
            )
        return steps or [final]

    def _failed_before_start(self, base, prompt, error) -> Trajectory:
        try:
            ids = prompt_token_ids(self.tokenizer, prompt, None, self.settings.chat_template_kwargs)
        except Exception:
            ids = []
        return Trajectory(
            **base,
            prompt_token_ids=ids,
            response_ids=[],
            loss_mask=[],
            token_rewards=[],
            rollout_logprobs=None,
            stop_reason="abort",
            num_turns=0,
            weight_version=0,
            env_error=error,
        )

    # ----- batched single-turn mode -----------------------------------------------------------------------------
    async def _batched(self, gi: GeneratorInput, params: SamplingParams) -> list[list[Trajectory]]:
        count = len(gi.prompts)
        # Making and initialising the envs is one batch of pool calls, and so is ending the episodes of each engine's
        # rows: an event-loop round trip per row cost more than the synthetic envs' own work.
        run_calls = self._runner_for(gi.env_classes)
        calls = [lambda i=i: self._start_episode(gi, i) for i in range(count)]
        started = [self._started(result, gi.env_classes[i]) for i, result in enumerate(await run_calls(calls))]
        envs = [env for env, _, _ in started]
        inits = [init for _, init, _ in started]
        failures = {i: failure for i, (_, _, failure) in enumerate(started) if failure is not None}
        live = [i for i in range(count) if i not in failures]
        # the samples of one prompt share its chat-templated ids; the distinct prompts are tokenized in one call
        conversations = {}
        keys = []
        key_of_list: dict[int, Any] = {}  # the samples of a prompt usually share its message list: key it once
        for i in live:
            messages, tools = inits[i][0], inits[i][1].get("tools")
            key = key_of_list.get(id(messages)) if tools is None else None
            if key is None:  # every list stays alive in `inits` until this loop ends, so no id is reused in it
                key = conversation_key(messages, tools)
                if tools is None:
                    key_of_list[id(messages)] = key
            keys.append(key)
            conversations.setdefault(key, (messages, tools))
        templated = self.prompt_ids.prompt_ids(self.tokenizer, conversations, self.settings.chat_template_kwargs)
        # rows of one conversation share its list in the request (pickled once for all of them); each trajectory
        # gets its own copy below
        shared = {key: list(ids) for key, ids in templated.items()}
        prompts = [shared[key] for key in keys]
        results: list[Optional[list[Trajectory]]] = [None] * count
        for i, failure in failures.items():
            base = dict(uid=gi.uids[i], env_class=gi.env_classes[i], data_source=gi.env_extras[i].get("data_source"))
            results[i] = [self._failed_before_start(base, gi.prompts[i], failure)]
        closes: list[EnvCallResult] = []
        if live:
            start, llm_seconds = time.perf_counter(), 0.0
            seeds = None if gi.seeds is None else [gi.seeds[i] for i in live]  # one batched call, a seed per row
            request = InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params, seeds=seeds)
            # Each engine's rows are stepped, scored and closed as soon as that engine is done, while the others
            # still decode: the first engines' share of this work leaves the step's critical path.
            async with contextlib.aclosing(self._generate_parts(request)) as parts:
                async for positions, out in parts:
                    llm_seconds = time.perf_counter() - start  # until the last part arrived
                    rows = [live[k] for k in positions]
                    calls = [
                        lambda i=i, text=text: _finish_episode(envs[i], text) for i, text in zip(rows, out.responses)
                    ]
                    finished = [_Finished.of(result) for result in await run_calls(calls)]
                    for k, (i, end) in enumerate(zip(rows, finished)):
                        results[i] = [self._single_turn(gi, i, list(prompts[positions[k]]), out, k, envs[i], end)]
                    closes += [end.close for end in finished]
            self._llm_seconds += llm_seconds
        orphans = [envs[i] for i in failures if envs[i] is not None]  # envs whose init failed are only closed
        closes += await run_calls([orphan.close for orphan in orphans])
        failed_closes = [r for r in closes if r.error is not None or r.timed_out]
        if failed_closes:  # the episodes are complete: report the leak, keep the rollouts
            first = failed_closes[0]
            logger.warning(
                "%d of %d env close() calls failed or timed out; first: %s",
                len(failed_closes),
                len(closes),
                "timeout" if first.timed_out else f"{type(first.error).__name__}: {first.error}",
            )
        return results

    def _runner_for(
        self, env_classes: list[str]
    ) -> Callable[[list[Callable[[], Any]]], Awaitable[list[EnvCallResult]]]:
        """How the batched path runs a batch of env calls: in this thread when every env class of the batch declares
        `nonblocking` (`skyrl_gym.Env.nonblocking`), else on the env pool's threads with its time limit."""
        if all(self._nonblocking(env_class) for env_class in set(env_classes)):

            async def here(calls: list[Callable[[], Any]]) -> list[EnvCallResult]:
                return self.env_pool.run_here(calls)

            return here
        return self.env_pool.call_all

    @staticmethod
    def _nonblocking(env_class: str) -> bool:
        """Whether `env_class`'s registered entry point declares `nonblocking` (False for unknown ids: `make` then
        fails per row as usual)."""
        try:
            return getattr(skyrl_gym.spec(env_class).load(), "nonblocking", False) is True
        except Exception:  # noqa: BLE001 - an unknown or broken env fails in `make`, row by row
            return False

    def _generate_parts(self, request: InferenceEngineInput) -> AsyncIterator[tuple[list[int], Any]]:
        """The client's parts as each engine finishes (`InferenceEngineClient.generate_parts`), or a client without
        them (any engine with `generate`) as one part."""
        parts = getattr(self.client, "generate_parts", None)
        if parts is not None:
            return parts(request)

        async def whole() -> AsyncIterator[tuple[list[int], Any]]:
            yield list(range(request.num_prompts)), await self.client.generate(request)

        return whole()

    def _single_turn(
        self, gi: GeneratorInput, i: int, prompt_ids: list[int], out: Any, k: int, env: Any, end: _Finished
    ) -> Trajectory:
        """The trajectory of batched row `i`: the prompt ids, row `k` of the engine output `out`, and what its env's
        step, metrics and close did (`end`)."""
        step = self._step_outcome(env, end.step)
        ids = out.response_ids[k]
        rewards = [0.0] * len(ids)
        if rewards:
            rewards[-1] = step["reward"]
        env_error = step["metadata"].get("env_error")
        trajectory = Trajectory(
            uid=gi.uids[i],
            env_class=gi.env_classes[i],
            data_source=gi.env_extras[i].get("data_source"),
            prompt_token_ids=prompt_ids,
            response_ids=ids,
            loss_mask=[1] * len(ids),
            token_rewards=rewards,
            rollout_logprobs=out.response_logprobs[k] if out.response_logprobs else None,
            rollout_top_logprobs=out.response_top_logprobs[k] if out.response_top_logprobs else None,
            stop_reason=out.stop_reasons[k],
            num_turns=1,
            weight_version=out.weight_version,
            token_versions=out.response_token_versions[k] if out.response_token_versions else None,
            env_metrics={} if env_error else end.env_metrics(),
            env_error=env_error,
            response_text=out.responses[k],
        )
        self._apply_reward_rules(trajectory)
        return trajectory

    def _start_episode(self, gi: GeneratorInput, i: int) -> tuple[Any, Any, Optional[dict[str, str]]]:
        """Make and init the env of row `i` (in a pool thread): (env or None, init output or None, failure or None)."""
        env = None
        try:
            env = self._make_env(gi.env_classes[i], gi.env_extras[i])
            return env, env.init(gi.prompts[i]), None
        except Exception as exc:
            failure = {"kind": "init", "reason": f"{type(exc).__name__}: {exc}", "detail": traceback.format_exc()}
            return env, None, failure

    def _started(self, result: EnvCallResult, env_class: str) -> tuple[Any, Any, Optional[dict[str, str]]]:
        """`_start_episode`'s tuple, or a failure record when making and initialising the env timed out."""
        if result.timed_out:
            reason = f"{env_class}: make + init did not return within {self.settings.env_step_timeout_s} s"
            return None, None, {"kind": "init", "reason": reason}
        return result.value  # _start_episode catches its own exceptions

    def close(self) -> None:
        """Stop the env thread pool."""
        self.env_pool.shutdown()
