"""`MegatronStrategy` (GPU): train a Hugging Face causal LM as a megatron-core `GPTModel` behind the FSDP2 contract.

`prepare(hf_model)` initialises megatron-core's model-parallel groups (tensor, expert; the remaining ranks are data
parallel), builds the `GPTModel` for the HF config, loads this rank's TP/EP shard of the converted weights
(`skyrl_train.models.megatron_convert`), wraps it in megatron-core's `DistributedDataParallel` and builds its
distributed optimizer (Adam with decoupled weight decay, float32 main weights, state sharded over the data-parallel
ranks). The returned module is called like an HF model (`MegatronCausalLM`), so the workers' micro-batch loop,
log-prob and loss code are shared with FSDP2; `backward` accumulates into megatron's gradient buffers and
`optimizer_step` reduce-scatters them, clips, steps and copies the new weights back.

`full_state_dict` gathers the TP and EP shards and converts back to HF names (weight sync and HF export);
checkpoints and exports are `megatron_checkpoint`'s. Pipeline stages (`pipeline_model_parallel_size`,
uneven first/last stages) run the micro-batches through megatron-core's 1F1B schedule (`run_micro_batches`);
context parallelism is refused by config validation (not implemented).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist

from skyrl_train.config.roles import MegatronConfig, OptimizerConfig
from skyrl_train.models.loading import resolve_dtype
from skyrl_train.models.megatron_convert import (
    GPTArch,
    arch_from_hf_config,
    check_tensor_parallel,
    gather_state,
    hf_to_megatron,
    is_expert_parameter,
    megatron_to_hf,
    shard_state,
    strip_extra_state,
)
from skyrl_train.models.megatron_pipeline import merge_stage_states, pipeline_stage_layers, stage_state
from skyrl_train.workers.strategy.fsdp2 import move_optimizer_state
from skyrl_train.workers.strategy.megatron_checkpoint import MegatronCheckpointing
from skyrl_train.workers.strategy.megatron_lora import (
    AdapterLayout,
    LoRABranch,
    attach_adapters,
    gather_adapters,
    is_adapter_parameter,
)
from skyrl_train.workers.strategy.megatron_model import (
    MegatronCausalLM,
    build_gpt_model,
    check_router_settings,
    require_megatron_runtime,
)
from skyrl_train.workers.strategy.megatron_schedule import run_pipelined
from skyrl_train.workers.strategy.micro_batch_run import MicroBatchBody, ModelInputs, run_in_order
from skyrl_train.workers.strategy.optimizer import build_scheduler

logger = logging.getLogger(__name__)


def megatron_optimizer_kwargs(
    config: OptimizerConfig, params_dtype: torch.dtype, megatron: Optional[MegatronConfig] = None
) -> dict[str, Any]:
    """Keyword arguments of megatron-core's `OptimizerConfig` from a role's `optimizer` section (distributed Adam)
    and, when given, its `megatron` section's optimizer settings (CPU offload, precision-aware optimizer)."""
    if len(config.adam_betas) != 2:
        raise ValueError(f"optimizer.adam_betas must hold two numbers (beta1, beta2), got {config.adam_betas}")
    megatron = megatron or MegatronConfig()
    return dict(
        optimizer_cpu_offload=megatron.optimizer_cpu_offload,
        optimizer_offload_fraction=float(megatron.optimizer_offload_fraction),
        overlap_cpu_optimizer_d2h_h2d=megatron.overlap_cpu_optimizer_d2h_h2d,
        use_precision_aware_optimizer=megatron.use_precision_aware_optimizer,
        optimizer="adam",
        lr=config.lr,
        weight_decay=config.weight_decay,
        adam_beta1=float(config.adam_betas[0]),
        adam_beta2=float(config.adam_betas[1]),
        clip_grad=config.max_grad_norm if config.max_grad_norm > 0 else 0.0,
        use_distributed_optimizer=True,
        bf16=params_dtype == torch.bfloat16,
        fp16=params_dtype == torch.float16,
        params_dtype=params_dtype,
    )


