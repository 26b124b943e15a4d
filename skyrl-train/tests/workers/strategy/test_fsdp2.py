"""FSDP2Strategy pieces in-process (world size 1): layer discovery, mesh checks, RNG state, skipped non-finite steps."""

import random

import numpy as np
import pytest
import torch
from torch.distributed.tensor import DTensor

from skyrl_train.config import FSDPConfig, OptimizerConfig
from skyrl_train.config.roles import MixedPrecisionConfig
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.workers.strategy import STRATEGIES, FSDP2Strategy, strategy_class
from skyrl_train.workers.strategy.fsdp2 import capture_rng_state, layer_modules, restore_rng_state


def test_strategy_registry_names_the_config_field():
    assert strategy_class("fsdp2") is FSDP2Strategy and sorted(STRATEGIES) == ["fsdp2", "megatron"]
    with pytest.raises(
        ValueError, match=r"trainer.strategy='deepspeed' is not available; expected one of \['fsdp2', 'megatron'\]"
    ):
        strategy_class("deepspeed")


def test_each_decoder_layer_is_a_shard_unit():
    model = build_tiny_model(TinyModelSpec(size=2))
    layers = layer_modules(model)
    assert [type(layer).__name__ for layer in layers] == ["Qwen2DecoderLayer", "Qwen2DecoderLayer"]


@pytest.mark.parametrize("shard_layers", [True, False])
def test_shard_layers_decides_whether_each_decoder_layer_is_its_own_fsdp_unit(single_rank_group, shard_layers):
    from torch.distributed.fsdp import FSDPModule

    strategy = FSDP2Strategy(FSDPConfig(shard_layers=shard_layers), torch.device("cpu"), optimizer=OptimizerConfig())
    model = strategy.prepare(build_tiny_model(TinyModelSpec(size=2)))
    units = [type(module).__name__.removeprefix("FSDP") for module in model.modules() if isinstance(module, FSDPModule)]
    layer_units = ["Qwen2DecoderLayer", "Qwen2DecoderLayer"] if shard_layers else []
    assert sorted(units) == sorted(["Qwen2ForCausalLM", *layer_units])
    assert all(isinstance(param, DTensor) for param in model.parameters())  # sharded either way


@pytest.mark.parametrize("keep", [False, True])
def test_a_frozen_model_may_be_sharded_in_its_own_dtype(single_rank_group, keep):
    bf16 = FSDPConfig(mixed_precision=MixedPrecisionConfig(param_dtype="bfloat16"))  # `auto` picks float32 on CPU
    strategy = FSDP2Strategy(bf16, torch.device("cpu"))
    strategy.keep_model_dtype = keep
    model = build_tiny_model(TinyModelSpec(size=1)).to(torch.bfloat16).requires_grad_(False)
    model = strategy.prepare(model)
    assert {param.dtype for param in model.parameters()} == {torch.bfloat16 if keep else torch.float32}
    # peft sizes LoRA layers injected after sharding (skyrl-tx) by the full weight only on a mesh named `fsdp`
    assert {param.device_mesh.mesh_dim_names for param in model.parameters()} == {("fsdp",)}
    assert model(torch.tensor([[5, 6, 7]])).logits.dtype == torch.bfloat16  # computes in param_dtype either way


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


def _cosine_strategy(total_steps):
    config = OptimizerConfig(lr=0.1, scheduler="cosine", num_warmup_steps=0)
    strategy = FSDP2Strategy(FSDPConfig(), torch.device("cpu"), optimizer=config)
    return strategy, strategy.prepare(build_tiny_model(TinyModelSpec(size=1), seed=0), num_training_steps=total_steps)


def _train_step(strategy, model):
    strategy.backward(model(torch.tensor([[5, 6, 7]])).logits.float().pow(2).mean())
    strategy.optimizer_step()


