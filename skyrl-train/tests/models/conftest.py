"""Fixtures shared by the model tests."""

import pytest
import torch

from skyrl_train.generators.types import Trajectory
from skyrl_train.models.logprobs import response_logprobs


def _rollout_row(uid: str, prompt: list[int], response: list[int]) -> Trajectory:
    n = len(response)
    return Trajectory(
        uid=uid,
        env_class="test",
        prompt_token_ids=prompt,
        response_ids=response,
        loss_mask=[1] * n,
        token_rewards=[0.0] * n,
        rollout_logprobs=[0.0] * n,
        stop_reason="stop",
        num_turns=1,
        weight_version=0,
    )


@pytest.fixture(scope="session")
def rollout_row():
    """`rollout_row(uid, prompt, response)`: a single-turn trajectory with every response token in the loss, zero
    rewards and zero rollout log-probs (the model tests need only the token layout)."""
    return _rollout_row


@pytest.fixture
def logprobs_and_gradients():
    """`logprobs_and_gradients(model, batch, pack=False, share=False, bucket=False)`: the response log-probs and entropies at
    temperature 0.7 (masked), and the gradients by parameter name of a loss using both, for comparing two paths."""

    def run(model, batch, pack: bool = False, share: bool = False, bucket: bool = False):
        model.zero_grad()
        logprobs, entropy = response_logprobs(
            model,
            batch.input_ids,
            batch.attention_mask,
            batch.position_ids,
            batch.prompt_width,
            temperature=0.7,
            with_entropy=True,
            share_prompts=share,
            pack=pack,
            bucket_length=bucket,
        )
        mask = batch.response_mask.float()
        ((logprobs + 0.1 * entropy) * mask).sum().backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        return logprobs * mask, entropy * mask, grads

    return run


def _assert_same_outputs(got, expected, atol: float, gradient_rtol: float, gradient_floor: float) -> None:
    torch.testing.assert_close(got[0], expected[0], atol=atol, rtol=0)
    torch.testing.assert_close(got[1], expected[1], atol=atol, rtol=0)
    assert got[2].keys() == expected[2].keys() and expected[2]
    for name, gradient in expected[2].items():
        bound = gradient_rtol * gradient.abs().max().item() + gradient_floor
        assert (got[2][name] - gradient).abs().max().item() <= bound, name


@pytest.fixture(scope="session")
def assert_same_outputs():
    """`assert_same_outputs(got, expected, atol, gradient_rtol, gradient_floor)`: two `logprobs_and_gradients`
    results agree: log-probs and entropies within `atol`, each parameter's gradient within `gradient_rtol` of its
    largest entry (plus `gradient_floor`), and the same parameters got gradients (some did)."""
    return _assert_same_outputs
