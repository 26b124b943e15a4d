"""Shared by the engine tests: references from one plain HF forward pass (what an engine should have returned), the
old/new tiny model pair a weight-update test serves, and a decode step held while a weight update queues."""

import time

import pytest
import torch

from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer


def _forward_log_softmax(model, prompt: list[int], response: list[int], temperature: float = 1.0) -> torch.Tensor:
    """Log-probabilities over the vocabulary at each response position, from one forward pass of prompt + response."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits / temperature, dim=-1)


def _forward_logprobs(model, prompt: list[int], response: list[int], temperature: float) -> torch.Tensor:
    scaled = _forward_log_softmax(model, prompt, response, temperature)
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


def _is_greedy(model, prompt: list[int], response: list[int], tolerance: float = 1e-4) -> bool:
    logprobs = _forward_log_softmax(model, prompt, response)
    chosen = logprobs.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)
    return bool((chosen >= logprobs.max(dim=-1).values - tolerance).all())


def _check_top_logprobs(model, prompts: list[list[int]], output, k: int, tolerance: float) -> None:
    for prompt, response, tops in zip(prompts, output.response_ids, output.response_top_logprobs, strict=True):
        assert len(tops) == len(response)
        values, ids = torch.topk(_forward_log_softmax(model, prompt, response), k, dim=-1)
        assert [[token for token, _ in step] for step in tops] == ids.tolist()
        got = torch.tensor([[logprob for _, logprob in step] for step in tops])
        assert (got - values).abs().max().item() < tolerance


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


def _hold_third_step(step, update_waiting):
    calls: list[None] = []

    def counted(*args):
        out = step(*args)
        calls.append(None)
        if len(calls) == 3:
            deadline = time.monotonic() + 30
            while not update_waiting() and time.monotonic() < deadline:
                time.sleep(0.001)
        return out

    return counted, calls


@pytest.fixture(scope="session")
def hold_third_step():
    """`hold_third_step(step, update_waiting)`: `(counted, calls)`, where `counted` runs an engine's decode `step`,
    adds each call to `calls` and holds the third (up to 30 s) until `update_waiting()` is true, so a weight update
    sent after the second step lands between the third and the fourth."""
    return _hold_third_step


@pytest.fixture(scope="session")
def check_top_logprobs():
    """`check_top_logprobs(model, prompts, output, k, tolerance)`: asserts that at every response position the
    engine's `k` top log-probs name the top-`k` tokens of `model`'s forward pass, in order, within `tolerance`."""
    return _check_top_logprobs


@pytest.fixture(scope="session")
def is_greedy():
    """`is_greedy(model, prompt, response, tolerance=1e-4)`: every response token is (up to ties) the most likely next
    token under `model` (one fp32 forward pass on CPU)."""
    return _is_greedy


@pytest.fixture
def old_and_new_model(tmp_path):
    """`(tokenizer, old, new)`: two tiny models with the char tokenizer, `old` saved with it in `tmp_path` (what an
    engine loads) and `new` with weights scaled by 3 (what a weight update sends: a clearly different greedy
    continuation)."""
    tokenizer = build_char_tokenizer()
    old, new = build_tiny_model(TinyModelSpec(size=2), seed=0), build_tiny_model(TinyModelSpec(size=2), seed=1)
    with torch.no_grad():
        for parameter in new.parameters():
            parameter.mul_(3.0)
    old.save_pretrained(tmp_path)
    save_tokenizer(tokenizer, tmp_path)
    return tokenizer, old, new