def test_checkpoint_extra_state_is_json_and_keeps_the_lr_schedule(single_rank_group, tmp_path):
    strategy, model = _cosine_strategy(total_steps=10)
    for _ in range(3):
        _train_step(strategy, model)
    strategy.save_checkpoint(tmp_path / "ckpt", extra={"role": "policy"})
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert "extra_state_rank0.json" in files and not any(name.endswith(".pt") for name in files)
    # a resumed run configured for 20 steps keeps the checkpoint's 10-step cosine instead of jumping back up
    resumed, resumed_model = _cosine_strategy(total_steps=20)
    assert resumed.load_checkpoint(tmp_path / "ckpt") == {"role": "policy"}
    assert resumed.num_training_steps == 10 and resumed.lr == pytest.approx(strategy.lr)
    _train_step(strategy, model)
    _train_step(resumed, resumed_model)
    assert resumed.lr == pytest.approx(strategy.lr)  # step 5 of the 10-step cosine on both


def test_pickled_extra_state_of_old_checkpoints_is_refused_not_unpickled(single_rank_group, tmp_path):
    strategy, _ = _cosine_strategy(total_steps=10)
    strategy.save_checkpoint(tmp_path / "ckpt")
    own = tmp_path / "ckpt" / "extra_state_rank0.json"
    marker = tmp_path / "unpickled"
    # a pickle that would create `marker` if it were ever loaded
    payload = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
    (tmp_path / "ckpt" / "extra_state_rank0.pt").write_bytes(payload)
    own.unlink()
    with pytest.raises(ValueError, match="pickled file from an older checkpoint format"):
        strategy.load_checkpoint(tmp_path / "ckpt")
    assert not marker.exists()


