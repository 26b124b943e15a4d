"""The Megatron strategy on a CUDA GPU (marked `megatron`; run by scripts/gpu_smoke.sh): logits equal to the HF
model's, a training step that changes the weights, weights gathered back to HF names, and a checkpoint round trip.
Never run on this project's CPU CI."""

import os
import socket

import pytest
import torch
import torch.distributed as dist

from skyrl_train.config.roles import MegatronConfig, OptimizerConfig
from skyrl_train.models.tiny import build_tiny_model
from skyrl_train.recipes.warm_start import WarmStartSettings

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="the Megatron strategy needs a CUDA GPU"),
]


@pytest.fixture(scope="module")
def nccl_world_of_one():
    pytest.importorskip("megatron.core", reason="needs megatron-core (pip install -e './skyrl-train[megatron]')")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=0, world_size=1)
    yield
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


def _batch(vocab_size, device):
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, vocab_size, (3, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :4] = 0
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return {
        k: v.to(device)
        for k, v in dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).items()
    }


def _strategy(optimizer=True):
    from skyrl_train.workers.strategy.megatron import MegatronStrategy

    config = OptimizerConfig(lr=1e-3, scheduler="constant", max_grad_norm=1.0) if optimizer else None
    return MegatronStrategy(MegatronConfig(param_dtype="float32"), torch.device("cuda", 0), config)


def test_logits_match_the_hf_model_and_a_step_moves_the_weights(nccl_world_of_one, tmp_path):
    hf = build_tiny_model(WarmStartSettings().model_spec, seed=2).eval()
    strategy = _strategy()
    model = strategy.prepare(hf, num_training_steps=4)
    batch = _batch(hf.config.vocab_size, "cuda")
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf.cuda()(**batch).logits
        actual = model(**batch).logits
    # float32 on both sides; different matmul orderings give ~1e-6 relative differences
    torch.testing.assert_close(actual[real], expected[real], rtol=1e-4, atol=1e-4)
    before = {k: v.clone() for k, v in strategy.full_state_dict().items()}
    assert sorted(before) == sorted(hf.state_dict())

    logits = model(**batch).logits
    loss = torch.nn.functional.cross_entropy(logits[real][:-1], batch["input_ids"][real][1:])
    strategy.backward(loss)
    grad_norm = strategy.optimizer_step()
    assert grad_norm > 0 and grad_norm == grad_norm
    after = strategy.full_state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert "model.layers.0.self_attn.q_proj.weight" in changed

    # the gathered HF weights reproduce the trained Megatron model's logits
    hf.load_state_dict(after, strict=True)
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits[real], hf(**batch).logits[real], rtol=1e-4, atol=1e-4)

    strategy.save_checkpoint(tmp_path / "ckpt", extra={"role": "policy"})
    saved = strategy.full_state_dict()
    strategy.backward(model(**batch).logits.float().pow(2).mean())
    strategy.optimizer_step()
    assert strategy.load_checkpoint(tmp_path / "ckpt") == {"role": "policy"}
    restored = strategy.full_state_dict()
    for key in saved:
        assert torch.equal(restored[key], saved[key]), key

    strategy.save_hf_model(tmp_path / "hf")
    reloaded = type(hf).from_pretrained(tmp_path / "hf").cuda().eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits[real], model(**batch).logits[real], rtol=1e-4, atol=1e-4)


def test_a_lora_step_moves_the_adapters_only_and_its_optimizer_state_round_trips(nccl_world_of_one, tmp_path):
    from skyrl_train.models.lora import LoRASettings, apply_lora

    peft = apply_lora(build_tiny_model(WarmStartSettings().model_spec, seed=2), LoRASettings(rank=4, alpha=8))
    strategy = _strategy()
    model = strategy.prepare(peft, num_training_steps=4)
    batch = _batch(peft.get_base_model().config.vocab_size, "cuda")
    real = batch["attention_mask"].bool()
    base_before = strategy.full_state_dict()
    adapters_before = strategy.trainable_state_dict()

    def step():
        logits = model(**batch).logits
        strategy.backward(torch.nn.functional.cross_entropy(logits[real][:-1], batch["input_ids"][real][1:]))
        return strategy.optimizer_step()

    assert step() > 0
    adapters_after = strategy.trainable_state_dict()
    assert any(not torch.equal(adapters_before[k], adapters_after[k]) for k in adapters_before if "lora_B" in k)
    base_after = strategy.full_state_dict()
    assert all(torch.equal(base_before[k], base_after[k]) for k in base_before)  # the base is frozen

    strategy.save_checkpoint(tmp_path / "ckpt")
    step()
    strategy.load_checkpoint(tmp_path / "ckpt")
    restored = strategy.trainable_state_dict()
    assert all(torch.equal(restored[k], adapters_after[k]) for k in adapters_after)
    with torch.no_grad(), model.disable_adapter(), peft.cuda().disable_adapter():
        base_logits = model(**batch).logits
        expected = peft(**batch).logits
    torch.testing.assert_close(base_logits[real], expected[real], rtol=1e-4, atol=1e-4)
