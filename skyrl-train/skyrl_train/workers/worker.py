"""`BaseWorker`: one rank of a role (policy, ref, critic, reward) that loads, shards, trains, gathers and saves a model.

A plain class: `WorkerGroup` wraps it with `ray.remote`, and tests may also run it in-process (world size 1). The
run config arrives as a plain dict (`SkyRLConfig.to_dict()`) and is rebuilt here, so every setting (optimizer,
FSDP, micro-batch sizes, algorithm knobs, device, seed) comes from the same config the driver validated.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple, Optional

import torch
import torch.distributed as dist

from skyrl_train.algorithms.registry import import_user_registrations
from skyrl_train.config.auto_settings import resolved
from skyrl_train.config.root import SkyRLConfig
from skyrl_train.models.loading import load_causal_lm, load_tokenizer, resolve_dtype
from skyrl_train.models.lora import LoRASettings, apply_lora
from skyrl_train.models.packing import (
    PackedRows,
    describe_kernel,
    enable_packed_attention,
    pack_rows,
    packing_support,
)
from skyrl_train.training_batch import TrainingBatch, on_wire
from skyrl_train.utils.compute_clock import ComputeClock, timed_compute
from skyrl_train.utils.memory import read_rss
from skyrl_train.workers.accounting import reduction_denominator
from skyrl_train.workers.channel import ChannelHost
from skyrl_train.workers.distributed import init_process_group, node_ip, rendezvous_store, resolve_device
from skyrl_train.workers.micro_batching import (
    TrimmedMicroBatch,
    balance_group_counts,
    micro_batch_groups,
    trim_padding_columns,
    write_response_rows,
)
from skyrl_train.workers.strategy import strategy_class

logger = logging.getLogger(__name__)

ROLE_SECTIONS: dict[str, Callable[[SkyRLConfig], Any]] = {
    "policy": lambda cfg: cfg.trainer.policy,
    "ref": lambda cfg: cfg.trainer.ref,
    "critic": lambda cfg: cfg.trainer.critic,
    "reward": lambda cfg: cfg.reward.model,
}
"""The config section of each role: `trainer.<role>`, and `reward.model` for the reward model."""

ROLE_MODEL_PATHS: dict[str, Callable[[SkyRLConfig], Optional[str]]] = {
    "policy": lambda cfg: cfg.trainer.policy.model.path,
    "ref": lambda cfg: cfg.ref_model_path,
    "critic": lambda cfg: cfg.trainer.critic.model.path,
    "reward": lambda cfg: cfg.reward.model.path,
}
"""The model a role loads when `init_model` is given no path."""

ROLE_MODEL_PATH_KEYS: dict[str, str] = {
    "policy": "trainer.policy.model.path",
    "ref": "trainer.ref.model.path",
    "critic": "trainer.critic.model.path",
    "reward": "reward.model.path",
}
"""The config key holding each role's model path (named in errors)."""


class MiniBatchResult(NamedTuple):
    """What a rank returns for one mini-batch of an update (`BaseWorker.train_mini_batches`)."""

    steps: tuple[dict[str, float], ...]
    """The metrics of each optimizer step on the mini-batch, one per epoch, each with `<role>/grad_norm`."""
    old_logprobs: Optional[torch.Tensor] = None
    """The policy's log-probs of the mini-batch before the update's first optimizer step, when asked for."""
    weight_sync: Any = None
    """On the last mini-batch of an update that also synced the weights (`PolicyWorker.train_mini_batches` with
    `sync_weights_version`): rank 0's `SendResult` and None on the other ranks, or every rank's `PresumedWrite`
    (`workers.shard_send.update_send` reads either). Not a tuple or mapping, so joining the ranks' results keeps it as
    the list of per-rank values."""

    def __reduce__(self) -> tuple:
        """Pickled with `old_logprobs` as a `TensorOnWire` (numpy on the wire, a tensor again on arrival)."""
        return (MiniBatchResult, (self.steps, on_wire(self.old_logprobs), self.weight_sync))


