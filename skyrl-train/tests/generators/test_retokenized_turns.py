"""`retokenize_chat_history`: each turn's prompt is the chat template applied to the conversation so far, with the
real hf engine, the tiny model and a real skyrl-gym env."""

import asyncio
import copy

import pytest

import skyrl_gym
from skyrl_gym import BaseTextEnv
from skyrl_train.generators import GeneratorInput, GeneratorSettings, SkyRLGymGenerator
from skyrl_train.generators.chat import prompt_token_ids
from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient, SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

EVERY_CHAR_STOPS = tuple(range(5, 102))  # every non-special token id ends a turn: deterministic short turns
HISTORY_SUMMARIZING_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['role'] == 'assistant' %}(an earlier answer){% else %}{{ message['content'] }}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A template that renders earlier assistant turns unlike the model wrote them (as Qwen3's drops their thinking)."""


class EchoEnv(BaseTextEnv):
    """Never done by itself: answers each turn with an observation quoting the action, reward 0.5 per turn."""

    def _step(self, action):
        return {"observations": [{"role": "user", "content": f"you said {action!r}"}], "reward": 0.5, "done": False}


@pytest.fixture(scope="module", autouse=True)
def echo_env():
    skyrl_gym.register("echo", EchoEnv)
    yield
    skyrl_gym.deregister("echo")


@pytest.fixture(scope="module")
def summarizing_tokenizer(tokenizer):
    rewritten = copy.deepcopy(tokenizer)
    rewritten.chat_template = HISTORY_SUMMARIZING_TEMPLATE
    return rewritten


def _rollout(tokenizer, **settings):
    client = InferenceEngineClient([HFInferenceEngine(build_tiny_model(TinyModelSpec(size=1), seed=3), tokenizer)])
    params = SamplingParams(max_tokens=4, temperature=0, stop_token_ids=EVERY_CHAR_STOPS, logprobs=True)
    generator = SkyRLGymGenerator(
        client, tokenizer, GeneratorSettings(sampling_params=params, max_turns=3, max_input_length=400, **settings)
    )
    gi = GeneratorInput(
        prompts=[[{"role": "user", "content": "What is 2+3?"}]],
        env_classes=["echo"],
        env_extras=[{"reward_spec": {"method": "rule", "ground_truth": "5"}, "data_source": "t"}],
        uids=["0"],
    )
    return asyncio.run(generator.generate(gi)).trajectories


def test_each_step_prompt_is_the_templated_conversation_so_far(summarizing_tokenizer):
    steps = _rollout(summarizing_tokenizer, step_wise_trajectories=True, retokenize_chat_history=True)
    assert [step.step_index for step in steps] == [0, 1, 2]
    chat = [{"role": "user", "content": "What is 2+3?"}]
    for step in steps:
        assert step.prompt_token_ids == prompt_token_ids(summarizing_tokenizer, chat)
        said = summarizing_tokenizer.decode(step.response_ids, skip_special_tokens=True)
        chat += [{"role": "assistant", "content": said}, {"role": "user", "content": f"you said {said!r}"}]
    later = summarizing_tokenizer.decode(steps[2].prompt_token_ids)
    assert later.count("(an earlier answer)") == 2
    # what is trained is still the model's own tokens, with the logprobs the engine gave them
    for step in steps:
        assert step.response_ids and step.loss_mask == [1] * len(step.response_ids)
        assert len(step.rollout_logprobs) == len(step.response_ids) and all(lp <= 0 for lp in step.rollout_logprobs)
    assert all(step.reward == pytest.approx(1.5) for step in steps)


def test_token_in_token_out_refuses_a_template_that_rewrites_earlier_turns_and_names_the_way_out(
    summarizing_tokenizer,
):
    with pytest.raises(ValueError, match="generator.retokenize_chat_history=true"):
        _rollout(summarizing_tokenizer, step_wise_trajectories=True)


def test_with_the_plain_template_both_ways_give_the_same_samples(tokenizer):
    retokenized = _rollout(tokenizer, step_wise_trajectories=True, retokenize_chat_history=True)
    kept = _rollout(tokenizer, step_wise_trajectories=True)
    assert [s.response_ids for s in retokenized] == [s.response_ids for s in kept]
    logprobs = [[lp for s in steps for lp in s.rollout_logprobs] for steps in (retokenized, kept)]
    assert logprobs[0] == pytest.approx(logprobs[1], abs=1e-5)


def test_without_step_wise_samples_it_is_refused():
    with pytest.raises(ValueError, match="retokenize_chat_history needs step_wise_trajectories"):
        GeneratorSettings(retokenize_chat_history=True)
