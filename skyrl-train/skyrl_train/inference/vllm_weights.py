"""Name bookkeeping between Hugging Face checkpoints and vLLM's fused parameters, for weight updates and checksums.

vLLM fuses some projections into one parameter (`qkv_proj` = q, k and v; `gate_up_proj` = gate and up; the model
class lists them in `packed_modules_mapping`). Its in-place weight reload accepts checkpoint (HF) names, but a fused
module is only rebuilt correctly when all of its parameters (every part, weight and bias) arrive in the same reload
call: a byte-bounded weight sync
may split q/k/v across chunks, so `ModuleGroupBuffer` holds tensors until their vLLM module is complete. `unfuse` goes the
other way and slices fused parameters back into HF-named tensors, so an engine can report checksums under the
names the trainer sent.

Pure torch: no vLLM import, so this runs (and is tested) without vLLM installed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Optional

import torch

QWEN_PACKED_MODULES: dict[str, list[str]] = {
    "qkv_proj": ["q_proj", "k_proj", "v_proj"],
    "gate_up_proj": ["gate_proj", "up_proj"],
}
"""The fusion used by vLLM's Qwen2/Qwen3/Llama model classes (the fallback when a model does not say)."""


def _split_name(name: str) -> Optional[tuple[str, str, str]]:
    """`a.b.q_proj.weight` -> (`a.b`, `q_proj`, `weight`); None for names too short to have a module."""
    module_path, _, parameter = name.rpartition(".")
    prefix, _, module = module_path.rpartition(".")
    if not module_path or not parameter:
        return None
    return prefix, module, parameter


def _join(prefix: str, module: str, parameter: str) -> str:
    return f"{prefix}.{module}.{parameter}" if prefix else f"{module}.{parameter}"


def module_groups(
    vllm_parameter_names: Iterable[str], packed_modules_mapping: Mapping[str, Iterable[str]]
) -> dict[str, list[str]]:
    """vLLM module -> the HF names that fill it: every parameter of the module, for each part of a fused module.

    E.g. `l.self_attn.qkv_proj` -> q/k/v `weight` and `bias`; `model.norm` -> `model.norm.weight`.
    """
    parts_of = {fused: list(parts) for fused, parts in packed_modules_mapping.items()}
    groups: dict[str, list[str]] = {}
    for name in vllm_parameter_names:
        split = _split_name(name)
        if split is None:
            continue
        prefix, module, parameter = split
        names = [_join(prefix, part, parameter) for part in parts_of.get(module, [module])]
        groups.setdefault(f"{prefix}.{module}" if prefix else module, []).extend(names)
    return groups


class ModuleGroupBuffer:
    """Holds HF-named tensors until every parameter of their vLLM module has arrived, then releases them together.

    vLLM's in-place reload rebuilds a module from the tensors of one reload call; a parameter the call lacks is
    taken from what the module holds, which for weights repacked into kernel layouts (linear weights on CPU) is not
    checkpoint format. So a module's parameters (all parts of a fused one: q/k/v weight and bias) must arrive in one
    call, and a byte-bounded weight sync may split them across chunks. `add(named_tensors)` returns what can be
    loaded now: complete modules, and names that belong to no known module (e.g. a tied `lm_head.weight`). Held
    tensors are cloned, since weight-sync receivers reuse their transfer buffers. `missing()` names what a
    half-finished update still lacks.
    """

    def __init__(self, groups: Mapping[str, Iterable[str]]) -> None:
        self.groups = {module: tuple(names) for module, names in groups.items()}
        self.module_of = {name: module for module, names in self.groups.items() for name in names}
        self._held: dict[str, dict[str, torch.Tensor]] = {}

    def add(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
        """Take new tensors; return those ready to load, complete modules in their parameters' order."""
        ready: list[tuple[str, torch.Tensor]] = []
        for name, tensor in named_tensors:
            module = self.module_of.get(name)
            if module is None:
                ready.append((name, tensor))
                continue
            held = self._held.setdefault(module, {})
            held[name] = tensor.detach().clone()
            if len(held) == len(self.groups[module]):
                ready.extend((n, held[n]) for n in self.groups[module])
                del self._held[module]
        return ready

    def missing(self) -> list[str]:
        """HF names still needed to complete the modules held so far (sorted)."""
        return sorted(n for module, held in self._held.items() for n in self.groups[module] if n not in held)

    def clear(self) -> None:
        """Drop every held tensor."""
        self._held.clear()


def fused_split_sizes(config: Any) -> dict[str, list[int]]:
    """Rows (dim 0) each part takes in a fused parameter, from an HF config: q/k/v and gate/up."""
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    intermediate = int(config.intermediate_size)
    return {
        "qkv_proj": [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim],
        "gate_up_proj": [intermediate] * 2,
    }


def unfuse(
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    packed_modules_mapping: Mapping[str, Iterable[str]],
    split_sizes: Mapping[str, list[int]],
) -> dict[str, torch.Tensor]:
    """HF-named views of vLLM parameters: fused ones sliced along dim 0 into their parts, others unchanged.

    Empty tensors are left out: vLLM's CPU backend repacks linear weights into kernel layouts and leaves the
    parameter empty, so those weights cannot be read back (their biases and every other parameter can).
    """
    parts_of = {fused: list(parts) for fused, parts in packed_modules_mapping.items()}
    result: dict[str, torch.Tensor] = {}
    for name, tensor in named_tensors:
        if tensor.numel() == 0:
            continue
        split = _split_name(name)
        if split is None or split[1] not in parts_of:
            result[name] = tensor
            continue
        prefix, fused, parameter = split
        sizes = split_sizes.get(fused)
        if sizes is None or sum(sizes) != tensor.shape[0]:
            raise ValueError(
                f"unfuse: '{name}' has {tensor.shape[0]} rows, expected parts of sizes {sizes} for {parts_of[fused]}"
            )
        for part, piece in zip(parts_of[fused], torch.split(tensor, sizes, dim=0)):
            result[_join(prefix, part, parameter)] = piece
    return result


VOCAB_ROW_PARAMETERS = ("embed_tokens.weight", "lm_head.weight")
"""HF parameter names (suffixes) with one row per vocabulary entry, which vLLM pads."""


def unpad_vocab_rows(served: dict[str, torch.Tensor], vocab_size: int) -> dict[str, torch.Tensor]:
    """`served` with the embedding and LM-head rows beyond `vocab_size` cut off: vLLM pads those to a multiple of 64
    rows (`vocab_parallel_embedding.pad_vocab_size`), which the trainer's tensors do not have."""
    return {
        name: tensor[:vocab_size] if name.endswith(VOCAB_ROW_PARAMETERS) and tensor.shape[0] > vocab_size else tensor
        for name, tensor in served.items()
    }
