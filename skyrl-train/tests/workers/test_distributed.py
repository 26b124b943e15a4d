"""Rendezvous: rank 0 listens on its port from the moment it reports it, and the other ranks join through it."""

import multiprocessing
import socket
import types

import pytest
import torch
import torch.distributed as dist

from skyrl_train.workers.distributed import init_process_group, rendezvous_store


def _join_as_rank_1(port: int, results) -> None:
    init_process_group(1, 2, "127.0.0.1", port, torch.device("cpu"))
    total = torch.tensor([1.0])
    dist.all_reduce(total)
    results.put(float(total))
    dist.destroy_process_group()


def test_rendezvous_store_holds_its_port_and_forms_the_group():
    store = rendezvous_store(world_size=2)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other, pytest.raises(OSError):
        other.bind(("0.0.0.0", store.port))  # the port is taken from the start
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    rank_1 = context.Process(target=_join_as_rank_1, args=(store.port, results))
    rank_1.start()
    try:
        init_process_group(0, 2, "127.0.0.1", store.port, torch.device("cpu"), store=store)
        total = torch.tensor([2.0])
        dist.all_reduce(total)
        assert float(total) == 3.0 and results.get(timeout=60) == 3.0  # rank 1 joined over tcp:// with the same keys
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        rank_1.join(timeout=60)
    assert rank_1.exitcode == 0


class _Stop(Exception):
    """Raised by the stand-in of `dist.init_process_group` once it recorded its arguments."""


def _backends_by_device(backend: str) -> dict[str, str]:
    """torch's reading of a backend string: `cpu:gloo,cuda:nccl` per device, or one backend for the devices it
    serves (NCCL: CUDA only; gloo: both)."""
    if ":" in backend:
        return dict(part.split(":") for part in backend.split(","))
    return {"nccl": {"cuda": "nccl"}, "gloo": {"cpu": "gloo", "cuda": "gloo"}}[backend]


@pytest.mark.parametrize("cpu_offload", [True, False])
def test_a_cuda_worker_whose_fsdp_keeps_tensors_on_cpu_gets_a_group_for_cpu_tensors(
    cpu_offload, tiny_model_dir, monkeypatch
):
    """M3: with `fsdp.cpu_offload=true` on CUDA the gradients are CPU tensors and clipping all-reduces their norm, so
    the default group needs a CPU backend (else "No backend type associated with device type cpu" at the first
    optimizer step). CUDA and NCCL cannot run here: the CUDA queries and the group's creation are stand-ins that
    record what the worker asks for."""
    from skyrl_train.config import SkyRLConfig
    from skyrl_train.workers.policy_worker import PolicyWorker

    recorded = {}

    def record(**kwargs):
        recorded.update(kwargs)
        raise _Stop

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    gpu = types.SimpleNamespace(total_memory=80 * 2**30, name="stand-in")  # what `auto` settings read of the GPU
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: gpu)
    monkeypatch.setattr(dist, "init_process_group", record)
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "trainer.device=cuda",
            f"trainer.policy.model.path={tiny_model_dir}",
            f"trainer.policy.fsdp.cpu_offload={str(cpu_offload).lower()}",
        ],
        validate=False,
    )
    worker = PolicyWorker("policy", 0, 1, None, None, cfg)
    with pytest.raises(_Stop):
        worker.init_model()
    backends = _backends_by_device(recorded["backend"])
    assert backends["cuda"] == "nccl"
    assert ("cpu" in backends) is cpu_offload  # gloo only when CPU tensors are reduced: NCCL alone otherwise


def test_fsdp_cpu_offload_keeps_the_optimizer_state_next_to_its_cpu_parameters():
    """M3: with `fsdp.cpu_offload` on CUDA the parameters stay in CPU memory, so the optimizer state must too: moving
    it to the GPU before a step would put AdamW's moments on another device than its parameters."""
    from skyrl_train.config.roles import FSDPConfig, OptimizerConfig
    from skyrl_train.workers.strategy.fsdp2 import FSDP2Strategy

    strategy = FSDP2Strategy(FSDPConfig(cpu_offload=True), torch.device("cuda", 0), OptimizerConfig())
    parameter = torch.nn.Parameter(torch.ones(3))
    strategy.optimizer = torch.optim.AdamW([parameter])
    parameter.grad = torch.ones(3)
    strategy.optimizer.step()
    assert strategy.offload_optimizer() == 0 and strategy.reload_optimizer() == 0  # nothing leaves CPU memory
    assert {state["exp_avg"].device.type for state in strategy.optimizer.state.values()} == {"cpu"}
    assert FSDP2Strategy(FSDPConfig(), torch.device("cuda", 0)).optimizer_state_device == torch.device("cuda", 0)
