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
