"""One data-parallel rank of `RayLoraHost`: a Ray actor holding a `LoraHost` of the base model on its device (a full
replica, or with `sharding="fsdp2"` its FSDP2 shard of the base weights), joined to its peers in one
torch.distributed group (gloo on CPU, NCCL on CUDA).

With FSDP2 every forward gathers each layer's weights from all ranks, so every rank takes part in every
forward_backward and sample call (a rank without data runs a one-token forward, and backward, of the same adapter);
adapters are plain, replicated tensors injected after sharding. Sampling gathers the whole base once
(`unsharded_base`), decodes freely (ranks may take different numbers of steps), and reshards.

Ranks agree by construction: adapters are created with the same seed on every rank, and `optim_step` sums the
adapter's gradients over the group before every rank takes the same AdamW step. Nothing but plain Python and numpy
data crosses the actor boundary: checkpoint files travel as bytes (so ranks on other nodes need no shared
filesystem), results as numpy arrays.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist

from skyrl_tx.compute import LoraHost, LoraSpec, SampleJob, SampleResult
from skyrl_tx.wire import TrainDatum

Files = dict[str, bytes]
"""A checkpoint folder's files by name."""


def read_files(directory: Path, names: tuple[str, ...]) -> Files:
    """The named files of `directory` as bytes (each must exist)."""
    return {name: (directory / name).read_bytes() for name in names}


def write_files(directory: Path, files: Files) -> int:
    """Write `files` into `directory` (created if missing); returns the bytes written."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / name).write_bytes(content)
    return sum(len(content) for content in files.values())


def cuda_rng_devices() -> list[int]:
    """The CUDA devices whose generators `torch.manual_seed` reseeds: every visible one (none without CUDA)."""
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block with torch's generators seeded `seed` (`torch.manual_seed` reseeds the CPU one and every CUDA
    device's), restoring all of their states afterwards."""
    with torch.random.fork_rng(devices=cuda_rng_devices()):
        torch.manual_seed(seed)
        yield


