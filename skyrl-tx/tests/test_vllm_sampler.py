"""`--sampler vllm`: saved sampler weights served by the real vLLM (CPU build) as LoRA adapters by name.

The `hf` sampler (peft adapters on the training model) is the reference: greedy tokens are the same, and every
logprob vLLM reports (sampled, top-k, prompt) matches the training model's forward pass. Tolerances: both sides run
float32 on the same weights, but vLLM's CPU kernels sum in another order (and apply LoRA as a separate low-rank
product), so values agree to ~1e-5 here; 2e-3 leaves room for other CPUs and is still far below the differences an
unapplied or wrongly scaled adapter makes (the adapters below move logprobs by > 0.5).

Skipped when vLLM is not installed (the main venv); `bash scripts/test_vllm.sh` runs it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed: run `bash scripts/test_vllm.sh` (CPU build, own venv)")

from skyrl_tx.compute import LoraHost, LoraSpec, SampleJob  # noqa: E402
from skyrl_tx.vllm_sampler import VLLMSampler  # noqa: E402
from skyrl_tx.wire import TrainDatum, WireError  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]

ADAM = {"learning_rate": 2e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "grad_clip_norm": 0}
TOLERANCE = 2e-3


@pytest.fixture(scope="module")
def host(tiny_model_dir) -> LoraHost:
    return LoraHost("org/tiny", tiny_model_dir)


@pytest.fixture(scope="module")
def sampler(host, tiny_model_dir):
    made = VLLMSampler(tiny_model_dir, host.max_context, max_lora_rank=8)
    yield made
    made.close()


def _train(host: LoraHost, name: str, steps: int, spec: LoraSpec) -> None:
    """Teach adapter `name` a sequence so its distribution moves visibly away from the base model's."""
    if name not in host.adapters:
        host.add_adapter(name, spec)
    tokens = [5, 9, 14, 9, 22, 9, 31, 9, 40, 9, 12, 9]
    datum = TrainDatum(tokens=tokens, inputs={"target_tokens": np.array(tokens[1:] + [9]), "weights": np.ones(12)})
    for _ in range(steps):
        host.forward_backward(name, [datum], "cross_entropy", {}, forward_only=False)
        host.optim_step(name, ADAM)


def _job(**overrides) -> SampleJob:
    settings = dict(prompt=[5, 9, 14], num_samples=1, max_tokens=8, temperature=0.0, top_k=-1, top_p=1.0, seed=None)
    settings.update(stop=None, prompt_logprobs=True, topk_prompt_logprobs=3, topk_sample_logprobs=3)
    settings.update(overrides)
    return SampleJob(**settings)


def _close_pairs(left, right) -> bool:
    return all(
        [a for a, _ in x] == [b for b, _ in y] and np.allclose([v for _, v in x], [w for _, w in y], atol=TOLERANCE)
        for x, y in zip(left, right, strict=True)
    )


def _forward_logprobs(host: LoraHost, name: str, prompt: list[int], response: list[int]) -> np.ndarray:
    """The training model's logprobs of `response` after `prompt`, with adapter `name` on."""
    tokens = prompt + response
    datum = TrainDatum(
        tokens=tokens[:-1], inputs={"target_tokens": np.array(tokens[1:]), "weights": np.ones(len(tokens) - 1)}
    )
    outputs, _ = host.forward_backward(name, [datum], "cross_entropy", {}, forward_only=True)
    return outputs[0]["logprobs"][len(prompt) - 1 :]


