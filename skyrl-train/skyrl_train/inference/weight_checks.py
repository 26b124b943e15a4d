"""Check a weight update against the model before anything is copied, so an update that is wrong anywhere changes
nothing: the engines validate every name, shape and dtype first and copy only when all of them fit (two phases)."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Optional

import torch

logger = logging.getLogger(__name__)


def check_weight_update(named_tensors: Iterable[tuple[str, torch.Tensor]], targets: Mapping[str, torch.Tensor]) -> None:
    """Raise `ValueError` naming the first tensor that does not fit `targets` (the model's parameters and buffers by
    name, real or on the meta device): an unknown name (with the closest names), another shape, or a dtype of another
    kind (floating point for a floating-point parameter, the same dtype for any other)."""
    for name, tensor in named_tensors:
        target = targets.get(name)
        if target is None:
            close = difflib.get_close_matches(name, list(targets), n=3)
            raise ValueError(f"update_weights: the model has no parameter '{name}'; close names: {close}")
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"update_weights: '{name}' is a {type(tensor).__name__}, expected a torch.Tensor")
        if tuple(target.shape) != tuple(tensor.shape):
            raise ValueError(
                f"update_weights: '{name}' has shape {tuple(tensor.shape)}, the model expects {tuple(target.shape)}"
            )
        fits = tensor.dtype.is_floating_point if target.dtype.is_floating_point else tensor.dtype == target.dtype
        if not fits:
            kind = "a floating-point dtype" if target.dtype.is_floating_point else str(target.dtype)
            raise ValueError(f"update_weights: '{name}' has dtype {tensor.dtype}, the model expects {kind}")


def reference_parameters(hf_config: Any) -> Optional[dict[str, torch.Tensor]]:
    """The parameters and buffers of the Hugging Face model `hf_config` describes, as meta tensors (no memory): what
    an HF-named weight update must match. None when transformers cannot build that architecture (the update is then
    checked by the engine alone)."""
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)
    except Exception as exc:  # noqa: BLE001 - an architecture only the engine knows: no reference, say so
        logger.warning(
            "no reference parameters for %s (%s): weight updates are not checked before loading",
            type(hf_config).__name__,
            exc,
        )
        return None
    reference = dict(model.named_parameters(remove_duplicate=False))
    reference.update(model.named_buffers())
    return reference