class BaseWorker(ChannelHost):
    """One rank of a role. Subclasses set `trainable` and add `forward` / `forward_backward`.

    `master_addr`/`master_port` may be None on rank 0: it then rendezvouses on its own node IP and a free port,
    which `master_address()` reports. The other ranks take that address at construction, or, created beside rank 0
    without one (`WorkerGroup` starts every rank at once), from `set_master_address` before `init_model`. Besides
    Ray, a rank serves its methods on a local channel for callers on its machine (`ChannelHost`, `workers.channel`).
    """

    trainable: bool = False
    """Whether the role has an optimizer (policy, critic) or is forward-only (ref, reward)."""
    packable: bool = False
    """Whether the role's forwards can run packed (`trainer.remove_microbatch_padding`): policy, ref and critic."""
    packs_rows: bool = False
    """Whether this worker runs its micro-batches packed: decided by `init_model` (`_decide_packing`)."""
    buckets_packed_lengths: bool = False
    """Whether its packed sequences are rounded up to `models.packing.bucketed_length`: on CPU in bfloat16/float16,
    where every new length costs oneDNN kernels that stay in memory (decided with `packs_rows`)."""
    _rendezvous: Optional[dist.Store] = None
    """Rank 0's rendezvous server when it chose its own port (see `rendezvous_store`)."""

    def __init__(
        self,
        role: str,
        rank: int,
        world_size: int,
        master_addr: Optional[str],
        master_port: Optional[int],
        cfg: Mapping[str, Any] | SkyRLConfig,
        num_threads: int = 1,
    ) -> None:
        if role not in ROLE_SECTIONS:
            raise ValueError(f"role must be one of {sorted(ROLE_SECTIONS)}, got {role!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        torch.set_num_threads(max(1, int(num_threads)))
        # The driver already validated this config; rebuilding without validation avoids repeating its warnings.
        self.cfg = cfg if isinstance(cfg, SkyRLConfig) else SkyRLConfig.from_dict(cfg, validate=False)
        self.cfg = resolved(self.cfg)  # a run's driver resolved every `auto` already; a worker built alone does here
        self.role, self.rank, self.world_size = role, rank, world_size
        if (master_addr is None) != (master_port is None):
            raise ValueError(f"master_addr and master_port come together, got {master_addr!r} and {master_port!r}")
        if master_addr is None and rank == 0:
            self._rendezvous = rendezvous_store(world_size)  # listening from now on: the port cannot be lost
            master_addr, master_port = node_ip(), self._rendezvous.port
        # None on a rank > 0 until `set_master_address` (rank 0's address is only known once rank 0 runs)
        self.master_addr: Optional[str] = master_addr
        self.master_port: Optional[int] = None if master_port is None else int(master_port)
        self.device = resolve_device(self.cfg.resolved_device())
        self.section = ROLE_SECTIONS[role](self.cfg)
        self.model: Optional[torch.nn.Module] = None
        self.strategy = None
        self.model_path: Optional[str] = None
        self.sequence_group: Optional[dist.ProcessGroup] = None
        """This rank's sequence-parallel group (`_join_sequence_group`), None without sequence parallelism."""
        self.compute_clock = ComputeClock()

    def master_address(self) -> tuple[Optional[str], Optional[int]]:
        """(address, port) the ranks rendezvous on; (None, None) on a rank > 0 not yet told (`set_master_address`)."""
        return self.master_addr, self.master_port

    def set_master_address(self, master_addr: str, master_port: int) -> None:
        """Tell a rank created without an address where rank 0 listens (before `init_model`). Rank 0 chose its own:
        it only accepts that one."""
        if self.rank == 0 and (master_addr, int(master_port)) != (self.master_addr, self.master_port):
            raise ValueError(
                f"rank 0 listens at {self.master_addr}:{self.master_port}, not {master_addr}:{master_port}"
            )
        self.master_addr, self.master_port = master_addr, int(master_port)

    # ----- model set-up -------------------------------------------------------------------------------------------

    def join_process_group(self) -> None:
        """Join the group's default process group (gloo on CPU, NCCL on CUDA, plus gloo for CPU tensors when
        `keeps_tensors_on_cpu`) at the rendezvous of rank 0: the first step of `init_model` (a subclass that loads
        its model otherwise starts with it too)."""
        if self.master_addr is None or self.master_port is None:
            raise RuntimeError(
                f"{self.role} rank {self.rank} does not know where rank 0 listens: pass master_addr and master_port "
                "when creating it, or call set_master_address first (WorkerGroup does)"
            )
        init_process_group(
            self.rank,
            self.world_size,
            self.master_addr,
            self.master_port,
            self.device,
            store=self._rendezvous,
            cpu_tensors=self.keeps_tensors_on_cpu,
        )

    def load_model(self, path: str) -> torch.nn.Module:
        """Load the unsharded model on CPU in float32 (subclasses change the model class)."""
        return load_causal_lm(path, dtype="float32", device="cpu")

    def init_model(self, model_path: Optional[str] = None, num_training_steps: Optional[int] = None) -> None:
        """Join the process group, load the model (every rank with the same seed) and shard it; trainable roles also
        get AdamW and the LR schedule (`num_training_steps` is needed by decaying schedules such as cosine)."""
        self.join_process_group()
        path = model_path or ROLE_MODEL_PATHS[self.role](self.cfg)
        if not path:
            raise ValueError(f"no model path for role {self.role!r}: set {ROLE_MODEL_PATH_KEYS[self.role]}")
        self._check_supported()
        torch.manual_seed(self.cfg.trainer.seed)  # identical freshly initialised weights (e.g. value heads) per rank
        model = self.load_model(path)
        if self.uses_lora:
            key = ROLE_MODEL_PATH_KEYS[self.role].removesuffix(".path") + ".lora.target_modules"
            model = apply_lora(
                model, LoRASettings.from_config(self.section.model.lora), **self.lora_options, setting=key
            )
        self.packs_rows = self._decide_packing(model)
        self._check_sequence_parallel(model)
        self.sequence_group = self._join_sequence_group()
        strategy_cls = strategy_class(self.cfg.trainer.strategy)
        seeded = {"seed": self.cfg.trainer.seed} if self.cfg.trainer.strategy == "megatron" else {}  # its RNG tracker
        self.strategy = strategy_cls.from_section(
            self.section,
            device=self.device,
            optimizer=self.section.optimizer if self.trainable else None,
            gradient_checkpointing=self.trainable and self.section.gradient_checkpointing,
            **seeded,
        )
        self.model = self.strategy.prepare(model, num_training_steps)
        self.model_path = path
        self.release_memory()  # what loading and sharding left cached is free for the engines that start next

    @property
    def keeps_tensors_on_cpu(self) -> bool:
        """True when this role's FSDP2 model lives on CPU between uses on a CUDA worker (`fsdp.cpu_offload`): its
        gradient norms are then reduced as CPU tensors, so the default group also needs gloo."""
        fsdp = getattr(self.section, "fsdp", None)
        return bool(
            self.device.type == "cuda"
            and self.cfg.trainer.strategy == "fsdp2"
            and fsdp is not None
            and fsdp.cpu_offload
        )

    def _decide_packing(self, model: torch.nn.Module) -> bool:
        """Whether to pack (`trainer.remove_microbatch_padding`): `auto` packs the packable roles (policy, ref, critic)
        of the fsdp2 workers when the HF model can pack (`packing_support`, switching its attention), and of the
        megatron workers always (their model is built with packable attention, `megatron_packing`); `true` insists
        and raises ValueError naming the key where it cannot."""
        setting = self.cfg.trainer.remove_microbatch_padding
        if not self.packable or setting is False:
            return False
        strategy = self.cfg.trainer.strategy
        if strategy == "megatron":
            dtype = resolve_dtype(self.section.megatron.param_dtype)
        else:
            reason = packing_support(model)
            if reason is not None:
                if setting is True:
                    raise ValueError(
                        f"trainer.remove_microbatch_padding=true cannot pack the {self.role} model: {reason}; set it "
                        "to auto or false to run this model on padded micro-batches"
                    )
                logger.info("%s runs padded micro-batches (remove_microbatch_padding=auto): %s", self.role, reason)
                return False
            enable_packed_attention(model)
            dtype = resolve_dtype(self.section.fsdp.mixed_precision.param_dtype)
            self.buckets_packed_lengths = self.device.type == "cpu" and dtype in (torch.bfloat16, torch.float16)
        logger.info("%s packs its micro-batches (attention: %s)", self.role, describe_kernel(self.device, dtype))
        return True

    @property
    def uses_lora(self) -> bool:
        """True when this role trains LoRA adapters on a frozen model (`model.lora.rank > 0`)."""
        lora = getattr(getattr(self.section, "model", None), "lora", None)
        return lora is not None and lora.rank > 0

    lora_options: ClassVar[dict[str, Any]] = {}
    """Extra `apply_lora` arguments of this role (the critic's value head trains whole)."""

    def _check_supported(self) -> None:
        """Reject settings of the role's section that these workers do not implement yet, naming the field."""
        if self.uses_lora and self.role not in ("policy", "critic"):
            raise NotImplementedError(
                f"trainer.{self.role}.model.lora.rank={self.section.model.lora.rank}: LoRA is supported for the policy "
                "and the critic only; set it to 0"
            )
        if self.sequence_parallel_size > 1 and self.cfg.trainer.strategy != "fsdp2":
            raise NotImplementedError(
                f"trainer.{self.role}.sequence_parallel_size={self.sequence_parallel_size}: Ulysses sequence "
                f"parallelism runs on the fsdp2 workers only, not on {self.cfg.trainer.strategy}; set it to 1"
            )

    @property
    def sequence_parallel_size(self) -> int:
        """Ranks that split each packed sequence between them (`trainer.<role>.sequence_parallel_size`): they get the
        same rows, and each runs the model on its slice of the tokens (`models.ulysses`)."""
        return int(getattr(self.section, "sequence_parallel_size", 1))

    def _join_sequence_group(self) -> Optional[dist.ProcessGroup]:
        """The process group of this rank's sequence-parallel ranks (consecutive ranks, as the worker group deals them
        the same rows), or None without sequence parallelism. Every rank creates every group, in the same order."""
        size = self.sequence_parallel_size
        if size == 1:
            return None
        mine = None
        for first in range(0, self.world_size, size):
            group = dist.new_group(list(range(first, first + size)))
            if first <= self.rank < first + size:
                mine = group
        return mine

    def _check_sequence_parallel(self, model: torch.nn.Module) -> None:
        """Sequence parallelism needs packed micro-batches and attention heads that split over its ranks."""
        size = self.sequence_parallel_size
        if size == 1:
            return
        key = f"trainer.{self.role}.sequence_parallel_size={size}"
        if not self.packs_rows:
            raise ValueError(
                f"{key} needs packed micro-batches (it splits the packed sequence), but this {self.role} runs padded "
                "ones: set trainer.remove_microbatch_padding to auto or true (the start-up log says why a model "
                "cannot pack)"
            )
        config = getattr(model, "config", None)
        heads = getattr(getattr(config, "text_config", config), "num_attention_heads", None)
        if heads is not None and heads % size:
            raise ValueError(f"{key}: the model's {heads} attention heads do not split over {size} ranks")
        if self.world_size % size:
            raise ValueError(f"{key} must divide the {self.role}'s {self.world_size} workers")

    def _require_model(self) -> torch.nn.Module:
        if self.model is None:
            raise RuntimeError(f"{type(self).__name__} rank {self.rank}: call init_model() first")
        return self.model

    # ----- micro-batches ------------------------------------------------------------------------------------------

    def pack_micro_batch(self, batch: TrainingBatch) -> PackedRows:
        """A micro-batch's rows as one packed sequence, each distinct prompt packed once under
        `trainer.share_prompt_forward` (the layout every packed forward of this worker runs)."""
        share = self.cfg.trainer.share_prompt_forward
        return pack_rows(
            batch.input_ids,
            batch.attention_mask,
            batch.position_ids,
            batch.prompt_width,
            share_prompts=share,
            bucket_length=self.buckets_packed_lengths,
        )

    def model_inputs(self, entry: tuple[list[int], TrimmedMicroBatch]) -> dict[str, Any]:
        """The keyword arguments a micro-batch body passes to the model, for strategies that run the model themselves
        (Megatron's pipeline stages): the padded rows, or their packed sequence when this worker packs (with each
        distinct prompt packed once under `trainer.share_prompt_forward`, as the bodies pack it)."""
        batch = entry[1].batch
        if self.packs_rows:
            return self.pack_micro_batch(batch).model_inputs()
        return {
            "input_ids": batch.input_ids,
            "attention_mask": batch.attention_mask,
            "position_ids": batch.position_ids,
        }

    def micro_batches(self, batch: TrainingBatch, micro_batch_size: int) -> list[tuple[list[int], TrimmedMicroBatch]]:
        """(row indices, trimmed micro-batch on this worker's device) pairs covering `batch`.

        Rows are grouped by `trainer.max_tokens_per_microbatch` when > 0 (counting packed tokens when this role
        packs), else by `micro_batch_size`; all ranks then agree on the largest count, and a rank with fewer rows runs
        dummy micro-batches (empty index list, row 0's data) so every FSDP collective is matched.
        """
        if len(batch) == 0:
            raise ValueError(f"{type(self).__name__} rank {self.rank} got an empty batch; every rank needs >= 1 row")
        trainer = self.cfg.trainer
        groups = micro_batch_groups(
            batch,
            micro_batch_size,
            trainer.max_tokens_per_microbatch,
            packed=self.packs_rows,
            share_prompts=trainer.share_prompt_forward,
        )
        count = torch.tensor([len(groups)], device=self.device)
        if dist.is_initialized() and self.world_size > 1:
            dist.all_reduce(count, op=dist.ReduceOp.MAX)
        plan = []
        for indices in balance_group_counts(groups, int(count.item())):
            micro = trim_padding_columns(batch.select(indices or [0]))
            micro.batch = micro.batch.to(self.device)
            plan.append((indices, micro))
        return plan

    @torch.no_grad()
    def score_rows(self, batch: TrainingBatch, score: Callable[[TrimmedMicroBatch, Any], torch.Tensor]) -> torch.Tensor:
        """Per-token scores [B, R] (float32, CPU; 0 outside `response_mask`) of `score(micro, model)` over the forward
        micro-batches of `batch`, the model in eval mode and no gradient: the body of every role's `forward`.
        `score` calls `model` once, as a Hugging Face model (the strategy runs it: `run_micro_batches`)."""
        model = self._require_model()
        model.eval()
        output = torch.zeros(len(batch), batch.response_width, dtype=torch.float32)
        plan = self.micro_batches(batch, self.cfg.trainer.micro_forward_batch_size_per_gpu)
        try:
            scores = self.strategy.run_micro_batches(
                model,
                plan,
                lambda entry, call: (None, score(entry[1], call)),
                forward_only=True,
                inputs=self.model_inputs,
            )
        finally:
            self.strategy.end_gradient_free_forward()  # else the next backward's gradient may double (FSDP2)
        for (indices, micro), scores_of in zip(plan, scores):
            write_response_rows(output, indices, scores_of.to(micro.batch.response_mask.device), micro)
        return output

    def mini_batch_denominator(
        self, reduction: str, loss_mask: torch.Tensor, max_seq_len: Optional[int], given: Optional[float] = None
    ) -> float:
        """What the loss reduction divides by over the WHOLE mini-batch, across every data-parallel rank.

        `given` is that number computed by the caller on the unpadded mini-batch (the trainer passes it); without
        it the ranks sum their shards' denominators (exact for token_mean / sequence_mean / token_sum; for
        seq_mean_token_sum_norm the loss-masked padding rows that even out the shards count as rows).
        """
        if given is not None:
            return float(given)
        local = torch.tensor([reduction_denominator(reduction, loss_mask, max_seq_len)], dtype=torch.float64)
        if dist.is_initialized() and self.world_size > 1:
            local = local.to(self.device)
            dist.all_reduce(local, op=dist.ReduceOp.SUM)
        # Ranks of one model copy (Megatron tensor parallelism, a sequence-parallel group) hold the same rows: count
        # them once.
        return float(local.item()) * self.gradient_average_factor / self.world_size / self.sequence_parallel_size

    @property
    def gradient_average_factor(self) -> float:
        """The strategy averages gradients over the data-parallel ranks (all ranks on FSDP2, world / TP size on
        Megatron); a rank's loss share is multiplied by this so the average becomes the sum over data-parallel ranks
        of `micro-batch loss sum / mini-batch denominator`. FSDP2 averages over sequence-parallel ranks too: each
        holds the part of its rows' gradient that its slice of the tokens produced, and the parts add up to it."""
        return float(getattr(self.strategy, "data_parallel_size", self.world_size))

    # ----- optimizer, weights, checkpoints ------------------------------------------------------------------------

    def runtime_info(self) -> dict[str, Any]:
        """This worker process: pid, node, torch intra-op threads, the OpenMP wait policy it runs with, and its
        resident memory now and at its peak (`rss`, `peak_rss`, bytes)."""
        return {
            "pid": os.getpid(),
            "node_ip": node_ip(),
            "torch_threads": torch.get_num_threads(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            **(read_rss() or {}),
        }

    def take_compute_seconds(self) -> dict[str, float]:
        """Seconds spent in `forward` / `forward_backward` / `optim_step` since the last call (see ComputeClock)."""
        return self.compute_clock.take()

    def take_compute_spans(self) -> list[tuple[str, float, float]]:
        """When `forward` / `forward_backward` / `optim_step` ran (wall clock) since the last call, for the run's
        timeline (`utils.timeline`)."""
        return self.compute_clock.spans.take()

    def forward_backward_step(self, batch: TrainingBatch, **kwargs: Any) -> dict[str, float]:
        """`forward_backward(batch, **kwargs)` then `optim_step()` in one call, so a mini-batch update costs the
        trainer one round trip per rank instead of two; returns the metrics plus `<role>/grad_norm`."""
        metrics = self.forward_backward(batch, **kwargs)
        metrics[f"{self.role}/grad_norm"] = float(self.optim_step())
        return metrics

    def train_mini_batches(
        self, mini_batches: list[tuple[TrainingBatch, dict[str, Any]]], epochs: int = 1, **options: Any
    ) -> list[MiniBatchResult]:
        """A whole update in one call: `epochs` passes over this rank's shards of the mini-batches, each a
        `forward_backward_step(batch, **batch_kwargs, **options)`, so the update costs the trainer one round trip per
        rank however many mini-batches and epochs it takes. Returns one `MiniBatchResult` per mini-batch."""
        steps: list[list[dict[str, float]]] = [[] for _ in mini_batches]
        for _ in range(epochs):
            for index, (batch, batch_kwargs) in enumerate(mini_batches):
                steps[index].append(self.forward_backward_step(batch, **batch_kwargs, **options))
        return [MiniBatchResult(tuple(metrics)) for metrics in steps]

    @timed_compute("optim_step")
    def optim_step(self) -> float:
        """Clip, step the optimizer and LR schedule, zero gradients; returns the grad norm before clipping. With
        `optimizer.offload_after_step` on a colocated run, the optimizer state then moves to CPU until the next
        step, leaving the accelerator's memory to the inference engines."""
        self._require_model()
        grad_norm = self.strategy.optimizer_step()
        if self.offloads_optimizer:
            self.strategy.offload_optimizer()
        return grad_norm

    def release_memory(self) -> dict[str, int]:
        """Return the accelerator memory this process's caching allocator holds but no tensor uses to the driver
        (`torch.cuda.empty_cache()`), so that other processes on the GPU (the colocated inference engines waking up)
        can have it: freed tensors (the offloaded optimizer state, gradients, activations) otherwise stay reserved
        here. Returns the bytes still reserved and allocated afterwards (0 on CPU, where there is nothing to do)."""
        if self.device.type != "cuda":
            return {"reserved_bytes": 0, "allocated_bytes": 0}
        torch.cuda.empty_cache()
        return {
            "reserved_bytes": int(torch.cuda.memory_reserved(self.device)),
            "allocated_bytes": int(torch.cuda.memory_allocated(self.device)),
        }

    @property
    def offloads_optimizer(self) -> bool:
        """True when this role moves its optimizer state to CPU after each step: `optimizer.offload_after_step`, a
        colocated placement (engines then need the memory) and an accelerator (on CPU there is nothing to free)."""
        optimizer = getattr(self.section, "optimizer", None) if self.trainable else None
        return bool(
            optimizer is not None
            and optimizer.offload_after_step
            and self.cfg.trainer.placement.colocate_all
            and self.device.type != "cpu"
        )

    def get_lr(self) -> float:
        """The learning rate the next optimizer step uses."""
        self._require_model()
        return self.strategy.lr

    def get_weights(
        self, dtype: Optional[str | torch.dtype] = None, trainable_only: bool = False
    ) -> list[tuple[str, torch.Tensor]]:
        """Rank 0: every (Hugging Face name, CPU tensor) of the model, cast to `dtype` if given; with
        `trainable_only`, just the trained parameters (a LoRA model's adapters). Other ranks take part in the gather
        and return []."""
        self._require_model()
        state = self.strategy.trainable_state_dict() if trainable_only else self.strategy.full_state_dict()
        target = resolve_dtype(dtype) if dtype is not None else None
        return [(name, tensor if target is None else tensor.to(target)) for name, tensor in state.items()]

    def save_checkpoint(self, directory: str) -> None:
        """Write this group's sharded model/optimizer/scheduler/RNG state into `directory` (all ranks call it)."""
        self._require_model()
        self.strategy.save_checkpoint(directory, extra={"role": self.role, "world_size": self.world_size})

    def load_checkpoint(self, directory: str) -> None:
        """Restore a checkpoint written by `save_checkpoint` of a group of the same role and size."""
        self._require_model()
        extra = self.strategy.load_checkpoint(directory)
        if extra.get("role") != self.role or extra.get("world_size") != self.world_size:
            raise ValueError(
                f"checkpoint {directory} was written by role {extra.get('role')!r} with {extra.get('world_size')} "
                f"ranks; this is role {self.role!r} with {self.world_size}"
            )

    def save_hf_model(self, directory: str) -> None:
        """Export the model (and the tokenizer found next to the loaded model, if any) as a Hugging Face folder."""
        self._require_model()
        self.strategy.save_hf_model(directory, self._tokenizer() if self.rank == 0 else None)

    def _tokenizer(self) -> Any:
        try:
            return load_tokenizer(self.model_path)
        except (OSError, ValueError) as exc:
            logger.warning("no tokenizer saved with the model: cannot load one from %s (%s)", self.model_path, exc)
            return None

    # ----- plumbing -----------------------------------------------------------------------------------------------

    def import_registries(self, blob: bytes) -> dict[str, list[str]]:
        """Install user-registered losses/estimators exported by the driver (`export_user_registrations`)."""
        return import_user_registrations(blob)

    def execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `fn(self, *args, **kwargs)` inside this worker (e.g. the sender half of a weight-sync strategy)."""
        return fn(self, *args, **kwargs)
