"""FSDP2Strategy pieces in-process (world size 1): layer discovery, mesh checks, RNG state, skipped non-finite steps."""

import random

import numpy as np
import pytest
import torch

from skyrl_train.config import FSDPConfig, OptimizerConfig
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.workers.strategy import STRATEGIES, FSDP2Strategy, strategy_class
from skyrl_train.workers.strategy.fsdp2 import capture_rng_state, layer_modules, restore_rng_state


def test_strategy_registry_names_the_config_field():
    assert strategy_class("fsdp2") is FSDP2Strategy and "fsdp2" in STRATEGIES
    with pytest.raises(ValueError, match="trainer.strategy='megatron' is not available"):
        strategy_class("megatron")


def test_each_decoder_layer_is_a_shard_unit():
    model = build_tiny_model(TinyModelSpec(size=2))
    layers = layer_modules(model)
    assert [type(layer).__name__ for layer in layers] == ["Qwen2DecoderLayer", "Qwen2DecoderLayer"]


def test_rng_state_round_trip():
    state = capture_rng_state()
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    restore_rng_state(state)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_fsdp_size_must_divide_the_world(single_rank_group):
    strategy = FSDP2Strategy(FSDPConfig(fsdp_size=3), torch.device("cpu"))
    with pytest.raises(ValueError, match="fsdp.fsdp_size must be -1 or a positive divisor of the 1 ranks, got 3"):
        strategy.device_mesh()


def test_non_finite_gradient_skips_the_update(single_rank_group):
    strategy = FSDP2Strategy(FSDPConfig(), torch.device("cpu"), optimizer=OptimizerConfig(lr=0.1))
    model = strategy.prepare(build_tiny_model(TinyModelSpec(size=1)))
    before = {name: tensor.clone() for name, tensor in strategy.full_state_dict().items()}
    logits = model(torch.tensor([[5, 6, 7]])).logits
    strategy.backward(logits.float().sum() * float("nan"))
    assert np.isnan(strategy.optimizer_step())
    after = strategy.full_state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert all(p.grad is None for p in model.parameters())
    assert strategy.scheduler.last_epoch == 0  # the schedule did not advance either


def test_fsdp_section_sets_the_shard_options(single_rank_group, caplog):
    section = FSDPConfig(reshard_after_forward=False, cpu_offload=True)
    section.mixed_precision.param_dtype, section.mixed_precision.reduce_dtype = "bfloat16", "bfloat16"
    with caplog.at_level("INFO", logger="skyrl_train.workers.strategy.fsdp2"):
        kwargs = FSDP2Strategy(section, torch.device("cpu"))._shard_kwargs()
    assert kwargs["reshard_after_forward"] is False
    assert (kwargs["mp_policy"].param_dtype, kwargs["mp_policy"].reduce_dtype) == (torch.bfloat16, torch.bfloat16)
    assert "offload_policy" not in kwargs and "fsdp.cpu_offload has no effect on trainer.device=cpu" in caplog.text
    default = FSDP2Strategy(FSDPConfig(), torch.device("cpu"))._shard_kwargs()
    assert default["reshard_after_forward"] is True
    assert (default["mp_policy"].param_dtype, default["mp_policy"].reduce_dtype) == (torch.bfloat16, torch.float32)
    fp32 = FSDPConfig()
    fp32.mixed_precision.param_dtype = "float32"
    assert FSDP2Strategy(fp32, torch.device("cpu"))._shard_kwargs()["mp_policy"].param_dtype is None  # no casting


@pytest.mark.parametrize(("max_grad_norm", "clipped"), [(1e-3, True), (1e6, False), (0.0, False)])
def test_max_grad_norm_clips_the_update(single_rank_group, max_grad_norm, clipped):
    # The gradient norm the optimizer sees (read in a step pre-hook) is the clipped one.
    strategy = FSDP2Strategy(
        FSDPConfig(), torch.device("cpu"), optimizer=OptimizerConfig(lr=0.0, max_grad_norm=max_grad_norm)
    )
    model = strategy.prepare(build_tiny_model(TinyModelSpec(size=1)))
    model(torch.tensor([[5, 6, 7]])).logits.float().pow(2).sum().backward()
    seen = {}

    def record(optimizer, args, kwargs):
        grads = [p.grad.full_tensor() for p in model.parameters()]
        seen["norm"] = float(torch.nn.utils.get_total_norm(grads))

    strategy.optimizer.register_step_pre_hook(record)
    norm_before = strategy.optimizer_step()
    assert norm_before > 1e-2  # the raw gradient is far above the smallest limit
    if clipped:
        assert seen["norm"] == pytest.approx(max_grad_norm, rel=1e-3)  # clip_grad_norm_ scales to the limit
    else:
        assert seen["norm"] == pytest.approx(norm_before, rel=1e-5)  # 0 means no clipping; 1e6 is never reached
