"""LoRA adapter tensors by name, without peft: recognise PEFT parameter names, map them to the base model's names, and
fold adapters into base weights (`W + alpha / r * B @ A`).

The trainer's policy is a `peft` model, so its adapter parameters are named like
`base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight` and the frozen weight they adapt like
`base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight`. Weight sync sends only the adapter tensors;
an engine that serves plain weights (the `hf` engine) merges them into its copy of the base weights with
`AdapterMerger`, and the merged Hugging Face export uses `merge_peft_state`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

PEFT_PREFIX = "base_model.model."
"""Prefix peft puts before every parameter name of the wrapped model."""

_ADAPTER_NAME = re.compile(r"^(?P<module>.+)\.lora_(?P<part>[AB])(?:\.(?P<adapter>[^.]+))?\.weight$")


@dataclass(frozen=True)
class AdapterTensorName:
    """The parts of one adapter parameter name: the adapted module (base model naming), `A` or `B`, adapter name."""

    module: str
    part: str
    adapter: str


def parse_adapter_name(name: str) -> AdapterTensorName | None:
    """`...q_proj.lora_A.default.weight` -> (`model.layers.0.self_attn.q_proj`, `A`, `default`); None for any name
    that is not a LoRA A/B matrix."""
    match = _ADAPTER_NAME.match(name)
    if match is None:
        return None
    return AdapterTensorName(match["module"].removeprefix(PEFT_PREFIX), match["part"], match["adapter"] or "default")


def is_adapter_name(name: str) -> bool:
    """True for the name of a LoRA A or B matrix."""
    return parse_adapter_name(name) is not None


def base_model_name(peft_name: str) -> str:
    """The base model's name of a non-adapter parameter of a peft model: `base_model.model.x.q_proj.base_layer.weight`
    -> `x.q_proj.weight`."""
    return peft_name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")


def unnamed_adapter_key(name: str) -> str:
    """The key peft's saved adapter files use: the adapter's own name dropped (`lora_A.default.weight` ->
    `lora_A.weight`), the `base_model.model.` prefix kept (the form vLLM's LoRA loader reads)."""
    parsed = parse_adapter_name(name)
    if parsed is None:
        raise ValueError(f"{name!r} is not a LoRA adapter parameter name (expected '<module>.lora_A|B.<name>.weight')")
    return f"{PEFT_PREFIX}{parsed.module}.lora_{parsed.part}.weight"


def lora_delta(lora_a: torch.Tensor, lora_b: torch.Tensor, alpha: float) -> torch.Tensor:
    """The weight update an adapter adds, `alpha / r * B @ A` in float32 (r = rows of A)."""
    if lora_a.dim() != 2 or lora_b.dim() != 2 or lora_b.shape[1] != lora_a.shape[0]:
        raise ValueError(f"LoRA shapes do not pair up: A {tuple(lora_a.shape)}, B {tuple(lora_b.shape)}")
    rank = lora_a.shape[0]
    return (lora_b.float() @ lora_a.float()) * (float(alpha) / rank)


def merge_peft_state(state: Mapping[str, torch.Tensor], alpha: float) -> dict[str, torch.Tensor]:
    """A full peft state dict (base layers and adapters) as the base model's state dict with every adapter folded in."""
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    merged: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        parsed = parse_adapter_name(name)
        if parsed is None:
            merged[base_model_name(name)] = tensor
        else:
            pairs.setdefault(parsed.module, {})[parsed.part] = tensor
    for module, pair in pairs.items():
        if set(pair) != {"A", "B"}:
            raise ValueError(f"adapter of {module} lacks its lora_{'B' if 'A' in pair else 'A'} matrix")
        weight_name = f"{module}.weight"
        if weight_name not in merged:
            raise ValueError(f"adapter of {module} has no base weight {weight_name} to merge into")
        base = merged[weight_name]
        merged[weight_name] = (base.float() + lora_delta(pair["A"], pair["B"], alpha)).to(base.dtype)
    return merged


class AdapterMerger:
    """Keeps an engine's base weights and folds each received adapter into them.

    `add(named_tensors)` splits adapter tensors from the rest and returns `(plain, merged)`: the non-adapter tensors
    unchanged, and `(weight name, base + delta)` for every module whose A and B have both arrived (A and B may come in
    different chunks of one sync). `received` holds the latest adapter tensors by name (for checksums).
    """

    def __init__(self, alpha: float) -> None:
        self.alpha = float(alpha)
        self.base: dict[str, torch.Tensor] = {}
        self.received: dict[str, torch.Tensor] = {}
        self._pending: dict[str, dict[str, torch.Tensor]] = {}

    def add(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], weights: Mapping[str, torch.Tensor]
    ) -> tuple[list[tuple[str, torch.Tensor]], list[tuple[str, torch.Tensor]]]:
        """Take one batch of received tensors; `weights` are the engine's current parameters by base-model name."""
        plain: list[tuple[str, torch.Tensor]] = []
        merged: list[tuple[str, torch.Tensor]] = []
        for name, tensor in named_tensors:
            parsed = parse_adapter_name(name)
            if parsed is None:  # a full weight replaces the base an adapter was merged into
                self.base.pop(name, None)
                plain.append((name, tensor))
                continue
            weight_name = f"{parsed.module}.weight"
            if weight_name not in weights:
                raise ValueError(f"adapter tensor {name!r} adapts {weight_name!r}, which the engine's model lacks")
            self.received[name] = tensor.detach().clone()
            pair = self._pending.setdefault(parsed.module, {})
            pair[parsed.part] = tensor
            if len(pair) == 2:
                del self._pending[parsed.module]
                target = weights[weight_name]
                if weight_name not in self.base:
                    self.base[weight_name] = target.detach().clone()
                base = self.base[weight_name]
                delta = lora_delta(pair["A"].to(base.device), pair["B"].to(base.device), self.alpha)
                merged.append((weight_name, (base.float() + delta).to(base.dtype)))
        return plain, merged

    @property
    def incomplete(self) -> list[str]:
        """Modules whose A or B is still missing."""
        return sorted(self._pending)
