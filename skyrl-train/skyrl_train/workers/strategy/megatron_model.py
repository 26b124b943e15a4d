"""Building a megatron-core `GPTModel` from a Hugging Face config, and calling it like a Hugging Face causal LM.

megatron-core is imported lazily (it is an optional extra, `skyrl-train[megatron]`); `require_megatron_runtime`
gives the start-up error on machines without it or without CUDA. Model construction and weight loading also run on
CPU (process groups over gloo, `use_cpu_initialization=True`), which the tests use; training needs CUDA.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from contextlib import AbstractContextManager
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np
import torch

from skyrl_train.models.megatron_convert import GPTArch
from skyrl_train.models.varlen_attention import VarlenSegments
from skyrl_train.workers.strategy.megatron_packing import (
    packed_call_params,
    use_packable_attention,
    use_token_positions,
)
from skyrl_train.workers.strategy.micro_batch_run import kept_logits


def require_megatron_runtime(device: torch.device) -> None:
    """Raise RuntimeError when the Megatron strategy cannot run here: megatron-core missing, or no CUDA device."""
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        raise RuntimeError(
            "trainer.strategy=megatron needs megatron-core: pip install -e './skyrl-train[megatron]' "
            "(megatron-core 0.16.x), or use trainer.strategy=fsdp2"
        )
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(
            f"trainer.strategy=megatron needs CUDA GPUs (megatron-core's forward runs on CUDA); this worker's device "
            f"is {device.type!r} (cuda available: {torch.cuda.is_available()}). Use trainer.strategy=fsdp2 on CPU"
        )


def transformer_config_kwargs(
    arch: GPTArch,
    params_dtype: torch.dtype,
    tensor_parallel_size: int = 1,
    expert_parallel_size: int = 1,
    expert_tensor_parallel_size: Optional[int] = None,
    use_cpu_initialization: bool = False,
    recompute: bool = False,
    pipeline_parallel_size: int = 1,
    first_stage_layers: Optional[int] = None,
    last_stage_layers: Optional[int] = None,
) -> dict[str, Any]:
    """Keyword arguments of megatron-core's `TransformerConfig` for `arch` (a Qwen2/Qwen3/Llama-style decoder:
    RMSNorm, SwiGLU MLP, RoPE, no linear biases except the optional QKV bias, no dropout). With pipeline stages,
    `first_stage_layers` / `last_stage_layers` are the uneven first and last stages (None: even split)."""
    kwargs: dict[str, Any] = dict(
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        num_attention_heads=arch.num_attention_heads,
        num_query_groups=arch.num_query_groups,
        kv_channels=arch.head_dim,
        ffn_hidden_size=arch.ffn_hidden_size,
        normalization="RMSNorm",
        layernorm_epsilon=arch.norm_epsilon,
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        add_bias_linear=False,
        add_qkv_bias=arch.qkv_bias,
        qk_layernorm=arch.qk_layernorm,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        tensor_model_parallel_size=tensor_parallel_size,
        # each tensor-parallel rank keeps its share of the tokens between layers (norms, residuals, dropout): less
        # activation memory, and what megatron-core requires to train a MoE model over tensor-parallel ranks
        sequence_parallel=tensor_parallel_size > 1,
        expert_model_parallel_size=expert_parallel_size,
        # None: megatron-core's default, the tensor-parallel size
        expert_tensor_parallel_size=expert_tensor_parallel_size,
        params_dtype=params_dtype,
        bf16=params_dtype == torch.bfloat16,
        fp16=params_dtype == torch.float16,
        use_cpu_initialization=use_cpu_initialization,
        # The fused kernels below need Apex/TE or CUDA extensions; the unfused paths are plain torch.
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        gradient_accumulation_fusion=False,
    )
    if recompute:
        kwargs.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    if pipeline_parallel_size > 1:
        kwargs.update(
            pipeline_model_parallel_size=pipeline_parallel_size,
            pipeline_dtype=params_dtype,
            num_layers_in_first_pipeline_stage=first_stage_layers,
            num_layers_in_last_pipeline_stage=last_stage_layers,
            # micro-batches are trimmed to their own widths: the stages exchange each activation's shape first
            variable_seq_lengths=True,
            # megatron-core checks this even for dense models: its allgather dispatcher takes fixed shapes only
            moe_token_dispatcher_type="alltoall",
        )
    if arch.is_moe:
        kwargs.update(
            num_moe_experts=arch.num_experts,
            moe_ffn_hidden_size=arch.moe_ffn_hidden_size,
            moe_router_topk=arch.moe_router_topk,
            # softmax over the top-k logits renormalises the chosen weights; softmax over all experts first (read at
            # the top k) keeps the raw weights, as Qwen-MoE's `norm_topk_prob: false` does
            moe_router_pre_softmax=not arch.normalize_topk_probs,
            moe_router_score_function=arch.router_score_function,
            moe_router_enable_expert_bias=arch.router_expert_bias,
            # alltoall needs CUDA streams at construction; with one expert rank allgather is equivalent (pipeline
            # stages need alltoall, see above)
            moe_token_dispatcher_type=(
                "alltoall" if expert_parallel_size > 1 or pipeline_parallel_size > 1 else "allgather"
            ),
            moe_router_load_balancing_type="none",
            moe_aux_loss_coeff=0.0,
            moe_grouped_gemm=False,
        )
        if arch.shared_expert_ffn_hidden_size:
            kwargs.update(
                moe_shared_expert_intermediate_size=arch.shared_expert_ffn_hidden_size, moe_shared_expert_gate=True
            )
    return kwargs


def check_router_settings(
    arch: GPTArch,
    score_function: Optional[str] = None,
    expert_bias: Optional[bool] = None,
    prefix: str = "trainer.<role>.megatron",
) -> None:
    """Refuse router settings (`<prefix>.moe_router_score_function`, `moe_router_enable_expert_bias`; None: the
    model's) that differ from the model's own router or that a dense model cannot take: the engines serve the Hugging
    Face model, whose router is fixed by its architecture, so a router trained another way would choose other experts
    than the model the engines run."""
    settings = {"moe_router_score_function": score_function, "moe_router_enable_expert_bias": expert_bias}
    own = {
        "moe_router_score_function": arch.router_score_function,
        "moe_router_enable_expert_bias": arch.router_expert_bias,
    }
    for key, value in settings.items():
        if value is None:
            continue
        if not arch.is_moe:
            raise ValueError(f"{prefix}.{key}={value}: {arch.model_type} is a dense model, with no MoE router to set")
        if value != own[key]:
            raise ValueError(
                f"{prefix}.{key}={value}: {arch.model_type}'s router runs with {key}={own[key]}, and the engines serve"
                f" that model; a router trained with another setting is not supported here (leave {key} null to take"
                " the model's)"
            )


class SequenceParallelRMSNorm(torch.nn.RMSNorm):
    """torch's RMSNorm built as a megatron layer spec builds a norm (`config`, `hidden_size`, `eps`), that also runs
    under sequence parallelism: each tensor-parallel rank normalises its share of the tokens, so its weight's gradient
    is partial, and the `sequence_parallel` mark has `finalize_model_grads` sum it over the ranks. (The local spec's
    `WrappedTorchNorm` refuses sequence parallelism; Transformer Engine's norm, which allows it, is not installed.)"""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-5, **_: Any) -> None:
        super().__init__(hidden_size, eps=eps)
        self.weight.sequence_parallel = bool(config.sequence_parallel)


def _block_spec(config: Any, layer_spec: Any) -> Any:
    """The decoder block of `layer_spec`'s layers with `SequenceParallelRMSNorm` everywhere (layer norms, q/k norms
    and the final norm)."""
    from megatron.core.transformer.identity_op import IdentityOp
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build

    layer_spec.submodules.input_layernorm = SequenceParallelRMSNorm
    layer_spec.submodules.pre_mlp_layernorm = SequenceParallelRMSNorm
    attention = layer_spec.submodules.self_attention.submodules
    for name in ("q_layernorm", "k_layernorm"):
        if getattr(attention, name) not in (None, IdentityOp):
            setattr(attention, name, SequenceParallelRMSNorm)
    layers = get_num_layers_to_build(config)
    return TransformerBlockSubmodules(layer_specs=[layer_spec] * layers, layer_norm=SequenceParallelRMSNorm)


def allow_router_without_transformer_engine() -> None:
    """Work around megatron-core 0.16.1's router on installs without Transformer Engine: `RouterGatingLinearFunction`
    reads the module global `te_general_gemm`, which `moe_utils` only defines when its Transformer Engine import
    succeeds, so every MoE forward raised NameError. Defining it as None selects the router's own torch matmul."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def build_gpt_model(
    arch: GPTArch,
    params_dtype: torch.dtype,
    tensor_parallel_size: int = 1,
    pre_process: bool = True,
    post_process: bool = True,
    **config_options: Any,
) -> tuple[Any, Any]:
    """(TransformerConfig, GPTModel) for `arch` on the current model-parallel groups (`initialize_model_parallel`
    must have run); `config_options` are `transformer_config_kwargs`'s (expert parallelism, CPU initialization,
    recompute, pipeline stages). `pre_process` / `post_process`: this pipeline stage holds the embedding / the final
    norm and output layer. The output layer gathers the logits over TP ranks (`parallel_output=False`); the
    vocabulary is padded to a multiple of the TP size. The model also runs packed sequences (`megatron_packing`)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig

    if arch.is_moe:
        allow_router_without_transformer_engine()
    config = TransformerConfig(**transformer_config_kwargs(arch, params_dtype, tensor_parallel_size, **config_options))
    spec = get_gpt_layer_local_spec(
        num_experts=arch.num_experts or None, moe_grouped_gemm=False, qk_layernorm=arch.qk_layernorm
    )
    use_packable_attention(spec)
    model = GPTModel(
        config,
        _block_spec(config, spec),
        vocab_size=arch.padded_vocab_size(tensor_parallel_size),
        max_sequence_length=arch.max_position_embeddings,
        parallel_output=False,
        share_embeddings_and_output_weights=arch.tied_embeddings,
        position_embedding_type="rope",
        rotary_base=int(arch.rope_theta),
        pre_process=pre_process,
        post_process=post_process,
    )
    use_token_positions(model)
    return config, model


def megatron_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Megatron's boolean mask [B, 1, S, S] (True = masked out) from an HF padding mask [B, S] (1 = token): causal,
    and keys that are padding are masked. A fully padded query row keeps its diagonal so softmax stays finite (its
    output is never read)."""
    length = attention_mask.shape[1]
    causal = torch.tril(torch.ones(length, length, dtype=torch.bool, device=attention_mask.device))
    allowed = causal[None] & attention_mask.bool()[:, None, :]
    allowed |= torch.eye(length, dtype=torch.bool, device=attention_mask.device)[None]
    return ~allowed[:, None]


def check_rope_positions(position_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
    """Refuse positions Megatron would not honour: megatron-core 0.16's `GPTModel` ignores `position_ids` and
    rotates query i by position i of the row, which gives the same attention as the caller's positions only when
    each row's real tokens (mask 1) are one run with consecutive positions (left or right padding): RoPE scores
    depend on the distance between positions. Rows that restart their positions (packed sequences) or leave padding
    between real tokens would be scored as one sequence."""
    mask = attention_mask.bool()
    offset = position_ids - torch.arange(position_ids.shape[-1], device=position_ids.device)
    big = torch.iinfo(offset.dtype).max
    highest = offset.masked_fill(~mask, -big).max(dim=-1).values
    lowest = offset.masked_fill(~mask, big).min(dim=-1).values
    broken = (highest != lowest) & mask.any(dim=-1)
    if bool(broken.any()):
        rows = broken.nonzero().flatten().tolist()
        raise ValueError(
            f"rows {rows[:8]} have real tokens whose positions are not one consecutive run: the Megatron model numbers "
            "positions 0..S-1 along each row (megatron-core ignores position_ids), so packed sequences or padding "
            "between real tokens are not supported with trainer.strategy=megatron"
        )


def _pad_segments(segments: VarlenSegments, extra: int) -> VarlenSegments:
    """`segments` with one more segment of `extra` tokens at the end, attending to itself only."""
    total = segments.num_tokens
    key_positions = segments.key_positions
    if key_positions is not None:
        key_positions = np.concatenate([key_positions, np.arange(total, total + extra)])
    return VarlenSegments(
        np.append(segments.query_starts, total),
        np.append(segments.query_lengths, extra),
        key_positions,
        None if key_positions is None else np.append(segments.key_lengths, extra),
    )


def _pad_right(tensor: torch.Tensor, extra: int, value: int = 0) -> torch.Tensor:
    return torch.nn.functional.pad(tensor, (0, extra), value=value)


def megatron_call_arguments(
    input_ids: torch.Tensor,
    attention_mask: Optional[torch.Tensor] = None,
    position_ids: Optional[torch.Tensor] = None,
    packed_segments: Optional[VarlenSegments] = None,
    sequence_multiple: int = 1,
    **_: Any,
) -> dict[str, Any]:
    """The keyword arguments of a `GPTModel` call (built by `build_gpt_model`) for a Hugging Face-style call: padded
    rows (`attention_mask`, positions checked by `check_rope_positions`), or one packed sequence [1, T] with its
    `packed_segments` and per-row `position_ids` (`models.packing.PackedRows.model_inputs`). Other HF keyword
    arguments (`use_cache`, ...) are ignored. The sequence is padded on the right to a multiple of `sequence_multiple`
    (the tensor-parallel size under sequence parallelism, which splits the tokens evenly over the ranks): padded rows
    get masked tokens, a packed sequence one more segment; the caller drops the padding's logits."""
    extra = -input_ids.shape[1] % sequence_multiple
    if packed_segments is not None:
        if input_ids.shape[0] != 1 or position_ids is None:
            raise ValueError(
                f"a packed call needs one sequence [1, T] and its position_ids, got input_ids {tuple(input_ids.shape)}"
                f" and position_ids {None if position_ids is None else tuple(position_ids.shape)}"
            )
        if extra:
            input_ids = _pad_right(input_ids, extra)
            position_ids = torch.cat([position_ids, torch.arange(extra, device=position_ids.device)[None]], dim=1)
            packed_segments = _pad_segments(packed_segments, extra)
        return {
            "input_ids": input_ids,
            "position_ids": position_ids,
            "attention_mask": None,
            "packed_seq_params": packed_call_params(packed_segments, position_ids),
        }
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if position_ids is None:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    if extra:
        input_ids, attention_mask, position_ids = (
            _pad_right(input_ids, extra),
            _pad_right(attention_mask, extra),
            _pad_right(position_ids, extra),
        )
    check_rope_positions(position_ids, attention_mask)
    return {
        "input_ids": input_ids,
        "position_ids": position_ids,
        "attention_mask": megatron_attention_mask(attention_mask),
    }


def sequence_multiple(config: Any) -> int:
    """The token count a call to a model of this `TransformerConfig` must be a multiple of: its tensor-parallel size
    under sequence parallelism (the ranks split the tokens evenly), else 1."""
    return config.tensor_model_parallel_size if config.sequence_parallel else 1


class MegatronCausalLM(torch.nn.Module):
    """A (possibly DDP-wrapped) `GPTModel` called with Hugging Face arguments: `forward(input_ids, attention_mask,
    position_ids)` (padded rows) or `forward(input_ids, position_ids=..., packed_segments=...)` (a packed sequence)
    returns an object with `.logits` [B, S, vocab] (vocab padding removed; only the `logits_to_keep` positions when
    given, as HF models do), so the workers' log-prob code runs unchanged."""

    def __init__(self, module: torch.nn.Module, vocab_size: int, adapters: Sequence[Any] = ()) -> None:
        super().__init__()
        self.module = module
        self.vocab_size = vocab_size
        self._adapters = list(adapters)
        self.sequence_multiple = sequence_multiple(getattr(module, "module", module).config)
        """Calls are padded to a multiple of this many tokens (`megatron_call_arguments`)."""

    def disable_adapter(self) -> AbstractContextManager[None]:
        """A context in which the model runs without its LoRA adapters (peft's `disable_adapter`): the base model,
        the reference policy of a LoRA run. Raises RuntimeError on a model without adapters."""
        from skyrl_train.workers.strategy.megatron_lora import adapters_disabled

        return adapters_disabled(self._adapters)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        packed_segments: Optional[VarlenSegments] = None,
        logits_to_keep: int | torch.Tensor = 0,
        **_: Any,
    ) -> SimpleNamespace:
        """Logits of every position, or of `logits_to_keep` (the HF `use_cache` and similar keyword arguments are
        ignored). The output layer runs on every position either way."""
        arguments = megatron_call_arguments(
            input_ids, attention_mask, position_ids, packed_segments, self.sequence_multiple
        )
        logits = self.module(**arguments)[:, : input_ids.shape[1], : self.vocab_size]
        return SimpleNamespace(logits=kept_logits(logits, logits_to_keep))
