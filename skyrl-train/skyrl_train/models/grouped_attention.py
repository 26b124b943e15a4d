"""SDPA that keeps grouped-query key/value heads unrepeated when a padding mask is passed, on the CPU.

Transformers' `sdpa` attention copies every key and value head `num_attention_heads / num_key_value_heads` times
(`repeat_kv`) whenever the model passes an attention mask on a CPU or CUDA device, because CUDA's fused kernels do
not take a mask together with grouped heads. The `hf` engine always passes one (its rows are left-padded), so on
a grouped-query model each decode step copied the whole KV cache of every layer before attending to it, a cost that
grows with the sequence (`benchmarks/grouped_attention.py` measures what removing it gains).

PyTorch's CPU kernels take the mask and the grouped heads together (`enable_gqa=True`) and give the same outputs as
the repeated heads. `GROUPED_SDPA` (registered with transformers' attention and mask interfaces on import) does that
for masked CPU calls and hands every other call (no mask, other devices, position biases, paged caches) to
transformers' own `sdpa` function unchanged.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch.nn import functional
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

GROUPED_SDPA = "skyrl_grouped_sdpa"
"""The attention implementation name `use_grouped_sdpa` switches a model to."""

_DELEGATED_ARGUMENTS = ("position_bias", "cache", "output_attentions")
"""Arguments only transformers' own function handles: a call carrying one of them goes there."""


def grouped_sdpa_attention(
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
    """Hugging Face attention function (`GROUPED_SDPA`): query [B, H, Q, D], key/value [B, Hkv, K, D] ->
    ([B, Q, H, D], None), as transformers' `sdpa` computes it."""
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    if (
        not grouped
        or attention_mask is None
        or query.device.type != "cpu"
        or any(kwargs.get(name) for name in _DELEGATED_ARGUMENTS)
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    # With a mask, transformers' function never sets `is_causal` (the mask carries causality), so neither does this.
    output = functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return output.transpose(1, 2).contiguous(), None


def use_grouped_sdpa(model: PreTrainedModel) -> bool:
    """Switch `model` from transformers' `sdpa` to `GROUPED_SDPA` when it runs on the CPU, uses grouped-query
    attention and lets its attention be set; returns whether it was switched (any other model is left as it is)."""
    config = model.config
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    can_set = getattr(model, "_can_set_attn_implementation", None)
    if (
        config._attn_implementation != "sdpa"
        or not heads
        or kv_heads == heads
        or next(model.parameters()).device.type != "cpu"
        or not callable(can_set)
        or not can_set()
    ):
        return False
    model.set_attn_implementation(GROUPED_SDPA)
    return config._attn_implementation == GROUPED_SDPA


AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_attention)
AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
