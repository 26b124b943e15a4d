"""Process-group plumbing of a worker: device resolution, backend choice, rendezvous address and port."""

from __future__ import annotations

import logging
import socket
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist

from skyrl_train.utils.collectives import default_group_backend

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = timedelta(minutes=10)
"""How long collectives (and the rendezvous) wait for the other ranks."""


def resolve_device(name: str) -> torch.device:
    """The device a worker computes on, from a resolved `trainer.device` (`cpu` or `cuda`).

    On CUDA this is the current device of the process (Ray gives each GPU actor its own `CUDA_VISIBLE_DEVICES`).
    """
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("trainer.device is 'cuda' but torch sees no GPU in this worker; use 'cpu' or 'auto'")
        return torch.device("cuda", torch.cuda.current_device())
    raise ValueError(f"device must be 'cpu' or 'cuda' (trainer.device resolved), got {name!r}")


def node_ip() -> str:
    """This node's IP address as other nodes reach it (Ray's view when Ray is running, else the hostname's)."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except ImportError:  # pragma: no cover - ray is a dependency of skyrl_train
        pass
    return socket.gethostbyname(socket.gethostname())


def free_port() -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def rendezvous_store(world_size: int, timeout: timedelta = DEFAULT_TIMEOUT) -> dist.TCPStore:
    """Rank 0's rendezvous server, already listening on a port the OS chose (`store.port`), for `init_process_group`'s
    `store`. Picking a free port first and binding it only when the group forms lost the port now and then to another
    socket of the machine (EADDRINUSE; Ray's own connections take ephemeral ports all the time)."""
    return dist.TCPStore("0.0.0.0", 0, world_size, True, timeout, wait_for_workers=False)


def init_process_group(
    rank: int,
    world_size: int,
    master_addr: str,
    master_port: int,
    device: torch.device,
    timeout: timedelta = DEFAULT_TIMEOUT,
    store: Optional[dist.Store] = None,
    cpu_tensors: bool = False,
) -> None:
    """Join the default process group (backend from `device`, with gloo for CPU tensors too when `cpu_tensors`: see
    `default_group_backend`); a group that already exists must match the sizes. Rank 0 may pass the
    `rendezvous_store` it listens on; the other ranks reach it at `master_addr:master_port`."""
    if dist.is_initialized():
        if dist.get_world_size() != world_size or dist.get_rank() != rank:
            raise RuntimeError(
                f"a process group already exists with rank {dist.get_rank()} of {dist.get_world_size()}, but this "
                f"worker is rank {rank} of {world_size}"
            )
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = default_group_backend(device, cpu_tensors)
    logger.info("rank %d/%d joining %s process group at %s:%d", rank, world_size, backend, master_addr, master_port)
    if store is not None:  # the same key prefix the tcp:// rendezvous of the other ranks uses
        dist.init_process_group(
            backend=backend,
            store=dist.PrefixStore("default_pg", store),
            rank=rank,
            world_size=world_size,
            timeout=timeout,
        )
        return
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=timeout,
    )
