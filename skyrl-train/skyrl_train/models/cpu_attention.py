"""The `hf` engine's attention on the CPU: grouped-query KV heads kept unrepeated, half precision run in float32.

Two costs of transformers' `sdpa` attention on a CPU decode step, both removed by `CPU_SDPA` (registered with
transformers' attention and mask interfaces on import):

- **Repeated KV heads.** `sdpa` copies every key and value head `num_attention_heads / num_key_value_heads` times
  (`repeat_kv`) whenever the model passes an attention mask on a CPU or CUDA device, because CUDA's fused kernels do
  not take a mask together with grouped heads. The `hf` engine always passes one (its rows are left-padded), so on a
  grouped-query model each decode step copied the whole KV cache of every layer before attending to it, a cost that
  grows with the sequence (`benchmarks/grouped_attention.py` measures what removing it gains). PyTorch's CPU kernels
  take the mask and the grouped heads together (`enable_gqa=True`) and give the same outputs as the repeated heads.
- **Half-precision attention.** PyTorch's CPU SDPA runs a masked bfloat16 (or float16) call several times slower
  than the same call in float32 (about 8x for one decode query over 300 keys), while a bfloat16 model's matmuls run
  faster than float32 ones on a CPU with native bfloat16 dot products (`config.auto_settings`). So a half-precision
  call on the CPU attends in float32 (its query, keys and values upcast, the output cast back): a little more
  accurate than attending in bfloat16, and a bfloat16 engine decodes faster than a float32 one.

Every other call (no mask on a full-precision call, other devices, position biases, paged caches) goes to
transformers' own `sdpa` function unchanged (half-precision inputs upcast on the CPU).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch.nn import functional
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

CPU_SDPA = "skyrl_cpu_sdpa"
"""The attention implementation name `use_cpu_sdpa` switches a model to."""

HALF_PRECISION = (torch.bfloat16, torch.float16)
"""Dtypes whose CPU attention runs in float32."""

_DELEGATED_ARGUMENTS = ("position_bias", "cache", "output_attentions")
"""Arguments only transformers' own function handles: a call carrying one of them goes there."""


def cpu_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    is_causal: Optional[bool] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Hugging Face attention function (`CPU_SDPA`): query [B, H, Q, D], key/value [B, Hkv, K, D] ->
    ([B, Q, H, D], None), as transformers' `sdpa` computes it (in float32 for half-precision CPU inputs)."""
    dtype = query.dtype
    if query.device.type == "cpu" and dtype in HALF_PRECISION:
        query, key, value = query.float(), key.float(), value.float()
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.float()
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    if (
        not grouped
        or attention_mask is None
        or query.device.type != "cpu"
        or any(kwargs.get(name) for name in _DELEGATED_ARGUMENTS)
    ):
        output, weights = sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
        return output.to(dtype), weights
    # With a mask, transformers' function never sets `is_causal` (the mask carries causality), so neither does this.
    output = functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return output.transpose(1, 2).to(dtype).contiguous(), None


def use_cpu_sdpa(model: PreTrainedModel) -> bool:
    """Switch `model` from transformers' `sdpa` to `CPU_SDPA` when it runs on the CPU, uses grouped-query attention
    or half-precision weights, and lets its attention be set; returns whether it was switched (any other model is
    left as it is)."""
    config = model.config
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    can_set = getattr(model, "_can_set_attn_implementation", None)
    parameter = next(model.parameters())
    if (
        config._attn_implementation != "sdpa"
        or not heads
        or (kv_heads == heads and parameter.dtype not in HALF_PRECISION)
        or parameter.device.type != "cpu"
        or not callable(can_set)
        or not can_set()
    ):
        return False
    model.set_attn_implementation(CPU_SDPA)
    return config._attn_implementation == CPU_SDPA


AttentionInterface.register(CPU_SDPA, cpu_sdpa_attention)
AttentionMaskInterface.register(CPU_SDPA, sdpa_mask)
