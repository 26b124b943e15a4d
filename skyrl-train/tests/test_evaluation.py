"""Tests for evaluation: prompts go to the real generator (hf engine, tiny model, arithmetic env) in batches of
`batch_size`, and the metrics and dump cover every prompt whatever the batching."""

import asyncio
import json

import pytest

from skyrl_train.evaluation import evaluate
from skyrl_train.generators import GeneratorSettings, SkyRLGymGenerator
from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient, SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer

GREEDY = SamplingParams(max_tokens=4, temperature=0)


class CountingGenerator(SkyRLGymGenerator):
    """The real generator, recording how many prompts each generate call carried."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.call_sizes = []

    async def generate(self, generator_input):
        self.call_sizes.append(len(generator_input.prompts))
        return await super().generate(generator_input)


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture
def generator(tokenizer):
    client = InferenceEngineClient([HFInferenceEngine(build_tiny_model(TinyModelSpec(size=1), seed=3), tokenizer)])
    return CountingGenerator(client, tokenizer, GeneratorSettings(sampling_params=GREEDY))


def _items(count):
    return [
        {
            "uid": f"q{i}",
            "prompt": [{"role": "user", "content": f"What is {i}+1?"}],
            "env_class": "arithmetic",
            "env_extras": {"reward_spec": {"method": "rule", "ground_truth": str(i + 1)}, "data_source": "add"},
        }
        for i in range(count)
    ]


def test_batches_of_batch_size_prompts_give_the_same_metrics_and_dump(generator, tokenizer, tmp_path):
    items = _items(5)
    whole = asyncio.run(
        evaluate(generator, items, GREEDY, n_samples=2, dump_path=tmp_path / "a.jsonl", tokenizer=tokenizer)
    )
    assert generator.call_sizes == [10]
    generator.call_sizes.clear()
    batched = asyncio.run(
        evaluate(
            generator, items, GREEDY, n_samples=2, dump_path=tmp_path / "b.jsonl", tokenizer=tokenizer, batch_size=2
        )
    )
    assert generator.call_sizes == [4, 4, 2]  # 2 prompts x 2 samples, twice, then the last prompt
    assert batched == whole and "eval/add/pass_at_2" in whole
    lines = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert [line["uid"] for line in lines] == [f"q{i}" for i in range(5) for _ in range(2)]


def test_batch_size_must_be_positive(generator):
    with pytest.raises(ValueError, match="batch_size must be >= 1 or None, got 0"):
        asyncio.run(evaluate(generator, _items(1), GREEDY, batch_size=0))
