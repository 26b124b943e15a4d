"""Response log-probs with shared prompts: rows that repeat a prompt run it once, and the log-probs, entropies and
gradients equal those of the full forward."""

import random

import pytest
import torch

from skyrl_train.models.logprobs import response_logprobs, shared_prompts
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.training_batch import TrainingBatch

LOGPROB_TOLERANCE = 1e-4
"""fp32: the shared path attends over the same keys with other matmul shapes, so only summation order differs
(~1e-6 observed)."""
GRADIENT_RELATIVE_TOLERANCE = 1e-4
"""The same summation-order noise, relative to the largest gradient entry of each parameter."""


@pytest.fixture(scope="module")
def grouped_batch(rollout_row):
    """`grouped_batch(groups, samples, seed=0)`: `groups` prompts of different lengths (so rows are left-padded), each
    with `samples` random responses."""

    def build(groups: int, samples: int, seed: int = 0) -> TrainingBatch:
        rng = random.Random(seed)
        rows = []
        for group in range(groups):
            prompt = [rng.randrange(5, 100) for _ in range(rng.randint(3, 12))]
            for _ in range(samples):
                response = [rng.randrange(5, 100) for _ in range(rng.randint(1, 8))]
                rows.append(rollout_row(str(group), prompt, response))
        return TrainingBatch.from_trajectories(rows, pad_token_id=0)

    return build


@pytest.fixture(scope="module")
def model():
    return build_tiny_model(TinyModelSpec(size=2), seed=0)


def test_shared_prompts_give_the_full_forwards_logprobs_entropy_and_gradients(
    model, logprobs_and_gradients, grouped_batch, assert_same_outputs
):
    batch = grouped_batch(groups=5, samples=4)
    full, shared = logprobs_and_gradients(model, batch), logprobs_and_gradients(model, batch, share=True)
    assert_same_outputs(shared, full, LOGPROB_TOLERANCE, GRADIENT_RELATIVE_TOLERANCE, 1e-8)


def test_each_distinct_prompt_runs_once(model, monkeypatch, grouped_batch):
    batch = grouped_batch(groups=3, samples=4)
    calls = []
    forward = model.forward

    def recording_forward(*args, **kwargs):
        calls.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", recording_forward)
    with torch.no_grad():
        response_logprobs(
            model, batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width, share_prompts=True
        )
    response_width = batch.input_ids.shape[1] - batch.prompt_width
    assert calls == [(3, batch.prompt_width), (12, response_width)]


def test_prompts_are_shared_only_when_rows_repeat_them(grouped_batch):
    repeated = grouped_batch(groups=2, samples=3)
    first, inverse = shared_prompts(
        repeated.input_ids, repeated.attention_mask, repeated.position_ids, repeated.prompt_width
    )
    assert inverse.tolist() in ([0, 0, 0, 1, 1, 1], [1, 1, 1, 0, 0, 0])
    assert sorted(first.tolist()) == [0, 3]
    distinct = grouped_batch(groups=6, samples=1)
    assert (
        shared_prompts(distinct.input_ids, distinct.attention_mask, distinct.position_ids, distinct.prompt_width)
        is None
    )
