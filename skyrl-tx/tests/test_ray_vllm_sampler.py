"""`--sampler vllm --compute ray`: the vLLM sampler in a Ray actor of its own, fed sampler weights as file bytes.

The in-process `hf` sampler is the reference, as in test_vllm_sampler.py (same tolerance, same reasoning), and the
official client drives a `--compute ray --sampler vllm` server. Skipped when vLLM is not installed (the main venv);
`bash scripts/test_vllm.sh` runs it.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed: run `bash scripts/test_vllm.sh` (CPU build, own venv)")

from tinker import types  # noqa: E402

from skyrl_tx.cli import DEFAULT_BASE_MODEL  # noqa: E402
from skyrl_tx.compute import LoraHost, LoraSpec, SampleJob  # noqa: E402
from skyrl_tx.local_server import LocalServer  # noqa: E402
from skyrl_tx.wire import TrainDatum, WireError  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]

ADAM = {"learning_rate": 2e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "grad_clip_norm": 0}
TOLERANCE = 2e-3


def _train(host: LoraHost, name: str, steps: int) -> None:
    tokens = [5, 9, 14, 9, 22, 9, 31, 9, 40, 9, 12, 9]
    datum = TrainDatum(tokens=tokens, inputs={"target_tokens": np.array(tokens[1:] + [9]), "weights": np.ones(12)})
    for _ in range(steps):
        host.forward_backward(name, [datum], "cross_entropy", {}, forward_only=False)
        host.optim_step(name, ADAM)


def _job() -> SampleJob:
    return SampleJob(
        prompt=[5, 9, 14], num_samples=1, max_tokens=8, temperature=0.0, top_k=-1, top_p=1.0, seed=None, stop=None,
        prompt_logprobs=True,
    )  # fmt: skip


def test_the_actor_samples_what_the_hf_sampler_does_and_takes_re_saved_weights(ray_cluster, tiny_model_dir, tmp_path):
    from skyrl_tx.ray_vllm_sampler import RayVLLMSampler

    host = LoraHost("org/tiny", tiny_model_dir)
    host.add_adapter("a", LoraSpec(rank=4, seed=0))  # Tinker's default parts, lm_head included
    sampler = RayVLLMSampler(tiny_model_dir, host.max_context, max_lora_rank=8)
    try:
        folder = tmp_path / "sampler"
        for steps in (10, 6):  # a first save, then more training saved again under the same name
            _train(host, "a", steps)
            host.save("a", folder, with_optimizer=False)
            for directory in (None, folder):
                want, got = host.sample(directory, [_job()])[0], sampler.sample(directory, [_job()])[0]
                assert got.sequences[0].tokens == want.sequences[0].tokens
                assert np.allclose(got.sequences[0].logprobs, want.sequences[0].logprobs, atol=TOLERANCE)
                assert np.allclose(got.prompt_logprobs[1:], want.prompt_logprobs[1:], atol=TOLERANCE)
        host.add_adapter("wide", LoraSpec(rank=16, seed=1))
        host.save("wide", tmp_path / "wide", with_optimizer=False)
        with pytest.raises(WireError, match="rank <= 8"):  # the actor's refusal reaches the server as a user error
            sampler.sample(tmp_path / "wide", [_job()])
    finally:
        sampler.close()


def test_a_ray_server_samples_through_its_vllm_actor(ray_cluster, make_client, tmp_path):
    server = LocalServer(tmp_path, extra_args=["--compute", "ray", "--ray-address", ray_cluster, "--sampler", "vllm"])
    server.start()
    try:
        training = make_client(server.url, server.api_key).create_lora_training_client(
            base_model=DEFAULT_BASE_MODEL, rank=8, seed=0
        )
        training = training.result()
        tokenizer = training.get_tokenizer()
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": "7+8"}], add_generation_prompt=True)
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        tokens = prompt + tokenizer.encode("15", add_special_tokens=False) + [tokenizer.eos_token_id]
        weights = [0.0] * (len(prompt) - 1) + [1.0] * (len(tokens) - len(prompt))
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights},
        )
        for _ in range(3):
            training.forward_backward([datum], "cross_entropy").result()
            training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        sampler = training.save_weights_and_get_sampling_client().result()
        logprobs = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
        forward = training.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
        assert logprobs[0] is None and np.allclose(logprobs[1:], forward, atol=TOLERANCE)
        assert "sampling on vLLM" in server.log_path.read_text()
    finally:
        server.stop()