def shard_base(model: torch.nn.Module, device: torch.device) -> None:
    """Freeze the base weights and FSDP2-shard them over the default process group: each decoder layer, then the
    root (the embeddings, norm and head). LoRA layers injected later stay plain tensors on every rank."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from skyrl_train.workers.strategy.fsdp2 import layer_modules

    for param in model.parameters():
        param.requires_grad_(False)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in layer_modules(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def fsdp_modules(model: torch.nn.Module) -> list[Any]:
    """The FSDP2-sharded modules of `model` (none when it is not sharded)."""
    from torch.distributed.fsdp import FSDPModule

    return [module for module in model.modules() if isinstance(module, FSDPModule)]


@contextlib.contextmanager
def unsharded_base(model: torch.nn.Module) -> Iterator[None]:
    """Gather every sharded module's full weights once (a collective: all ranks enter together) and keep them through
    the block, so forwards inside it need no collective; reshard on exit."""
    modules = fsdp_modules(model)
    for module in modules:
        module.set_reshard_after_forward(False)
        module.unshard()
    try:
        yield
    finally:
        for module in modules:
            module.set_reshard_after_forward(True)
            module.reshard()


def all_reduce_gradients(params: list[torch.nn.Parameter]) -> None:
    """Sum every parameter's `.grad` over the process group in one collective. A parameter without a gradient on
    some rank counts as zero there; one without a gradient on every rank keeps `grad = None` (as in one process,
    where AdamW then skips it). Every rank ends with the same bits: the reduced buffer is the same on all ranks."""
    if not params:
        return
    device = params[0].device
    parts = [
        (param.grad if param.grad is not None else torch.zeros_like(param)).detach().reshape(-1).float()
        for param in params
    ]
    present = torch.tensor([float(param.grad is not None) for param in params], device=device)
    flat = torch.cat([*parts, present])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for param in params:
        size = param.numel()
        param.grad = flat[offset : offset + size].view_as(param).to(param.dtype).clone()
        offset += size
    for param, count in zip(params, flat[offset:].tolist()):
        if count == 0:
            param.grad = None


class LoraRank:
    """A Ray actor (see `RayLoraHost`): rank `rank` of `world_size`, with a `LoraHost` once `setup` ran.

    Rank 0 may be created without an address: it then rendezvouses on its node's IP and a free port, which
    `master_address()` reports so the other ranks can be created.
    """

    def __init__(
        self,
        rank: int,
        world_size: int,
        master_addr: Optional[str],
        master_port: Optional[int],
        num_threads: int = 1,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        torch.set_num_threads(max(1, int(num_threads)))
        self._rendezvous: Optional[dist.Store] = None  # rank 0's rendezvous server when it chose its own port
        if master_addr is None or master_port is None:
            if rank != 0:
                raise ValueError(f"rank {rank} needs master_addr and master_port (only rank 0 may choose its own)")
            from skyrl_train.workers.distributed import node_ip, rendezvous_store

            self._rendezvous = rendezvous_store(world_size)  # listening from now on: the port cannot be lost
            master_addr, master_port = node_ip(), self._rendezvous.port
        self.rank, self.world_size = rank, world_size
        self.master_addr, self.master_port = master_addr, int(master_port)
        self.host: Optional[LoraHost] = None
        self.sharded = False
        self.scratch = Path(tempfile.mkdtemp(prefix=f"skyrl-tx-rank{rank}-"))
        """Checkpoint files received from the server, written here so `LoraHost` can read them."""
        self.mirrors: OrderedDict[str, Path] = OrderedDict()
        """Sampler key -> this rank's copy of that sampler's folder, least recently used first."""

    def master_address(self) -> tuple[str, int]:
        """(address, port) the ranks rendezvous on."""
        return self.master_addr, self.master_port

    def setup(
        self, name: str, path: str, device: str, dtype: str, max_sampler_adapters: int, sharding: str = "replicate"
    ) -> dict[str, Any]:
        """Join the process group and load the base model on this rank's device (`cpu`, or `cuda`: the GPU Ray gave
        this actor), whole (`replicate`) or FSDP2-sharded over the ranks (`fsdp2`); returns what the server needs to
        check requests."""
        if sharding not in ("replicate", "fsdp2"):
            raise ValueError(f"sharding must be 'replicate' or 'fsdp2', got {sharding!r}")
        # imported here: `skyrl_train.workers` loads every worker class, which the server process never needs
        from skyrl_train.workers.distributed import init_process_group, resolve_device

        torch_device = resolve_device(device)
        init_process_group(
            self.rank, self.world_size, self.master_addr, self.master_port, torch_device, store=self._rendezvous
        )
        self.host = LoraHost(name, path, max_sampler_adapters, device=str(torch_device), dtype=dtype)
        self.sharded = sharding == "fsdp2"
        if self.sharded:
            shard_base(self.host.model, torch_device)
        return {
            "vocab_size": self.host.vocab_size,
            "max_context": self.host.max_context,
            "pad_id": self.host.pad_id,
            "model_type": self.host.model_type,
            "device": str(torch_device),
        }

    def _host(self) -> LoraHost:
        if self.host is None:
            raise RuntimeError(f"rank {self.rank}: setup() has not run")
        return self.host

    def add_adapter(self, name: str, spec: LoraSpec, init_seed: int) -> None:
        """`LoraHost.add_adapter`, initialised from `init_seed` when the spec has no seed (same on every rank)."""
        with seeded(init_seed):
            self._host().add_adapter(name, spec)

    def remove_adapter(self, name: str) -> None:
        """`LoraHost.remove_adapter`."""
        self._host().remove_adapter(name)

    def forward_backward(
        self, name: str, data: list[TrainDatum], loss_fn: str, config: dict[str, Any], forward_only: bool
    ) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        """`LoraHost.forward_backward` on this rank's shard of the data; gradients stay on this rank until
        `optim_step`. A sharded rank without data joins its peers' collectives with a one-token forward (and
        backward) whose gradient is zero."""
        host = self._host()
        if data:
            return host.forward_backward(name, data, loss_fn, config, forward_only)
        if not self.sharded:
            raise ValueError("forward_backward without data on a rank that is not sharded: nothing to do")
        host.activate(name)
        with torch.set_grad_enabled(not forward_only):
            logits = host.model(input_ids=torch.tensor([[host.pad_id]], device=host.device)).logits
            if not forward_only:
                (logits.float().sum() * 0.0).backward()
        return [], {}

    def optim_step(self, name: str, adam: dict[str, float]) -> dict[str, float]:
        """Sum the adapter's gradients over all ranks, then take `LoraHost.optim_step` (its clipping and
        `grad_norm:mean` see the summed gradient). Every rank must call this together."""
        host = self._host()
        all_reduce_gradients(host.adapters[name].params)
        return host.optim_step(name, adam)

    def save(self, name: str, with_optimizer: bool) -> Files:
        """The files `LoraHost.save` writes for adapter `name`, as bytes."""
        folder = Path(tempfile.mkdtemp(dir=self.scratch))
        try:
            self._host().save(name, folder, with_optimizer)
            return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def load(self, name: str, files: Files, with_optimizer: bool, init_seed: int) -> LoraSpec:
        """`LoraHost.load` from checkpoint files sent as bytes."""
        folder = Path(tempfile.mkdtemp(dir=self.scratch))
        try:
            write_files(folder, files)
            with seeded(init_seed):
                return self._host().load(name, folder, with_optimizer)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def has_sampler(self, key: str) -> bool:
        """Whether this rank holds the files of sampler `key`."""
        return key in self.mirrors

    def mirror(self, key: str, files: Files) -> None:
        """Keep the files of sampler `key` (written under a folder named after the key)."""
        folder = self.scratch / "samplers" / hashlib.sha256(key.encode()).hexdigest()[:24]
        write_files(folder, files)
        self.mirrors[key] = folder

    def sample(self, key: Optional[str], files: Optional[Files], jobs: list[SampleJob]) -> Optional[list[SampleResult]]:
        """`LoraHost.sample` of the sampler `key` (None: the base model). Returns None, asking for the sampler's
        `files`, when this rank has no copy of them yet (a sharded rank is sent them first, by `mirror`, since its
        peers wait for it in the gather); copies beyond the host's sampler limit are evicted in the same order the
        host evicts its sampler adapters."""
        host = self._host()
        if key is not None and key not in self.mirrors:
            if files is None:
                if self.sharded:
                    raise RuntimeError(f"rank {self.rank}: sampler {key} was not mirrored before a sharded sample")
                return None
            self.mirror(key, files)
        folder = None
        if key is not None:
            self.mirrors.move_to_end(key)
            folder = self.mirrors[key]
        if self.sharded:
            # load the sampler's adapter first: peft injecting LoRA layers reshards FSDP2's gathered weights, and a
            # rank that then gathers again mid-decode would wait for peers that are not gathering
            host.sampler_adapter(folder)
        with unsharded_base(host.model) if self.sharded else contextlib.nullcontext():
            results = host.sample(folder, jobs)
        while len(self.mirrors) > host.max_sampler_adapters:
            _, evicted = self.mirrors.popitem(last=False)
            shutil.rmtree(evicted, ignore_errors=True)
        return results

    def base_numel(self) -> int:
        """Elements of the base model's weights this rank holds (its shard with FSDP2)."""
        total = 0
        for key, param in self._host().model.named_parameters():
            if "lora_" not in key:
                total += param.to_local().numel() if hasattr(param, "to_local") else param.numel()
        return total

    def adapter_state(self, name: str) -> dict[str, np.ndarray]:
        """This rank's copy of adapter `name`'s weights (float32 numpy, by parameter name), for checking that the
        replicas agree."""
        host = self._host()
        marker = f".{name}."
        return {
            key: param.detach().float().cpu().numpy() for key, param in host.model.named_parameters() if marker in key
        }

    def close(self) -> None:
        """Leave the process group and delete the received files."""
        if dist.is_initialized():
            dist.destroy_process_group()
        shutil.rmtree(self.scratch, ignore_errors=True)