def _gather_shards(local: dict[str, torch.Tensor], group: Any) -> list[dict[str, torch.Tensor]]:
    """Every rank's `local` tensors of `group`, in group-rank order, on CPU in float32 (a collective of the group)."""
    shards: list[dict[str, torch.Tensor]] = [dict() for _ in range(dist.get_world_size(group))]
    for name in sorted(local):
        tensor = local[name].detach().float().contiguous()
        parts = [torch.empty_like(tensor) for _ in shards]
        dist.all_gather(parts, tensor, group=group)
        for shard, part in zip(shards, parts):
            shard[name] = part.cpu()
    return shards


def _inner_optimizers(optimizer: Any) -> list[torch.optim.Optimizer]:
    chained = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    return [inner.optimizer for inner in chained if getattr(inner, "optimizer", None) is not None]


class MegatronStrategy(MegatronCheckpointing):
    """Megatron-core training of one model across the ranks of the default process group (CUDA only).

    Same methods as `FSDP2Strategy`: `prepare`, `backward`, `optimizer_step`, `lr`, `offload_optimizer` /
    `reload_optimizer`, `full_state_dict`, `save_checkpoint` / `load_checkpoint`, `save_hf_model`; plus
    `data_parallel_size` (gradients are averaged over the data-parallel ranks only).
    """

    name = "megatron"

    def __init__(
        self,
        megatron: MegatronConfig,
        device: torch.device,
        optimizer: Optional[OptimizerConfig] = None,
        gradient_checkpointing: bool = False,
        seed: int = 42,
    ) -> None:
        require_megatron_runtime(device)
        if megatron.context_parallel_size != 1:
            raise NotImplementedError(
                f"megatron.context_parallel_size={megatron.context_parallel_size} is not supported yet; set 1"
            )
        self.megatron = megatron
        self.device = device
        self.optimizer_config = optimizer
        self.gradient_checkpointing = gradient_checkpointing
        self.seed = seed
        self.params_dtype = resolve_dtype(megatron.param_dtype)
        self.arch: Optional[GPTArch] = None
        self.stage_layers: Optional[range] = None
        """The decoder layers this rank's pipeline stage holds (all of them without pipeline stages)."""
        self.hf_config: Any = None
        self.ddp_model: Any = None
        self.model: Optional[MegatronCausalLM] = None
        self.optimizer: Any = None
        self.scheduler: Optional[torch.optim.lr_scheduler.LRScheduler] = None
        self._lr_holder: Optional[torch.optim.Optimizer] = None
        self.num_training_steps: Optional[int] = None
        self.optimizer_offloaded = False
        self.adapters: list[LoRABranch] = []
        """The LoRA adapters on this rank's model (`megatron_lora`), empty for a full fine-tune."""
        self.peft_config: Any = None
        """peft's `LoraConfig` of a LoRA model (written with its adapter exports)."""
        self.merge_adapters_on_export = False
        """`save_hf_model` of a LoRA model also writes the merged full model (`model.lora.merge_on_export`)."""

    @classmethod
    def from_section(
        cls,
        section: Any,
        device: torch.device,
        optimizer: Optional[OptimizerConfig],
        gradient_checkpointing: bool,
        seed: int = 42,
    ) -> MegatronStrategy:
        """The strategy for a role's config section (`trainer.<role>`: its `megatron` settings); `seed` is the run's
        `trainer.seed`, which seeds megatron's model-parallel RNG tracker."""
        strategy = cls(section.megatron, device, optimizer, gradient_checkpointing, seed=seed)
        lora = getattr(getattr(section, "model", None), "lora", None)
        strategy.merge_adapters_on_export = bool(lora is not None and lora.merge_on_export)
        return strategy

    @property
    def rank(self) -> int:
        """This process's rank in the default group."""
        return dist.get_rank()

    @property
    def data_parallel_size(self) -> int:
        """Data-parallel ranks: the world size over the tensor-parallel size times the pipeline stages."""
        return dist.get_world_size() // (
            self.megatron.tensor_model_parallel_size * self.megatron.pipeline_model_parallel_size
        )

    @property
    def expert_tensor_parallel_size(self) -> int:
        """Ranks that split each expert's weights: `megatron.expert_tensor_parallel_size`, or the tensor-parallel
        size when that is null."""
        return self.megatron.expert_tensor_parallel_size or self.megatron.tensor_model_parallel_size

    @property
    def pipeline_stages(self) -> int:
        """Pipeline stages the model is split into (`megatron.pipeline_model_parallel_size`)."""
        return self.megatron.pipeline_model_parallel_size

    def prepare(self, model: torch.nn.Module, num_training_steps: Optional[int] = None) -> MegatronCausalLM:
        """Build the Megatron model from the HF `model` (its config and weights), shard it and, for a trainable
        role, build the distributed optimizer and the LR schedule. A peft (LoRA) model's adapters move onto the
        Megatron layers (`megatron_lora.attach_adapters`) and only they train."""
        from megatron.core import parallel_state, tensor_parallel
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

        tp, ep, pp = (
            self.megatron.tensor_model_parallel_size,
            self.megatron.expert_model_parallel_size,
            self.megatron.pipeline_model_parallel_size,
        )
        etp = self.expert_tensor_parallel_size
        torch.cuda.set_device(self.device)
        if not parallel_state.model_parallel_is_initialized():
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=tp,
                pipeline_model_parallel_size=pp,
                expert_model_parallel_size=ep,
                expert_tensor_parallel_size=etp,
            )
        tensor_parallel.model_parallel_cuda_manual_seed(self.seed)
        state, adapters = self._base_state_and_adapters(model)
        self.arch = arch_from_hf_config(self.hf_config)
        check_tensor_parallel(self.arch, tp, self.megatron.expert_tensor_parallel_size or 0)
        if ep > 1 and not self.arch.is_moe:
            raise ValueError(f"megatron.expert_model_parallel_size={ep} needs a mixture-of-experts model")
        check_router_settings(
            self.arch,
            self.megatron.moe_router_score_function,
            self.megatron.moe_router_enable_expert_bias,
            "trainer.<role>.megatron",
        )
        first_layers = self.megatron.num_layers_in_first_pipeline_stage
        last_layers = self.megatron.num_layers_in_last_pipeline_stage
        stage = parallel_state.get_pipeline_model_parallel_rank() if pp > 1 else 0
        self.stage_layers = pipeline_stage_layers(self.arch.num_layers, pp, first_layers, last_layers)[stage]
        first_stage, last_stage = stage == 0, stage == pp - 1
        config, gpt = build_gpt_model(
            self.arch,
            self.params_dtype,
            tp,
            pre_process=first_stage,
            post_process=last_stage,
            expert_parallel_size=ep,
            expert_tensor_parallel_size=etp,
            recompute=self.gradient_checkpointing,
            pipeline_parallel_size=pp,
            first_stage_layers=first_layers,
            last_stage_layers=last_layers,
        )
        full = hf_to_megatron({k: v.float() for k, v in state.items()}, self.arch, tp)
        if pp > 1:
            full = stage_state(full, self.stage_layers, first_stage, last_stage, self.arch.tied_embeddings)
        local = shard_state(
            full,
            tp,
            parallel_state.get_tensor_model_parallel_rank(),
            ep,
            parallel_state.get_expert_model_parallel_rank(),
            etp,
            parallel_state.get_expert_tensor_parallel_rank(),
        )
        own = gpt.state_dict()
        local = {name: tensor.to(self.params_dtype) for name, tensor in local.items()}
        local.update({name: value for name, value in own.items() if name.endswith("._extra_state")})
        gpt.load_state_dict(local, strict=True)
        if self.peft_config is not None:
            layout = AdapterLayout(
                self.arch.num_attention_heads,
                self.arch.num_query_groups,
                self.arch.head_dim,
                tp,
                parallel_state.get_tensor_model_parallel_rank(),
                self.stage_layers,
                sequence_parallel=config.sequence_parallel,
            )
            self.adapters = attach_adapters(gpt, adapters, self.peft_config.lora_alpha, layout, self.params_dtype)
        gpt.cuda(self.device)
        del full, model, state, adapters
        if self.optimizer_config is None:
            gpt.eval()  # forward only; eval mode also lets a MoE model run over tensor-parallel ranks
            self.ddp_model = gpt
        else:
            from megatron.core.optimizer import OptimizerConfig as McoreOptimizerConfig
            from megatron.core.optimizer import get_megatron_optimizer

            ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=True)
            self.ddp_model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=gpt)
            self.optimizer = get_megatron_optimizer(
                McoreOptimizerConfig(
                    **megatron_optimizer_kwargs(self.optimizer_config, self.params_dtype, self.megatron)
                ),
                [self.ddp_model],
            )
            # The LR schedule is a transformers schedule stepped on a one-parameter holder; its lr is copied into
            # megatron's param groups before every step (megatron's optimizer is not a torch.optim.Optimizer).
            self._lr_holder = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=self.optimizer_config.lr)
            self.scheduler = build_scheduler(self._lr_holder, self.optimizer_config, num_training_steps)
            self.num_training_steps = num_training_steps
        self.model = MegatronCausalLM(self.ddp_model, self.arch.vocab_size, self.adapters)
        return self.model

    def _base_state_and_adapters(self, model: torch.nn.Module) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """The HF model's state dict and, for a peft model, its base weights (HF names) and adapter tensors (peft
        names) apart; sets `hf_config` and `peft_config`."""
        from skyrl_train.models.lora_state import base_model_name, is_adapter_name

        peft_configs = getattr(model, "peft_config", None)
        if not peft_configs:
            self.hf_config = model.config
            return model.state_dict(), {}
        if len(peft_configs) != 1:
            raise ValueError(f"the Megatron workers train one LoRA adapter; the model has {sorted(peft_configs)}")
        self.peft_config = next(iter(peft_configs.values()))
        if self.peft_config.lora_dropout:
            raise ValueError(
                f"trainer.<role>.model.lora.dropout={self.peft_config.lora_dropout}: LoRA dropout is not supported on"
                " the Megatron workers (a dropout mask would differ between tensor-parallel ranks); set it to 0"
            )
        self.hf_config = model.get_base_model().config
        state = model.state_dict()
        adapters = {name: tensor for name, tensor in state.items() if is_adapter_name(name)}
        base = {base_model_name(name): tensor for name, tensor in state.items() if not is_adapter_name(name)}
        return base, adapters

    def _require_optimizer(self) -> Any:
        if self.optimizer is None:
            raise RuntimeError("this strategy has no optimizer: the role is forward-only (e.g. ref) or not prepared")
        return self.optimizer

    @property
    def lr(self) -> float:
        """Learning rate the next optimizer step uses."""
        self._require_optimizer()
        return float(self._lr_holder.param_groups[0]["lr"])

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate gradients of `loss` into megatron's gradient buffers (reduced at `optimizer_step`)."""
        loss.backward()

    def run_micro_batches(
        self,
        model: MegatronCausalLM,
        entries: Sequence[Any],
        body: MicroBatchBody,
        forward_only: bool = False,
        inputs: Optional[ModelInputs] = None,
    ) -> list[Any]:
        """Each micro-batch's `body` (`micro_batch_run`): in turn without pipeline stages, else inside megatron-core's
        1F1B schedule on the last stage (`megatron_schedule`), which needs `inputs` to feed the first stage; every
        stage returns the payloads."""
        if self.pipeline_stages == 1:
            return run_in_order(model, entries, body, forward_only, self.backward)
        if inputs is None:
            raise ValueError("run_micro_batches: pipeline stages need inputs(entry) -> the model's keyword arguments")
        return run_pipelined(
            self.ddp_model, self.arch.vocab_size, entries, body, forward_only, inputs, self.model.sequence_multiple
        )

    def end_gradient_free_forward(self) -> None:
        """Nothing to do: Megatron keeps every rank's parameter shard in place between forwards (the FSDP2
        strategy reshards here)."""

    def offload_optimizer(self) -> int:
        """Move the distributed optimizer's Adam state to CPU; returns the bytes moved. Nothing moves with
        `megatron.optimizer_cpu_offload`: megatron-core's hybrid optimizer already keeps its share there and places
        the rest itself."""
        if self.megatron.optimizer_cpu_offload:
            return 0
        moved = sum(move_optimizer_state(inner, torch.device("cpu")) for inner in _inner_optimizers(self.optimizer))
        self.optimizer_offloaded = True
        return moved

    def reload_optimizer(self) -> int:
        """Bring an offloaded optimizer state back to the GPU; returns the bytes moved (none with
        `megatron.optimizer_cpu_offload`, whose CPU share stays on the CPU)."""
        if self.megatron.optimizer_cpu_offload:
            return 0
        moved = sum(move_optimizer_state(inner, self.device) for inner in _inner_optimizers(self.optimizer))
        self.optimizer_offloaded = False
        return moved

    def reduce_gradients(self) -> None:
        """Finish the backward passes' gradients before a step, as megatron-core's training loop does
        (`finalize_model_grads`): the data-parallel reduce-scatter into the distributed optimizer's shards, the sum over
        tensor-parallel ranks of the gradients each rank only has part of (Qwen3's q/k norms, shared by the heads the
        ranks split), and with pipeline stages the sum of a tied embedding's two copies."""
        from megatron.core.distributed.finalize_model_grads import finalize_model_grads

        finalize_model_grads([self.ddp_model])

    def optimizer_step(self) -> float:
        """Reduce-scatter the gradients, clip to `max_grad_norm`, step Adam and the LR schedule, zero the gradient
        buffers; returns the grad norm before clipping. A non-finite norm skips the update."""
        optimizer = self._require_optimizer()
        if self.optimizer_offloaded:
            self.reload_optimizer()
        for group in optimizer.param_groups:
            group["lr"] = self.lr
        self.reduce_gradients()
        success, grad_norm, _ = optimizer.step()
        grad_norm = float(grad_norm) if grad_norm is not None else float("nan")
        if success and np.isfinite(grad_norm):
            self.scheduler.step()
        else:
            logger.warning("grad norm is %s: skipping this optimizer step", grad_norm)
        self.ddp_model.zero_grad_buffer()
        optimizer.zero_grad()
        return grad_norm

    def _gpt(self) -> torch.nn.Module:
        return getattr(self.ddp_model, "module", self.ddp_model)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model with Hugging Face names on CPU (float32), gathered on rank 0 over the TP, EP and pipeline
        groups ({} on other ranks; every rank must call this)."""
        from megatron.core import parallel_state

        local = {
            name: tensor
            for name, tensor in strip_extra_state(self._gpt().state_dict()).items()
            if not is_adapter_parameter(name)
        }
        dense = _gather_shards(
            {n: t for n, t in local.items() if not is_expert_parameter(n)},
            parallel_state.get_tensor_model_parallel_group(),
        )
        # the experts split over their own tensor-parallel ranks, then spread over the expert-parallel ones
        experts = _gather_shards(
            {n: t for n, t in local.items() if is_expert_parameter(n)},
            parallel_state.get_expert_tensor_parallel_group(),
        )
        ep = self.megatron.expert_model_parallel_size
        per_ep: list[Any] = [experts]
        if ep > 1:
            per_ep = [None] * ep
            dist.all_gather_object(per_ep, experts, group=parallel_state.get_expert_model_parallel_group())
        # Only rank 0 returns the model: the full tensors are built on rank 0 and, with stages, on the other stages of
        # its pipeline; every other rank would hold a whole stage in host memory for nothing at every weight sync.
        builds = self.rank == 0
        if self.pipeline_stages > 1:
            builds = parallel_state.get_pipeline_model_parallel_first_rank() == 0
        full = {**gather_state([dense]), **(gather_state(per_ep) if self.arch.is_moe else {})} if builds else {}
        if self.pipeline_stages > 1:
            # every pipeline's first stage receives its stages (global rank 0 is the first stage of its pipeline)
            receives = parallel_state.is_pipeline_first_stage()
            stages: Optional[list[Any]] = [None] * self.pipeline_stages if receives else None
            dist.gather_object(
                (full, self.stage_layers),
                stages,
                dst=parallel_state.get_pipeline_model_parallel_first_rank(),
                group=parallel_state.get_pipeline_model_parallel_group(),
            )
            if self.rank == 0:
                full = merge_stage_states(stages, self.arch.tied_embeddings)
        if self.rank != 0:
            return {}
        return megatron_to_hf(full, self.arch)

    @property
    def is_adapter_model(self) -> bool:
        """True when the model trains LoRA adapters."""
        return self.peft_config is not None

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """The LoRA adapters, whole, by peft name, on CPU on rank 0 ({} on the other ranks; every rank must call
        this). Gathers nothing of the frozen base weights. A full fine-tune has no such subset: it raises."""
        from megatron.core import parallel_state

        if not self.is_adapter_model:
            raise RuntimeError("trainable_state_dict: this Megatron model trains every weight; use full_state_dict")
        pipeline = parallel_state.get_pipeline_model_parallel_group() if self.pipeline_stages > 1 else None
        first = parallel_state.get_pipeline_model_parallel_first_rank() if pipeline is not None else 0
        return gather_adapters(self.adapters, parallel_state.get_tensor_model_parallel_group(), pipeline, first)
