"""Fixtures shared by the model tests."""

import pytest

from skyrl_train.models.logprobs import response_logprobs


@pytest.fixture
def logprobs_and_gradients():
    """`logprobs_and_gradients(model, batch, pack=False, share=False)`: the response log-probs and entropies at
    temperature 0.7 (masked), and the gradients by parameter name of a loss using both, for comparing two paths."""

    def run(model, batch, pack: bool = False, share: bool = False):
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
        )
        mask = batch.response_mask.float()
        ((logprobs + 0.1 * entropy) * mask).sum().backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        return logprobs * mask, entropy * mask, grads

    return run