def test_optimizer_state_moves_between_devices_but_step_counts_stay(single_rank_group):
    from skyrl_train.workers.strategy.fsdp2 import move_optimizer_state

    layer = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1)
    layer(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    moments = sum(
        s[k].numel() * s[k].element_size() for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq")
    )
    # "meta" stands in for a second device (this machine has only the CPU): every moment tensor moves, steps do not
    assert move_optimizer_state(optimizer, torch.device("meta")) == moments > 0
    for state in optimizer.state.values():
        assert state["exp_avg"].device.type == "meta" and state["step"].device.type == "cpu"
    strategy, model = _cosine_strategy(total_steps=10)
    _train_step(strategy, model)
    assert strategy.offload_optimizer() == 0  # on trainer.device=cpu the state already is in CPU memory
    _train_step(strategy, model)  # the next step reloads (a no-op here) and trains on
    assert not strategy.optimizer_offloaded


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: on CPU there is no memory to free")
def test_offload_after_step_frees_accelerator_memory(single_rank_group):
    config = OptimizerConfig(lr=0.1)
    strategy = FSDP2Strategy(FSDPConfig(), torch.device("cuda"), optimizer=config)
    model = strategy.prepare(build_tiny_model(TinyModelSpec(size=2), seed=0).cuda())

    def _train_step_on():
        strategy.backward(model(torch.tensor([[5, 6, 7]], device="cuda")).logits.float().sum())

    _train_step_on()
    strategy.optimizer_step()
    before = torch.cuda.memory_allocated()
    moved = strategy.offload_optimizer()
    assert moved > 0 and torch.cuda.memory_allocated() <= before - moved // 2
    # what another process (a waking engine) can use: only after the caching allocator returned the blocks
    reserved, free = torch.cuda.memory_reserved(), torch.cuda.mem_get_info()[0]
    torch.cuda.empty_cache()  # what BaseWorker.release_memory does before the engines wake
    assert torch.cuda.memory_reserved() <= reserved - moved // 2 and torch.cuda.mem_get_info()[0] >= free + moved // 2
    _train_step_on()
    strategy.optimizer_step()  # reloads first, then steps
    assert all(s["exp_avg"].device.type == "cuda" for s in strategy.optimizer.state.values())


def test_fsdp_section_sets_the_shard_options(single_rank_group, caplog):
    section = FSDPConfig(reshard_after_forward=False, cpu_offload=True)
    section.mixed_precision.param_dtype, section.mixed_precision.reduce_dtype = "bfloat16", "bfloat16"
    with caplog.at_level("INFO", logger="skyrl_train.workers.strategy.fsdp2"):
        kwargs = FSDP2Strategy(section, torch.device("cpu"))._shard_kwargs()
    assert kwargs["reshard_after_forward"] is False
    assert (kwargs["mp_policy"].param_dtype, kwargs["mp_policy"].reduce_dtype) == (torch.bfloat16, torch.bfloat16)
    assert "offload_policy" not in kwargs and "fsdp.cpu_offload has no effect on trainer.device=cpu" in caplog.text
    gpu_like = FSDPConfig(reshard_after_forward=True)
    gpu_like.mixed_precision.param_dtype = "bfloat16"
    default = FSDP2Strategy(gpu_like, torch.device("cpu"))._shard_kwargs()
    assert default["reshard_after_forward"] is True
    assert (default["mp_policy"].param_dtype, default["mp_policy"].reduce_dtype) == (torch.bfloat16, torch.float32)
    fp32 = FSDPConfig()
    fp32.mixed_precision.param_dtype = "float32"
    assert FSDP2Strategy(fp32, torch.device("cpu"))._shard_kwargs()["mp_policy"].param_dtype is None  # no casting


def test_a_strategy_given_auto_chooses_when_it_shards(single_rank_group):
    # built without a run's resolved config (BasePPOExp resolves first): the strategy applies the same rules
    strategy = FSDP2Strategy(FSDPConfig(), torch.device("cpu"), optimizer=OptimizerConfig())
    strategy.prepare(build_tiny_model(TinyModelSpec(size=1)))
    fsdp = strategy.fsdp
    assert (fsdp.reshard_after_forward, fsdp.shard_layers, fsdp.mixed_precision.param_dtype) == (
        False,
        False,
        "float32",
    )


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


def test_the_writable_state_is_kept_while_it_views_the_live_parameters(single_rank_group):
    strategy = FSDP2Strategy(FSDPConfig(), torch.device("cpu"), optimizer=OptimizerConfig(lr=0.1))
    model = strategy.prepare(build_tiny_model(TinyModelSpec(size=1), seed=0))
    state = strategy.shard_writable_state()
    assert state is not None and set(state) == set(model.state_dict())
    _train_step(strategy, model)  # the optimizer updates the parameters in place
    assert strategy.shard_writable_state() is state  # the same views, which show the update
    assert all(
        torch.equal(state[name].full_tensor(), value.full_tensor()) for name, value in model.state_dict().items()
    )
    # a parameter replaced by one in new memory (as a load that assigns would) makes a new state that views it
    old = model.model.norm.weight
    replaced = DTensor.from_local(old.to_local().detach().clone() + 1.0, old.device_mesh, old.placements)
    model.model.norm.weight = torch.nn.Parameter(replaced)
    fresh = strategy.shard_writable_state()
    assert fresh is not state
    assert torch.equal(fresh["model.norm.weight"].to_local(), replaced.to_local())
    assert strategy.shard_writable_state() is fresh


CPU_OFFLOAD_STEP = """
import datetime, torch, torch.distributed as dist
from skyrl_train.config.roles import FSDPConfig, OptimizerConfig
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.utils.collectives import default_group_backend
from skyrl_train.workers.distributed import free_port
from skyrl_train.workers.strategy.fsdp2 import FSDP2Strategy

device = torch.device("cuda", 0)
torch.cuda.set_device(device)
backend = default_group_backend(device, cpu_tensors=True)
dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=60))
strategy = FSDP2Strategy(FSDPConfig(cpu_offload=True), device, optimizer=OptimizerConfig(lr=0.1, max_grad_norm=1.0))
model = strategy.prepare(build_tiny_model(TinyModelSpec(size=2), seed=0))
before = {name: p.detach().full_tensor().clone() for name, p in model.named_parameters()}
strategy.backward(model(torch.tensor([[5, 6, 7]], device=device)).logits.float().sum())
norm = strategy.optimizer_step()
strategy.offload_optimizer(); strategy.reload_optimizer()
after = {name: p.detach().full_tensor() for name, p in model.named_parameters()}
assert norm > 0 and any(not torch.equal(before[n], after[n]) for n in before), "no update"
assert {s["exp_avg"].device.type for s in strategy.optimizer.state.values()} == {"cpu"}
print("ok", backend, norm)
dist.destroy_process_group()
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="fsdp.cpu_offload only offloads from a CUDA device")
def test_cpu_offload_on_cuda_clips_and_steps_over_the_mixed_group():
    """M3 on a GPU: the sharded gradients live on CPU and clipping reduces their norm over the default group's gloo
    part (`cpu:gloo,cuda:nccl`); in its own process, which owns its default group."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", CPU_OFFLOAD_STEP], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("ok cpu:gloo,cuda:nccl"), done.stderr[-3000:]
