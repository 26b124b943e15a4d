"""Tests for evaluation: prompts go to the real generator (hf engine, tiny model, arithmetic env) in batches of
`batch_size`, and the metrics and dump cover every prompt whatever the batching."""

import asyncio
import json

import pytest

from skyrl_train.evaluation import evaluate
from skyrl_train.generators import GeneratorSettings, SkyRLGymGenerator
from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient, SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

GREEDY = SamplingParams(max_tokens=4, temperature=0)


class CountingGenerator(SkyRLGymGenerator):
    """The real generator, recording how many prompts each generate call carried."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.call_sizes = []

    async def generate(self, generator_input):
        self.call_sizes.append(len(generator_input.prompts))
        return await super().generate(generator_input)


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


def test_the_runs_reward_scorer_rescores_eval_rollouts(generator, tokenizer, tmp_path):
    # A reward function that replaces the env's reward: eval must report what training would be rewarded with.
    from skyrl_train.rewards.managers import NaiveRewardManager
    from skyrl_train.rewards.scorer import RewardScorer

    def length_score(data_source, solution_str, ground_truth, extra_info=None):
        return 0.1 * len(solution_str) + 0.05  # never 0 or 1, so it cannot pass for an env reward

    scorer = RewardScorer(tokenizer, manager=NaiveRewardManager(length_score))
    items = _items(3)
    metrics = asyncio.run(
        evaluate(
            generator,
            items,
            GREEDY,
            n_samples=2,
            dump_path=tmp_path / "d.jsonl",
            tokenizer=tokenizer,
            batch_size=2,
            score=scorer.score,
        )
    )
    dumped = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert [row["score"] for row in dumped] == pytest.approx([0.1 * len(row["response"]) + 0.05 for row in dumped])
    assert metrics["eval/all/mean_reward"] == pytest.approx(sum(r["score"] for r in dumped) / 6)
    assert metrics["eval/reward/manager_scored"] == 6.0
    assert metrics["eval/reward/manager_errors"] == 0.0
