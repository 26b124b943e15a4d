"""Where the parties of a weight sync run (Ray node, GPUs), and which transport can reach each engine from there.

Ray shows each GPU actor only the GPUs of its own bundle (it sets `CUDA_VISIBLE_DEVICES`), so on a colocated run
with one GPU per bundle, engine i sees GPU i and nothing else. A CUDA IPC handle opens only in a process that sees
the GPU the buffer lives on, so `cuda_ipc` reaches the engines that share policy rank 0's GPU (the sender's), and
every other engine needs `broadcast`; `broadcast` in turn cannot serve an engine on the sender's own GPU (NCCL
refuses two ranks of one communicator on one device). `plan_weight_sync` applies these rules for `auto`, and
`check_backend` refuses an explicitly named backend that breaks them before anything is sent.

GPUs are named by the ids Ray assigns (the entries of the node's `CUDA_VISIBLE_DEVICES`, or indices), the same in
every process of a node; no CUDA call is needed to describe a process, so the driver and the SGLang actor (which
keeps CUDA out of its own process) describe themselves for free.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from skyrl_train.weight_sync.base import WeightSyncError

__all__ = ["Location", "check_backend", "plan_weight_sync"]
"""The public names of this module (`skyrl_train.weight_sync` re-exports them)."""

GPU_TRANSPORTS = {"cuda_ipc", "broadcast"}
"""Transports that move CUDA tensors between processes (the rest work on any device)."""


@dataclass(frozen=True)
class Location:
    """Where one process runs: its Ray node, the physical GPU ids it can see (None: not restricted, every GPU of the
    node), and the GPU its tensors live on (its current device; None without a GPU)."""

    node_id: str
    gpus: Optional[tuple[str, ...]] = None
    device_gpu: Optional[str] = None

    def sees(self, node_id: str, gpu: Optional[str]) -> bool:
        """True when this process runs on `node_id` and can open memory of GPU `gpu` there."""
        if node_id != self.node_id or gpu is None:
            return False
        return self.gpus is None or gpu in self.gpus

    def as_dict(self) -> dict[str, Any]:
        """Plain data for Ray (`engine_info`, `weight_sender_location`)."""
        return {"node_id": self.node_id, "gpus": None if self.gpus is None else list(self.gpus), "gpu": self.device_gpu}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Location:
        """The inverse of `as_dict`; an `engine_info` without GPU fields (a custom engine actor) sees every GPU of its
        node, as before GPUs were reported."""
        gpus = data.get("gpus")
        return cls(str(data["node_id"]), None if gpus is None else tuple(str(g) for g in gpus), data.get("gpu"))


def visible_gpus(ray_gpu_ids: Sequence[str], environ: Mapping[str, str] = os.environ) -> Optional[tuple[str, ...]]:
    """The physical GPU ids a process sees: the ones Ray assigned it (a GPU actor), else its `CUDA_VISIBLE_DEVICES`,
    else None (every GPU of the node)."""
    if ray_gpu_ids:
        return tuple(str(gpu) for gpu in ray_gpu_ids)
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return None
    return tuple(entry.strip() for entry in listed.split(",") if entry.strip())


def current_gpu(gpus: Optional[tuple[str, ...]], index: int) -> str:
    """Physical id of the GPU a process computes on, from what it sees and its current CUDA device index."""
    if gpus is None:
        return str(index)
    if not 0 <= index < len(gpus):
        raise WeightSyncError(f"current CUDA device {index} is not among the {len(gpus)} GPU(s) this process sees")
    return gpus[index]


def process_gpus() -> Optional[tuple[str, ...]]:
    """The physical GPU ids this process sees (`visible_gpus` of what Ray assigned it, when Ray runs here)."""
    import ray

    assigned = ray.get_runtime_context().get_accelerator_ids().get("GPU", []) if ray.is_initialized() else []
    return visible_gpus(assigned)


def this_location(device: str = "cpu") -> Location:
    """This process's `Location` (a Ray actor, or a driver connected to Ray). `device` is where its tensors live:
    on `cuda` the current CUDA device is looked up only when CUDA is already initialised here (else device 0)."""
    import ray

    gpus = process_gpus()
    gpu = None
    if device.startswith("cuda"):
        import torch

        index = torch.cuda.current_device() if torch.cuda.is_initialized() else 0
        gpu = current_gpu(gpus, index)
    return Location(ray.get_runtime_context().get_node_id(), gpus, gpu)


def engines_sharing_gpu(sender: Location, engines: Sequence[Location]) -> list[int]:
    """Indices of the engines that see the sender's GPU on its node (those `cuda_ipc` can reach)."""
    return [index for index, engine in enumerate(engines) if engine.sees(sender.node_id, sender.device_gpu)]


