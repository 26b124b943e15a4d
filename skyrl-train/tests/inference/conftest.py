"""References shared by the engine tests: what one plain HF forward pass says an engine should have returned."""

import pytest
import torch


def _forward_logprobs(model, prompt: list[int], response: list[int], temperature: float) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
    scaled = torch.log_softmax(logits / temperature, dim=-1)
    return scaled.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)


def _max_logprob_error(model, prompts: list[list[int]], output, n: int, temperature: float) -> float:
    errors = []
    for index, (ids, logprobs) in enumerate(zip(output.response_ids, output.response_logprobs)):
        expected = _forward_logprobs(model, prompts[index // n], ids, temperature)
        errors.append((expected - torch.tensor(logprobs)).abs().max().item())
    return max(errors)


def _penalised_greedy(model, prompt: list[int], penalty: float, steps: int) -> tuple[list[int], list[float]]:
    context, ids, logprobs = list(prompt), [], []
    for _ in range(steps):
        with torch.no_grad():
            logits = model(torch.tensor([context])).logits[0, -1].float()
        seen = torch.zeros_like(logits, dtype=torch.bool)
        seen[torch.tensor(sorted(set(context)))] = True
        penalised = torch.where(seen, torch.where(logits > 0, logits / penalty, logits * penalty), logits)
        token = int(penalised.argmax())
        ids.append(token)
        logprobs.append(float(torch.log_softmax(penalised, -1)[token]))
        context.append(token)
    return ids, logprobs


@pytest.fixture(scope="session")
def forward_logprobs():
    """`forward_logprobs(model, prompt, response, temperature)`: `model`'s log-prob of each response token after
    `prompt` at that temperature (one forward pass)."""
    return _forward_logprobs


@pytest.fixture(scope="session")
def max_logprob_error():
    """`max_logprob_error(model, prompts, output, n, temperature)`: the largest gap between an engine's sampled-token
    log-probs (`n` samples per prompt) and `model`'s forward pass at that temperature."""
    return _max_logprob_error


@pytest.fixture(scope="session")
def penalised_greedy():
    """`penalised_greedy(model, prompt, penalty, steps)`: `(ids, logprobs)` of greedy decoding by hand with a
    repetition penalty on every token of prompt + output so far (positive logits divided, negative multiplied)."""
    return _penalised_greedy
