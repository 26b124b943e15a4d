"""`FSDP2Strategy`: shard a Hugging Face model with `fully_shard`, train it, gather it and checkpoint it.

The same code runs on CPU (gloo) and GPU (nccl). Each decoder layer (the classes the model lists in
`_no_split_modules`) is sharded on its own, then the root. Parameters are kept in float32 ("master" weights) and
cast to `mixed_precision.param_dtype` for compute; gradients are reduced in `mixed_precision.reduce_dtype`.
Sharded checkpoints go through `torch.distributed.checkpoint` with safetensors shards (reshardable; nothing in them is
unpickled on load: `sharded_checkpoint`), plus one small JSON file per rank with the LR scheduler and RNG states and
the optimizer's non-tensor values.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

from skyrl_train.config.auto_settings import resolve_fsdp
from skyrl_train.config.roles import FSDPConfig, OptimizerConfig
from skyrl_train.models.loading import resolve_dtype
from skyrl_train.utils.checkpoint_io import local_directory_for_reading, local_directory_for_writing
from skyrl_train.utils.plain_values import to_jsonable
from skyrl_train.utils.rng_state import capture_rng_state, restore_rng_state
from skyrl_train.workers.strategy.flat_gather import flat_full_state_dict, storage_marks, writable_state
from skyrl_train.workers.strategy.micro_batch_run import MicroBatchBody, ModelInputs, run_in_order
from skyrl_train.workers.strategy.optimizer import build_optimizer, build_scheduler, current_lr
from skyrl_train.workers.strategy.sharded_checkpoint import (
    load_sharded_state,
    refuse_pickled_checkpoint,
    save_sharded_state,
)

logger = logging.getLogger(__name__)

EXTRA_STATE_FILE = "extra_state_rank{rank}.json"
"""Per-rank file of a sharded checkpoint holding the scheduler state, RNG states, caller extras and the state's
non-tensor values, as JSON: loading a checkpoint never unpickles anything (a checkpoint from elsewhere cannot run
code)."""

LEGACY_EXTRA_STATE_FILE = "extra_state_rank{rank}.pt"
"""The pickled per-rank file of checkpoints written before the JSON format; refused with an explanation."""


def layer_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules sharded one by one: instances of the classes named in the model's `_no_split_modules`."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or [])
    return [module for module in model.modules() if type(module).__name__ in names]


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device) -> int:
    """Move every tensor of `optimizer.state` to `device` in place; returns the bytes that changed device.

    AdamW's `step` counters stay where they are (they live on CPU unless the optimizer is capturable)."""
    moved = 0
    for state in optimizer.state.values():
        for key, value in state.items():
            if key != "step" and isinstance(value, torch.Tensor) and value.device != device:
                moved += value.numel() * value.element_size()
                state[key] = value.to(device, non_blocking=True)
    return moved


