"""`MultiLoraWorker`: one data-parallel rank of `RayLoraHost`, a skyrl_train policy worker whose model is a `LoraHost`
(the base model with every training client's LoRA adapter), run by skyrl_train's `WorkerGroup` like the trainer's
ranks.

From skyrl_train it takes what every worker rank has (`BaseWorker`, `WorkerGroup`): the rendezvous and process group
(gloo on CPU, NCCL on CUDA), placement, device and torch threads, the local channel, and the group's failure
handling. The base model is sharded by the policy's `FSDP2Strategy` when `trainer.policy.fsdp.fsdp_size` is -1
(`--ray-sharding fsdp2`: frozen, kept in its own dtype); with `fsdp_size` 1 (`replicate`) every rank holds it whole.

What stays tx's own, and why:
- Adapters come and go while the service runs (one per training client), after the base was sharded, so FSDP does not
  manage them: they are plain tensors replicated on every rank. `optim_step` therefore sums their gradients over the
  group itself (`sum_gradients`, where the trainer relies on FSDP's reduce-scatter), then every rank takes the same
  step of `LoraHost.optim_step`: one AdamW per adapter with the hyperparameters of each call, where the strategy has
  one optimizer and LR schedule from the config.
- With a sharded base, every forward gathers each layer's weights from all ranks, so every rank takes part in every
  forward_backward and sample call: a rank without data runs a one-token forward (and backward) of the same adapter.
- Sampling decodes from this model (the trainer decodes in separate engines): it gathers the whole base once
  (`unsharded_base`), decodes freely (ranks may take different numbers of steps), and reshards.
- Checkpoint and sampler files travel as bytes (`checkpoint_files.read_files`), so ranks on other nodes need no shared
  filesystem; results go back as numpy arrays.

Ranks agree by construction: adapters are created with the same seed on every rank, and every rank steps on the same
summed gradient.
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

from skyrl_train.config import SkyRLConfig
from skyrl_train.models.loading import load_causal_lm
from skyrl_train.utils.rng_state import torch_seeded
from skyrl_train.workers.strategy import FSDP2Strategy
from skyrl_train.workers.worker import BaseWorker
from skyrl_tx.checkpoint_files import Files, write_files
from skyrl_tx.compute import LoraHost, LoraSpec, SampleJob, SampleResult
from skyrl_tx.wire import TrainDatum

ROLE = "policy"
"""The skyrl_train role of the ranks: they train (adapters of) the policy model; its config section holds the base
model's path and FSDP settings."""


def worker_config(path: str, device: str, dtype: str, sharded: bool) -> SkyRLConfig:
    """The run config of `MultiLoraWorker` ranks: the base model `path` on `device` (`cpu` or `cuda`), FSDP2-sharded
    over all ranks computing in `dtype` when `sharded`, else whole on every rank (`fsdp_size` 1). Sharding is asked
    for to hold a larger base than one rank could, so the shards stay sharded between calls and per layer (not the
    trainer's speed-first `auto` choices, which may keep a small model whole after a forward)."""
    fsdp = {"fsdp_size": -1, "reshard_after_forward": True, "shard_layers": True} if sharded else {"fsdp_size": 1}
    policy = {"model": {"path": path}, "fsdp": fsdp}
    policy["fsdp"]["mixed_precision"] = {"param_dtype": dtype, "reduce_dtype": "float32"}
    return SkyRLConfig.from_dict({"trainer": {"device": device, "strategy": "fsdp2", ROLE: policy}}, validate=False)


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


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
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


class MultiLoraWorker(BaseWorker):
    """A rank of `RayLoraHost` (see the module docstring): `init_model` loads the base as a `LoraHost`; the other
    methods are `ComputeHost`'s, per adapter, on this rank's share of the work. `BaseWorker`'s single-model training
    methods (`train_mini_batches`, checkpoints, weight gathers) do not apply: the model here is many adapters.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """`BaseWorker`'s arguments (the worker group builds every role the same way), plus a scratch folder."""
        super().__init__(*args, **kwargs)
        self.host: Optional[LoraHost] = None
        self.scratch = Path(tempfile.mkdtemp(prefix=f"skyrl-tx-rank{self.rank}-"))
        """Checkpoint files received from the server, written here so `LoraHost` can read them."""
        self.mirrors: OrderedDict[str, Path] = OrderedDict()
        """Sampler key -> this rank's copy of that sampler's folder, least recently used first."""

    @property
    def sharded(self) -> bool:
        """Whether the base is FSDP2-sharded over the ranks (`fsdp_size` other than 1)."""
        return self.section.fsdp.fsdp_size != 1

    def init_model(
        self,
        model_path: Optional[str] = None,
        num_training_steps: Optional[int] = None,
        name: str = "base",
        dtype: str = "float32",
        max_sampler_adapters: int = 16,
    ) -> None:
        """Join the process group and load the base model (the policy's `model.path` when `model_path` is None) in
        `dtype` as the `LoraHost` named `name` on this rank's device: whole, or frozen and sharded by `FSDP2Strategy`.
        `num_training_steps` is not used: each adapter's optimizer takes its hyperparameters at every step."""
        self.join_process_group()
        path = model_path or self.section.model.path
        if not path:
            raise ValueError(f"no base model path: set trainer.{ROLE}.model.path")
        model = load_causal_lm(path, dtype=dtype, device="cpu" if self.sharded else str(self.device))
        if self.sharded:
            model.requires_grad_(False)  # the adapters, injected later, are what trains
            self.strategy = FSDP2Strategy.from_section(
                self.section, device=self.device, optimizer=None, gradient_checkpointing=False
            )
            self.strategy.keep_model_dtype = True
            model = self.strategy.prepare(model)  # places the shards on this rank's device
        self.model, self.model_path = model, path
        self.host = LoraHost(name, path, max_sampler_adapters, device=str(self.device), dtype=dtype, model=model)

    def _host(self) -> LoraHost:
        if self.host is None:
            raise RuntimeError(f"rank {self.rank}: init_model() has not run")
        return self.host

    def host_info(self) -> dict[str, Any]:
        """What the server needs to check requests, and this rank's device."""
        host = self._host()
        return {
            "vocab_size": host.vocab_size,
            "max_context": host.max_context,
            "pad_id": host.pad_id,
            "model_type": host.model_type,
            "device": str(self.device),
        }

    def add_adapter(self, name: str, spec: LoraSpec, init_seed: int) -> None:
        """`LoraHost.add_adapter`, initialised from `init_seed` when the spec has no seed (same on every rank)."""
        with torch_seeded(init_seed):
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

    def optim_step(self, name: str, adam: dict[str, float]) -> dict[str, float]:  # type: ignore[override]
        """Sum the adapter's gradients over all ranks, then take `LoraHost.optim_step` (its clipping and
        `grad_norm:mean` see the summed gradient). Every rank must call this together."""
        host = self._host()
        sum_gradients(host.adapters[name].params)
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
            with torch_seeded(init_seed):
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