@pytest.mark.parametrize("train_unembed", [True, False], ids=["with-lm_head", "attention-and-mlp"])
def test_greedy_samples_and_every_logprob_match_the_hf_sampler(host, sampler, tmp_path, train_unembed):
    name = f"greedy-{train_unembed}"
    _train(host, name, 12, LoraSpec(rank=4, seed=0, train_unembed=train_unembed))
    folder = tmp_path / "sampler"
    host.save(name, folder, with_optimizer=False)
    for directory in (None, folder):  # the base model, then the saved adapter
        expected, served = host.sample(directory, [_job()])[0], sampler.sample(directory, [_job()])[0]
        want, got = expected.sequences[0], served.sequences[0]
        assert got.tokens == want.tokens and got.stop_reason == want.stop_reason
        assert np.allclose(got.logprobs, want.logprobs, atol=TOLERANCE)
        assert _close_pairs(got.topk, want.topk)
        assert served.prompt_logprobs[0] is None and expected.prompt_logprobs[0] is None
        assert np.allclose(served.prompt_logprobs[1:], expected.prompt_logprobs[1:], atol=TOLERANCE)
        assert _close_pairs(served.topk_prompt[1:], expected.topk_prompt[1:])
    base = sampler.sample(None, [_job()])[0].prompt_logprobs[1:]
    tuned = sampler.sample(folder, [_job()])[0].prompt_logprobs[1:]
    assert np.abs(np.subtract(tuned, base)).max() > 0.5  # the adapter is applied, not just loaded


def test_seeded_samples_repeat_and_carry_the_training_models_logprobs(host, sampler, tmp_path):
    _train(host, "seeded", 6, LoraSpec(rank=8, seed=1))
    folder = tmp_path / "sampler"
    host.save("seeded", folder, with_optimizer=False)
    job = _job(num_samples=4, temperature=1.0, seed=7, prompt_logprobs=False, topk_prompt_logprobs=0)
    first, again = sampler.sample(folder, [job])[0], sampler.sample(folder, [job])[0]
    assert [row.tokens for row in first.sequences] == [row.tokens for row in again.sequences]
    assert len({tuple(row.tokens) for row in first.sequences}) > 1  # four samples, not one repeated
    for row in first.sequences:
        assert np.allclose(row.logprobs, _forward_logprobs(host, "seeded", job.prompt, row.tokens), atol=TOLERANCE)


def test_weights_saved_again_under_one_name_replace_the_served_adapter(host, sampler, tmp_path):
    spec = LoraSpec(rank=4, seed=2, train_unembed=False)
    _train(host, "again", 4, spec)
    folder = tmp_path / "sampler"
    host.save("again", folder, with_optimizer=False)
    before = sampler.sample(folder, [_job()])[0].prompt_logprobs[1:]
    _train(host, "again", 8, spec)
    os.utime(folder / "adapter_model.safetensors", ns=(1, 1))  # a distinct write time even on a coarse clock
    host.save("again", folder, with_optimizer=False)
    after = sampler.sample(folder, [_job()])[0].prompt_logprobs[1:]
    assert np.abs(np.subtract(after, before)).max() > 1e-2
    assert np.allclose(after, host.sample(folder, [_job()])[0].prompt_logprobs[1:], atol=TOLERANCE)
    assert sum(key.rsplit("@", 1)[0] == str(folder) for key in sampler.adapters) == 1  # the old adapter was dropped


def test_adapters_vllm_cannot_serve_are_refused_before_vllm_sees_them(host, sampler, tmp_path):
    _train(host, "wide", 1, LoraSpec(rank=16, seed=3))
    host.save("wide", tmp_path / "wide", with_optimizer=False)
    with pytest.raises(WireError, match="rank <= 8 \\(--vllm-max-lora-rank\\); these sampler weights have rank 16"):
        sampler.sample(tmp_path / "wide", [_job()])
    _train(host, "head", 1, LoraSpec(rank=2, seed=4, train_unembed=True))
    host.save("head", tmp_path / "head", with_optimizer=False)
    sampler.head_lora = False  # as for an architecture whose vLLM class serves no LoRA on lm_head
    try:
        with pytest.raises(WireError, match="vLLM serves no LoRA on lm_head .* train_unembed=False"):
            sampler.sample(tmp_path / "head", [_job()])
    finally:
        sampler.head_lora = True
    assert sampler.sample(Path(tmp_path / "head"), [_job()])[0].sequences[0].tokens  # the engine still serves