def engines_on_node(sender: Location, engines: Sequence[Location]) -> list[int]:
    """Indices of the engines on the sender's node (those `shm` can reach)."""
    return [index for index, engine in enumerate(engines) if engine.node_id == sender.node_id]


LOCAL_REACH: dict[str, Callable[[Location, Sequence[Location]], list[int]]] = {
    "cuda_ipc": engines_sharing_gpu,
    "shm": engines_on_node,
}
"""The engines each same-machine transport reaches from the sender."""


def out_of_reach(transport: str, sender: Location, engines: Sequence[Location]) -> list[int]:
    """Indices of the engines the same-machine `transport` (a `LOCAL_REACH` key) cannot reach, in order."""
    reached = set(LOCAL_REACH[transport](sender, engines))
    return [index for index in range(len(engines)) if index not in reached]


_OUT_OF_REACH = {
    "cuda_ipc": "weight_sync_backend=cuda_ipc: engines {engines} cannot see GPU {gpu} of the sender (policy rank 0; "
    "Ray shows each actor only its own bundle's GPU), so they cannot open its CUDA IPC handles; use "
    "weight_sync_backend=auto (cuda_ipc for the engine on rank 0's GPU, broadcast for the others)",
    "shm": "weight_sync_backend=shm: engines {engines} run on another node than the sender (policy rank 0); use "
    "weight_sync_backend=auto or broadcast",
}
"""`check_backend`'s error when a named same-machine transport misses engines."""


def local_transport(device: str) -> str:
    """The transport between processes of one machine on `device`: `cuda_ipc` on GPUs, `shm` on CPU."""
    return "cuda_ipc" if device == "cuda" else "shm"


def plan_weight_sync(
    sender: Location, engines: Sequence[Location], colocated: bool, device: str
) -> list[tuple[str, list[int]]]:
    """`(transport, engine indices)` per transport for `weight_sync_backend=auto`, local transport first, empty
    groups left out.

    Not colocated: `broadcast` for every engine (each on its own device; works across nodes). Colocated on CPU:
    `shm` for the engines on the sender's node, `broadcast` for the rest. Colocated on GPUs: `cuda_ipc` for the
    engines that see the sender's GPU (on a one-GPU-per-bundle placement, the engine in rank 0's bundle) and
    `broadcast` (NCCL) for every other one, on another GPU of the node or on another node.
    """
    everyone = list(range(len(engines)))
    if not colocated:
        return [("broadcast", everyone)]
    transport = local_transport(device)
    local, rest = LOCAL_REACH[transport](sender, engines), out_of_reach(transport, sender, engines)
    return [(name, group) for name, group in ((transport, local), ("broadcast", rest)) if group]


def check_backend(name: str, sender: Location, engines: Sequence[Location], device: str) -> None:
    """Refuse an explicitly named backend that cannot reach every engine from where they run:
    `cuda_ipc` needs every engine to see the sender's GPU, `shm` every engine on the sender's node, and `broadcast`
    on GPUs no engine on the sender's GPU. The error names the engines and `auto`, which picks per engine."""
    if name in LOCAL_REACH:
        beyond = out_of_reach(name, sender, engines)
        if beyond:
            raise WeightSyncError(_OUT_OF_REACH[name].format(engines=beyond, gpu=sender.device_gpu))
    if name == "broadcast" and device == "cuda":
        same_gpu = engines_sharing_gpu(sender, engines)
        if same_gpu:
            raise WeightSyncError(
                f"weight_sync_backend=broadcast: engines {same_gpu} share GPU {sender.device_gpu} with the sender "
                "(policy rank 0), and NCCL refuses two ranks of one group on one GPU; use weight_sync_backend=auto "
                "(cuda_ipc for those engines) or trainer.placement.colocate_all=false"
            )