class FSDP2Strategy:
    """FSDP2 training of one model across the ranks of the default process group.

    `prepare(model)` shards it (and builds AdamW + LR schedule when an optimizer config is given); then `backward`,
    `optimizer_step`, `full_state_dict`, `save_checkpoint` / `load_checkpoint` and `save_hf_model`.
    """

    name = "fsdp2"

    def __init__(
        self,
        fsdp: FSDPConfig,
        device: torch.device,
        optimizer: Optional[OptimizerConfig] = None,
        gradient_checkpointing: bool = False,
    ) -> None:
        self.fsdp = fsdp
        self.device = device
        self.optimizer_config = optimizer
        self.gradient_checkpointing = gradient_checkpointing
        self.model: Optional[torch.nn.Module] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.scheduler: Optional[torch.optim.lr_scheduler.LRScheduler] = None
        self.num_training_steps: Optional[int] = None
        """Optimizer steps the LR schedule spans (restored from a checkpoint when resuming)."""
        self.optimizer_offloaded = False
        self.frozen_names: frozenset[str] = frozenset()
        """Parameters a trainable role never updates (the base weights under LoRA): left out of checkpoints."""
        self.merge_adapters_on_export = False
        """`save_hf_model` of a LoRA model also writes the merged full model (`model.lora.merge_on_export`)."""
        self.keep_model_dtype = False
        """`prepare` shards the model in the dtype it was loaded in instead of float32 master weights: for a frozen
        model nothing updates (skyrl-tx's shared base under its adapters), where float32 copies would only cost
        memory."""
        self._writable: Optional[tuple[dict[str, torch.Tensor], dict[str, tuple]]] = None
        """`shard_writable_state`'s last state and the storage marks of its tensors."""

    @classmethod
    def from_section(
        cls, section: Any, device: torch.device, optimizer: Optional[OptimizerConfig], gradient_checkpointing: bool
    ) -> FSDP2Strategy:
        """The strategy for a role's config section (`trainer.<role>` or `reward.model`: its `fsdp` settings)."""
        strategy = cls(
            fsdp=section.fsdp, device=device, optimizer=optimizer, gradient_checkpointing=gradient_checkpointing
        )
        lora = getattr(getattr(section, "model", None), "lora", None)
        strategy.merge_adapters_on_export = bool(lora is not None and lora.merge_on_export)
        return strategy

    @property
    def rank(self) -> int:
        """This process's rank in the default group."""
        return dist.get_rank()

    @property
    def data_parallel_size(self) -> int:
        """Ranks gradients are averaged over: all of them."""
        return dist.get_world_size()

    @property
    def world_size(self) -> int:
        """Ranks in the default group."""
        return dist.get_world_size()

    def device_mesh(self) -> DeviceMesh:
        """1-D mesh over all ranks, or a (replicate, shard) mesh for hybrid sharding when `fsdp_size` divides the
        world size and is smaller than it. The 1-D mesh's dimension is named `fsdp`: peft sizes a LoRA layer injected
        into an already sharded model (skyrl-tx's adapters) by the full weight only on a mesh named so, and by the
        local shard (as under tensor parallelism) otherwise."""
        world, shard = self.world_size, self.fsdp.fsdp_size
        if shard in (-1, world):
            return init_device_mesh(self.device.type, (world,), mesh_dim_names=("fsdp",))
        if shard <= 0 or world % shard:
            raise ValueError(f"fsdp.fsdp_size must be -1 or a positive divisor of the {world} ranks, got {shard}")
        return init_device_mesh(self.device.type, (world // shard, shard), mesh_dim_names=("replicate", "shard"))

    def _shard_kwargs(self) -> dict[str, Any]:
        precision = self.fsdp.mixed_precision
        param_dtype = resolve_dtype(precision.param_dtype)
        kwargs: dict[str, Any] = {
            "mesh": self.device_mesh(),
            "reshard_after_forward": self.fsdp.reshard_after_forward,
            "mp_policy": MixedPrecisionPolicy(
                param_dtype=None if param_dtype == torch.float32 else param_dtype,
                reduce_dtype=resolve_dtype(precision.reduce_dtype),
            ),
        }
        if self.fsdp.cpu_offload:
            if self.device.type == "cpu":
                logger.info("fsdp.cpu_offload has no effect on trainer.device=cpu: parameters already live on CPU")
            else:
                kwargs["offload_policy"] = CPUOffloadPolicy()
        return kwargs

    def prepare(self, model: torch.nn.Module, num_training_steps: Optional[int] = None) -> torch.nn.Module:
        """Shard `model` (float32 master weights unless `keep_model_dtype`) and, for a trainable role, build the
        optimizer and schedule."""
        if not self.keep_model_dtype:
            model = model.float()
        self.fsdp = resolve_fsdp(self.fsdp, self.device.type, self.world_size, model)  # `auto` left by a caller
        if self.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        kwargs = self._shard_kwargs()
        layers = []
        if self.fsdp.shard_layers:
            layers = layer_modules(model)
            if not layers:
                logger.warning("%s lists no _no_split_modules: sharding only the root module", type(model).__name__)
        for layer in layers:
            fully_shard(layer, **kwargs)
        fully_shard(model, **kwargs)
        self.model = model
        if self.optimizer_config is not None:
            named = list(model.named_parameters(remove_duplicate=False))
            self.frozen_names = frozenset(name for name, param in named if not param.requires_grad)
            trainable = [param for param in model.parameters() if param.requires_grad]
            if not trainable:
                raise ValueError(f"{type(model).__name__} has no trainable parameter: nothing for the optimizer to do")
            self.optimizer = build_optimizer(trainable, self.optimizer_config)
            self.scheduler = build_scheduler(self.optimizer, self.optimizer_config, num_training_steps)
            self.num_training_steps = num_training_steps
        return model

    def _require_optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            raise RuntimeError("this strategy has no optimizer: the role is forward-only (e.g. ref) or not prepared")
        return self.optimizer

    @property
    def lr(self) -> float:
        """Learning rate the next optimizer step uses."""
        return current_lr(self._require_optimizer())

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate gradients of `loss` (FSDP reduce-scatters them across ranks)."""
        loss.backward()

    def run_micro_batches(
        self,
        model: Any,
        entries: Sequence[Any],
        body: MicroBatchBody,
        forward_only: bool = False,
        inputs: Optional[ModelInputs] = None,
    ) -> list[Any]:
        """Each micro-batch's `body` in turn, its loss backpropagated right after it (`micro_batch_run`); `inputs`
        is only read by pipelined strategies."""
        return run_in_order(model, entries, body, forward_only, self.backward)

    def end_gradient_free_forward(self) -> None:
        """Reshard what a forward without gradients left unsharded (`fsdp.reshard_after_forward=false`).

        Without it, the next training forward ran on those parameters and its backward gave twice the gradient
        (torch 2.13: a `no_grad` forward, then a forward and backward, doubled every gradient of that backward
        against the same forward and backward alone; the one after was right again). So the first mini-batch
        trained after a log-prob or value pass counted double. The reshard costs one all-gather at the next
        forward."""
        if self.model is None or self.fsdp.reshard_after_forward:
            return
        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()

    @property
    def params_on_cpu(self) -> bool:
        """True when FSDP2 keeps the sharded parameters, gradients and optimizer state in CPU memory while computing
        on CUDA (`fsdp.cpu_offload`)."""
        return self.fsdp.cpu_offload and self.device.type != "cpu"

    @property
    def optimizer_state_device(self) -> torch.device:
        """Where the optimizer state must be when the optimizer steps: next to the sharded parameters (CPU with
        `fsdp.cpu_offload`, else the training device)."""
        return torch.device("cpu") if self.params_on_cpu else self.device

    def offload_optimizer(self) -> int:
        """Move the optimizer state (AdamW moments) to CPU to free accelerator memory between steps; returns the
        bytes moved (0 when the state already lives on CPU, e.g. `trainer.device=cpu` or `fsdp.cpu_offload`).
        `optimizer_step` brings it back first."""
        moved = move_optimizer_state(self._require_optimizer(), torch.device("cpu"))
        self.optimizer_offloaded = True
        return moved

    def reload_optimizer(self) -> int:
        """Bring an offloaded optimizer state back next to the parameters (`optimizer_state_device`); returns the
        bytes moved."""
        moved = move_optimizer_state(self._require_optimizer(), self.optimizer_state_device)
        self.optimizer_offloaded = False
        return moved

    def optimizer_step(self) -> float:
        """Clip gradients to `max_grad_norm`, step the optimizer and schedule, zero gradients; returns the grad norm
        before clipping. A non-finite norm skips the update (gradients are still cleared)."""
        optimizer = self._require_optimizer()
        if self.optimizer_offloaded:
            self.reload_optimizer()
        max_norm = self.optimizer_config.max_grad_norm if self.optimizer_config.max_grad_norm > 0 else float("inf")
        # With fsdp.cpu_offload the gradients are CPU DTensors: their norm is all-reduced over the default group's
        # gloo backend, which the worker adds for that case (`utils.collectives.default_group_backend`).
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        if np.isfinite(grad_norm):
            optimizer.step()
            self.scheduler.step()
        else:
            logger.warning("grad norm is %s: skipping this optimizer step", grad_norm)
        optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's state with Hugging Face names on CPU, gathered on rank 0 ({} on other ranks; every rank
        must call this). Small CPU models are gathered in one collective (`flat_gather`)."""
        gathered = flat_full_state_dict(self.model)
        if gathered is not None:
            return gathered
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(self.model, options=options)

    def shard_writable_state(self) -> Optional[dict[str, torch.Tensor]]:
        """The model's state when every rank can write its own rows of it into a shared block (weight sync without
        the gather, `workers.shard_send`), else None.

        The state is the same object from one sync to the next while its tensors still view the model's live
        parameters and buffers (checked by address and shape, `storage_marks`; the optimizer updates them in place),
        so the sync can keep what it derived from it; the check costs less than building `model.state_dict()`."""
        live = storage_marks(
            itertools.chain(
                self.model.named_parameters(remove_duplicate=False), self.model.named_buffers(remove_duplicate=False)
            )
        )
        if self._writable is not None and all(live.get(name) == mark for name, mark in self._writable[1].items()):
            return self._writable[0]
        state = writable_state(self.model, self.world_size)
        marks = storage_marks(state.items()) if state is not None else {}
        aliases = state is not None and all(live.get(name) == mark for name, mark in marks.items())
        self._writable = (state, marks) if aliases else None  # a state of copies is rebuilt every time
        return state

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """The trained parameters only (the LoRA adapters of a peft model), whole, on CPU on rank 0 ({} on the other
        ranks; every rank must call this). Gathers nothing of the frozen base weights."""
        state: dict[str, torch.Tensor] = {}
        for name, param in self.model.named_parameters():
            if not param.requires_grad:
                continue
            full = param.full_tensor() if hasattr(param, "full_tensor") else param
            if self.rank == 0:
                state[name] = full.detach().to("cpu", copy=True)
        return state

    @property
    def is_adapter_model(self) -> bool:
        """True when the model is a peft (LoRA) model."""
        from peft import PeftModel

        return isinstance(self.model, PeftModel)

    def _sharded_state(self) -> dict[str, Any]:
        if self.optimizer is None:
            return {"model": get_model_state_dict(self.model)}
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        if self.frozen_names:  # LoRA: the base weights come from the model path; a checkpoint holds the adapters
            model_state = {name: value for name, value in model_state.items() if name not in self.frozen_names}
        return {"model": model_state, "optimizer": optimizer_state}

    def save_checkpoint(self, directory: str | os.PathLike[str], extra: Optional[dict[str, Any]] = None) -> None:
        """Write the sharded model (and optimizer) as safetensors shards into `directory`, plus this rank's
        scheduler/RNG/`extra` JSON file. Every rank must call this. `directory` may be an fsspec URL: each rank then
        writes locally and uploads its own files."""
        with local_directory_for_writing(directory) as local:
            path = Path(local)
            if self.optimizer_offloaded:
                self.reload_optimizer()
            saved = save_sharded_state(self._sharded_state(), path)
            own: dict[str, Any] = {"rng": capture_rng_state(), "extra": extra or {}, "sharded_state": saved}
            if self.scheduler is not None:
                own["scheduler"] = self.scheduler.state_dict()
                own["num_training_steps"] = self.num_training_steps
            text = json.dumps(to_jsonable(own, "extra_state"))
            (path / EXTRA_STATE_FILE.format(rank=self.rank)).write_text(text, encoding="utf-8")
            dist.barrier()  # every rank has written its files before any of them uploads
        dist.barrier()

    def load_checkpoint(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """Restore what `save_checkpoint` wrote (same world size for the per-rank file); returns the saved `extra`.

        `directory` may be an fsspec URL (downloaded to a temporary directory first)."""
        with local_directory_for_reading(directory) as local:
            return self._load_local_checkpoint(Path(local), directory)

    def _load_local_checkpoint(self, path: Path, directory: str | os.PathLike[str]) -> dict[str, Any]:
        refuse_pickled_checkpoint(path, directory)
        own_file = path / EXTRA_STATE_FILE.format(rank=self.rank)
        if not own_file.exists():
            legacy = path / LEGACY_EXTRA_STATE_FILE.format(rank=self.rank)
            if legacy.exists():
                raise ValueError(
                    f"{directory}/{legacy.name} is a pickled file from an older checkpoint format; it is not loaded "
                    "because unpickling a file from elsewhere can run arbitrary code. Resume from a checkpoint written "
                    "by this version (its per-rank state is JSON)"
                )
            raise FileNotFoundError(
                f"{directory}/{own_file.name} is missing: not a checkpoint of this worker group (or other ranks)"
            )
        own = json.loads(own_file.read_text(encoding="utf-8"))
        if self.optimizer_offloaded:
            self.reload_optimizer()
        if self.scheduler is not None and "scheduler" in own:  # before the optimizer state: a new schedule resets lr
            self._keep_checkpoint_schedule(own.get("num_training_steps"), directory)
        state = self._sharded_state()
        load_sharded_state(state, path, own.get("sharded_state", {}), directory)
        if self.optimizer is None:
            set_model_state_dict(self.model, state["model"])
        else:
            set_state_dict(
                self.model,
                self.optimizer,
                model_state_dict=state["model"],
                optim_state_dict=state["optimizer"],
                options=StateDictOptions(strict=not self.frozen_names),
            )
        if self.scheduler is not None and "scheduler" in own:
            self.scheduler.load_state_dict(own["scheduler"])
        restore_rng_state(own["rng"])
        dist.barrier()
        return own["extra"]

    def _keep_checkpoint_schedule(self, saved_steps: Optional[int], directory: str | os.PathLike[str]) -> None:
        """Rebuild the LR schedule over the checkpoint's run length when this run computed another one: a resumed
        run continues the schedule it started (a cosine does not jump back up because the run got longer)."""
        if saved_steps == self.num_training_steps:
            return
        logger.warning(
            "resuming from %s: keeping its learning-rate schedule over %s optimizer steps (this run's settings give %s);"
            " start a fresh run to change the schedule's length",
            directory,
            saved_steps,
            self.num_training_steps,
        )
        self.scheduler = build_scheduler(self._require_optimizer(), self.optimizer_config, saved_steps)
        self.num_training_steps = saved_steps

    def save_hf_model(self, directory: str | os.PathLike[str], tokenizer: Any = None) -> None:
        """Gather the weights and write a Hugging Face model folder (config, safetensors, tokenizer) from rank 0.

        A LoRA model writes its adapter instead (peft's `adapter_config.json` + `adapter_model.safetensors`, loadable
        with `PeftModel.from_pretrained(base, directory)`), and with `merge_adapters_on_export` also the merged full
        model into `directory/merged`."""
        if self.is_adapter_model:
            self._save_adapter(directory, tokenizer)
            return
        state = self.full_state_dict()
        if self.rank == 0:
            with local_directory_for_writing(directory) as local:  # a URL is written locally, then uploaded
                self.model.save_pretrained(local, state_dict=state, safe_serialization=True)
                if tokenizer is not None:
                    tokenizer.save_pretrained(local)
        dist.barrier()

    def _save_adapter(self, directory: str | os.PathLike[str], tokenizer: Any) -> None:
        from skyrl_train.models.lora_state import merge_peft_state

        adapter = self.trainable_state_dict()
        merged_state = None
        if self.merge_adapters_on_export:
            full = self.full_state_dict()
            if self.rank == 0:
                merged_state = merge_peft_state(full, self.model.peft_config["default"].lora_alpha)
        if self.rank == 0:
            with local_directory_for_writing(directory) as local:
                self.model.save_pretrained(local, state_dict=adapter, safe_serialization=True)
                if tokenizer is not None:
                    tokenizer.save_pretrained(local)
                if merged_state is not None:
                    merged = Path(local) / "merged"
                    self.model.get_base_model().save_pretrained(
                        merged, state_dict=merged_state, safe_serialization=True
                    )
                    if tokenizer is not None:
                        tokenizer.save_pretrained(merged)
        dist.barrier()
