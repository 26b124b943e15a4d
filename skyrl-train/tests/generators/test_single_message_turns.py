"""`use_conversation_multi_turn=false` (SkyRL's key): the whole episode is one assistant message. The model's turns
and the observations' raw text follow each other, a turn's closing eos leaves the context when the episode goes on,
and the trajectory stays token-in/token-out: each turn's request is the prompt plus the response so far, and only the
model's own tokens are in the loss.

The first test scripts the policy's tokens (the tiny random model emits one token forever, never an eos followed by
more turns), so the expected trajectory is written out by hand; the second runs the real hf engine on the tiny model.
"""

import asyncio

import pytest

import skyrl_gym
from skyrl_gym import BaseTextEnv
from skyrl_train.config import SkyRLConfig
from skyrl_train.config.validation import find_problems
from skyrl_train.generators import GeneratorInput, GeneratorSettings, SkyRLGymGenerator
from skyrl_train.generators.chat import prompt_token_ids
from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient, SamplingParams
from skyrl_train.inference.types import InferenceEngineInput, InferenceEngineOutput
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

EVERY_CHAR_STOPS = tuple(range(5, 102))  # every non-special token id ends a turn: deterministic short turns


class TaggedObservationEnv(BaseTextEnv):
    """Answers turn t with the observation `<o t>` and reward 0.25 * t, until `max_turns` ends the episode."""

    def _step(self, action):
        return {
            "observations": [{"role": "user", "content": f"<o{self.turns}>"}],
            "reward": 0.25 * self.turns,
            "done": False,
        }


class ScriptedPolicy:
    """An engine whose turns are written in advance: (text, ends with eos) per call, logprob -0.1 * (k + 1) on the
    k-th token of the episode's call; it records every request's token ids."""

    def __init__(self, tokenizer, turns: list[tuple[str, bool]]) -> None:
        self.tokenizer, self.turns, self.requests = tokenizer, list(turns), []

    async def generate(self, request: InferenceEngineInput) -> InferenceEngineOutput:
        self.requests.append(list(request.prompt_token_ids[0]))
        text, eos = self.turns[len(self.requests) - 1]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + ([self.tokenizer.eos_token_id] if eos else [])
        logprobs = [-0.1 * (k + 1) for k in range(len(ids))]
        return InferenceEngineOutput(
            responses=[text], response_ids=[ids], stop_reasons=["stop"], response_logprobs=[logprobs]
        )


@pytest.fixture(scope="module", autouse=True)
def tagged_env():
    skyrl_gym.register("tagged", TaggedObservationEnv)
    yield
    skyrl_gym.deregister("tagged")


def _input(content="Q?"):
    return GeneratorInput(
        prompts=[[{"role": "user", "content": content}]],
        env_classes=["tagged"],
        env_extras=[{"reward_spec": {"method": "rule", "ground_truth": "x"}}],
        uids=["0"],
    )


def _rollout(engine, tokenizer, single_message: bool, params: SamplingParams, max_turns: int = 3):
    settings = GeneratorSettings(
        sampling_params=params, max_turns=max_turns, use_conversation_multi_turn=not single_message
    )
    (trajectory,) = asyncio.run(SkyRLGymGenerator(engine, tokenizer, settings).generate(_input())).trajectories
    return trajectory


def test_turns_and_observations_share_one_assistant_message(tokenizer):
    ids = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    eos = tokenizer.eos_token_id
    # turn 1 ends on eos, turn 2 on a stop string (no eos), turn 3 (the last) on eos
    policy = ScriptedPolicy(tokenizer, [("ab", True), ("cd", False), ("e", True)])
    t = _rollout(policy, tokenizer, True, SamplingParams(max_tokens=8))

    prompt = prompt_token_ids(tokenizer, [{"role": "user", "content": "Q?"}])
    assert t.prompt_token_ids == prompt
    # turn 1's eos is gone (the message goes on); the observations are their raw text; the last eos stays
    assert t.response_ids == ids("ab") + ids("<o1>") + ids("cd") + ids("<o2>") + ids("e") + [eos]
    assert t.loss_mask == [1, 1] + [0] * 4 + [1, 1] + [0] * 4 + [1, 1]
    # the engine's own logprobs on its tokens (turn 1's eos and its logprob dropped), 0 on observation tokens
    assert t.rollout_logprobs == pytest.approx([-0.1, -0.2] + [0.0] * 4 + [-0.1, -0.2] + [0.0] * 4 + [-0.1, -0.2])
    # each turn's reward on that turn's last kept token: turn 1's moved from its dropped eos to "b"
    assert t.token_rewards == pytest.approx([0, 0.25] + [0] * 4 + [0, 0.5] + [0] * 4 + [0, 0.75])
    assert t.num_turns == 3 and t.stop_reason == "stop"
    # token-in/token-out: each request is the prompt plus the response so far
    assert policy.requests == [prompt, prompt + t.response_ids[:6], prompt + t.response_ids[:12]]


def test_the_default_renders_each_observation_as_a_chat_message(tokenizer):
    policy = ScriptedPolicy(tokenizer, [("ab", True), ("cd", False), ("e", True)])
    t = _rollout(policy, tokenizer, False, SamplingParams(max_tokens=8))
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    observation_tokens = [i for i, m in zip(t.response_ids, t.loss_mask) if m == 0]
    assert start in observation_tokens and tokenizer.eos_token_id in observation_tokens  # turns closed, then a message
    assert t.response_ids[:2] == tokenizer.encode("ab", add_special_tokens=False)


def test_the_hf_engine_continues_its_message_token_in_token_out(tokenizer):
    engine = InferenceEngineClient([HFInferenceEngine(build_tiny_model(TinyModelSpec(size=1), seed=3), tokenizer)])
    requests = []

    class Recording:
        async def generate(self, request):
            requests.append(list(request.prompt_token_ids[0]))
            return await engine.generate(request)

    params = SamplingParams(max_tokens=4, temperature=0, stop_token_ids=EVERY_CHAR_STOPS)
    t = _rollout(Recording(), tokenizer, True, params)
    assert t.num_turns == 3 and len(requests) == 3
    full = t.prompt_token_ids + t.response_ids
    assert all(full[: len(request)] == request for request in requests)  # every context is a prefix of the episode
    generated = [i for i, m in zip(t.response_ids, t.loss_mask) if m == 1]
    observed = [i for i, m in zip(t.response_ids, t.loss_mask) if m == 0]
    assert len(generated) == 3  # one token per turn (each ends on a stop token id, never an eos here)
    assert observed == tokenizer.encode("<o1><o2>", add_special_tokens=False)
    assert all(lp == 0.0 for lp, m in zip(t.rollout_logprobs, t.loss_mask) if m == 0)
    assert all(lp < 0.0 for lp, m in zip(t.rollout_logprobs, t.loss_mask) if m == 1)


def test_step_wise_trajectories_and_workflows_refuse_one_message_episodes():
    with pytest.raises(ValueError, match="step_wise_trajectories needs use_conversation_multi_turn=True"):
        GeneratorSettings(max_turns=2, step_wise_trajectories=True, use_conversation_multi_turn=False)
    problems = find_problems(
        SkyRLConfig.from_cli_overrides(
            ["generator.use_conversation_multi_turn=false", "generator.step_wise_trajectories=true"], validate=False
        )
    )
    assert any("use_conversation_multi_turn=false does not work with" in p for p in problems)
    workflow = ["generator.use_conversation_multi_turn=false", "generator.workflow=mine"]
    problems = find_problems(SkyRLConfig.from_cli_overrides(workflow, validate=False))
    assert any("has no effect with generator.workflow=mine" in p for p in problems)
