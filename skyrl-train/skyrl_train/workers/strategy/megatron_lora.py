"""LoRA adapters on megatron-core's `GPTModel`: the Megatron strategy's policy under `model.lora.rank > 0`.

The workers wrap the Hugging Face model with peft before a strategy sees it (`models.lora.apply_lora`), so the
adapters start from peft's own initial values (same seed, same numbers as on the fsdp2 workers), and peft has already
decided which projections get one (`target_modules`, `exclude_modules`). `attach_adapters` moves each of those adapters
onto the Megatron layer that computes its projection, as this rank's share of it:

- column-parallel layers (`linear_qkv` holds q/k/v, `linear_fc1` holds [gate; up]): each projection keeps its own
  adapter, as peft and vLLM name them. A [r, in] is whole on every tensor-parallel rank; B [out, r] is split by output
  rows as the weight is. The rank's output rows go into the fused layout (per query group [q | k | v]; [gate; up]).
  Each rank's B rows give only part of the gradient of `A x`, so `A x` passes megatron's
  `copy_to_tensor_model_parallel_region` (identity forward, sum over the ranks backward).
  Under sequence parallelism the layer's input is this rank's share of the tokens: `A x` is gathered over the
  ranks instead (`gather_from_sequence_parallel_region`, whose backward also sums).
- row-parallel layers (`linear_proj` = o_proj, `linear_fc2` = down_proj): A is split by input columns as the weight is,
  and B is whole; the ranks' partial `A x` are summed (`reduce_from_tensor_model_parallel_region`), or under sequence
  parallelism summed and split by tokens (`reduce_scatter_to_sequence_parallel_region`).

An adapter runs as a forward hook of its base layer and lives beside it (`<layer>_lora`), so every base parameter
keeps its name (conversion, weight sync and checkpoints of the base are unchanged) and the adapter's own
`sharded_state_dict` tells `dist_checkpointing` which of its tensors are split. Split tensors carry megatron's
tensor-parallel attributes, so the gradient norm counts a whole tensor once. Mixture-of-experts layers (the experts,
the router) get no adapters here: `attach_adapters` refuses a peft model that has one there, naming it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist
from torch.nn.functional import linear

from skyrl_train.models.lora_state import PEFT_PREFIX, parse_adapter_name

ADAPTER_SUFFIX = "_lora"
"""Suffix of the module holding a layer's adapters, beside the layer (`linear_qkv_lora`)."""

_PROJECTION = re.compile(
    r"^model\.layers\.(?P<layer>\d+)\.(?P<block>self_attn|mlp)\.(?P<proj>[qkvo]_proj|gate_proj|up_proj|down_proj)$"
)

_LAYERS = {
    # HF projection -> (megatron block, layer, parallel kind, fused layout, the layout's parts in order)
    "q_proj": ("self_attention", "linear_qkv", "column", ("q_proj", "k_proj", "v_proj")),
    "k_proj": ("self_attention", "linear_qkv", "column", ("q_proj", "k_proj", "v_proj")),
    "v_proj": ("self_attention", "linear_qkv", "column", ("q_proj", "k_proj", "v_proj")),
    "o_proj": ("self_attention", "linear_proj", "row", ("o_proj",)),
    "gate_proj": ("mlp", "linear_fc1", "column", ("gate_proj", "up_proj")),
    "up_proj": ("mlp", "linear_fc1", "column", ("gate_proj", "up_proj")),
    "down_proj": ("mlp", "linear_fc2", "row", ("down_proj",)),
}


def is_adapter_parameter(name: str) -> bool:
    """True for the name of an adapter tensor of a Megatron model (`...linear_qkv_lora.q_proj.lora_A`)."""
    return f"{ADAPTER_SUFFIX}." in name


@dataclass(frozen=True)
class QueryGroups:
    """This rank's share of the attention heads: `groups` key/value groups of `per_group` query heads of `head_dim`."""

    groups: int
    per_group: int
    head_dim: int


class LoRAProjection(torch.nn.Module):
    """One projection's adapter on this rank: `lora_A` [r, in] and `lora_B` [out, r] (either may be this rank's
    share); `module` is the Hugging Face module it adapts (`model.layers.0.self_attn.q_proj`), `adapter` peft's name
    of the adapter (`default`)."""

    def __init__(self, lora_a: torch.Tensor, lora_b: torch.Tensor, module: str, adapter: str) -> None:
        super().__init__()
        self.lora_A = torch.nn.Parameter(lora_a)
        self.lora_B = torch.nn.Parameter(lora_b)
        self.module = module
        self.adapter = adapter

    def peft_name(self, part: str) -> str:
        """The peft parameter name of `lora_A` (`part="A"`) or `lora_B`."""
        return f"{PEFT_PREFIX}{self.module}.lora_{part}.{self.adapter}.weight"


class LoRABranch(torch.nn.Module):
    """The adapters of one Megatron linear layer, added to its output by a forward hook (`hook`): `parallel` is the
    layer's kind (`column` or `row`), `parts` the projections of its fused output in order (absent ones add
    nothing), `scaling` peft's `alpha / r`. `enabled` false switches the adapters off (the reference policy of a LoRA
    run is the base model)."""

    def __init__(
        self,
        parallel: str,
        parts: tuple[str, ...],
        projections: Mapping[str, LoRAProjection],
        scaling: float,
        query_groups: Optional[QueryGroups] = None,
        sequence_parallel: bool = False,
    ) -> None:
        super().__init__()
        self.parallel = parallel
        self.parts = parts
        self.projections = torch.nn.ModuleDict(dict(projections))
        self.scaling = scaling
        self.query_groups = query_groups
        self.sequence_parallel = sequence_parallel
        self.enabled = True
        for projection in self.projections.values():
            split, whole = (
                (projection.lora_B, projection.lora_A)
                if parallel == "column"
                else (projection.lora_A, projection.lora_B)
            )
            _mark_tensor_parallel(split, dim=0 if parallel == "column" else 1)
            # under sequence parallelism each rank sees its share of the tokens at the whole tensor, whose gradient is
            # then partial: `finalize_model_grads` sums what carries this mark over the tensor-parallel ranks
            whole.sequence_parallel = sequence_parallel

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """The adapters' addition to the layer's output for its input `hidden` (this rank's share of the output of
        a column-parallel layer, the whole output of a row-parallel one; under sequence parallelism a column-parallel
        layer's input and a row-parallel layer's output cover this rank's share of the tokens)."""
        from megatron.core.tensor_parallel import mappings

        if self.parallel == "row":
            (projection,) = self.projections.values()
            partial = linear(hidden, projection.lora_A)
            if self.sequence_parallel:  # the layer's output is this rank's share of the tokens
                low = mappings.reduce_scatter_to_sequence_parallel_region(partial)
            else:
                low = mappings.reduce_from_tensor_model_parallel_region(partial)
            return linear(low, projection.lora_B) * self.scaling
        names = list(self.projections)
        low = linear(hidden, torch.cat([self.projections[name].lora_A for name in names]))
        if self.sequence_parallel:  # the input is this rank's share of the tokens, the layer's output all of them
            low = mappings.gather_from_sequence_parallel_region(low)
        else:
            low = mappings.copy_to_tensor_model_parallel_region(low)
        shares = low.chunk(len(names), dim=-1)
        outputs = {name: linear(share, self.projections[name].lora_B) for name, share in zip(names, shares)}
        return self._fuse(outputs, low) * self.scaling

    def _fuse(self, outputs: dict[str, torch.Tensor], low: torch.Tensor) -> torch.Tensor:
        widths = self._part_widths()
        lead = low.shape[:-1]  # the tokens of the layer's output
        pieces = [outputs[name] if name in outputs else low.new_zeros(*lead, widths[name]) for name in self.parts]
        if self.query_groups is None:  # [gate; up]
            return torch.cat(pieces, dim=-1)
        groups = self.query_groups.groups
        grouped = [piece.reshape(*lead, groups, piece.shape[-1] // groups) for piece in pieces]
        return torch.cat(grouped, dim=-1).reshape(*lead, -1)

    def _part_widths(self) -> dict[str, int]:
        known = {name: projection.lora_B.shape[0] for name, projection in self.projections.items()}
        if self.query_groups is not None:
            q = self.query_groups
            return {
                "q_proj": q.groups * q.per_group * q.head_dim,
                "k_proj": q.groups * q.head_dim,
                "v_proj": q.groups * q.head_dim,
            }
        width = next(iter(known.values()))  # gate and up have the same width
        return {name: known.get(name, width) for name in self.parts}

    def hook(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Any:
        """Forward hook of the base layer (`with_kwargs=True`): add the adapters to its `(output, bias)`."""
        if not self.enabled:
            return output
        result, bias = output
        hidden = args[0] if args else kwargs["input_"]
        return result + self(hidden).to(result.dtype), bias

    def sharded_state_dict(
        self, prefix: str = "", sharded_offsets: tuple = (), metadata: Optional[dict] = None
    ) -> dict[str, Any]:
        """megatron-core's checkpoint view of the adapters: the split tensors (`lora_B` of a column-parallel layer,
        `lora_A` of a row-parallel one) sharded over the tensor-parallel ranks, the others replicated."""
        from megatron.core.transformer.utils import make_sharded_tensors_for_checkpoint

        split, axis = ("lora_B", 0) if self.parallel == "column" else ("lora_A", 1)
        axes = {f"projections.{name}.{split}": axis for name in self.projections}
        return make_sharded_tensors_for_checkpoint(
            self.state_dict(prefix="", keep_vars=True), prefix, axes, sharded_offsets
        )


def _mark_tensor_parallel(param: torch.Tensor, dim: int) -> None:
    from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

    set_tensor_model_parallel_attributes(param, is_parallel=True, dim=dim, stride=1)


@dataclass(frozen=True)
class AdapterLayout:
    """Where the adapters go: the model's attention shape, the tensor-parallel size and rank, and the decoder layers
    this pipeline stage holds."""

    num_attention_heads: int
    num_query_groups: int
    head_dim: int
    tensor_parallel_size: int
    tensor_parallel_rank: int
    stage_layers: range
    sequence_parallel: bool = False


def _local_share(tensor: torch.Tensor, dim: int, layout: AdapterLayout) -> torch.Tensor:
    return torch.chunk(tensor, layout.tensor_parallel_size, dim=dim)[layout.tensor_parallel_rank].clone()


def check_adapted_modules(modules: Iterable[str]) -> None:
    """Raise ValueError naming the first module peft adapted (its name in the Hugging Face model) that has no Megatron
    counterpart here: mixture-of-experts layers (experts, router, shared expert), `lm_head`, anything but the
    attention and dense MLP projections."""
    for module in sorted(modules):
        match = _PROJECTION.match(module)
        if match is None or (match["proj"] in ("gate_proj", "up_proj", "down_proj")) != (match["block"] == "mlp"):
            raise ValueError(
                f"LoRA adapters on mixture-of-experts layers (experts, router) or lm_head are not supported here on the"
                f" Megatron workers, which adapt the attention and dense MLP projections; peft put an adapter on"
                f" {module!r}: narrow trainer.policy.model.lora.target_modules (e.g. [q_proj, k_proj, v_proj, o_proj])"
                " or use trainer.strategy=fsdp2"
            )


def attach_adapters(
    gpt: torch.nn.Module,
    adapters: Mapping[str, torch.Tensor],
    alpha: float,
    layout: AdapterLayout,
    dtype: torch.dtype,
) -> list[LoRABranch]:
    """Put peft's `adapters` (its `lora_A` / `lora_B` tensors by peft name, whole) onto `gpt` as this rank's shares
    (see the module docstring), freeze every base parameter, and return the branches. Raises ValueError naming the
    first adapted module that has no Megatron counterpart here (mixture-of-experts layers, `lm_head`, ...)."""
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    adapter_names: dict[str, str] = {}
    for name, tensor in adapters.items():
        parsed = parse_adapter_name(name)
        if parsed is None:
            raise ValueError(f"{name!r} is not a LoRA adapter tensor")
        pairs.setdefault(parsed.module, {})[parsed.part] = tensor
        adapter_names[parsed.module] = parsed.adapter
    by_layer: dict[tuple[int, str], dict[str, LoRAProjection]] = {}
    check_adapted_modules(pairs)
    for module, pair in sorted(pairs.items()):
        match = _PROJECTION.match(module)
        proj = match["proj"]
        layer = int(match["layer"])
        if layer not in layout.stage_layers:
            continue
        block, linear, parallel, _ = _LAYERS[proj]
        # copies: the Megatron adapters train, the peft model's tensors stay as they were
        lora_a, lora_b = (pair[part].detach().to(dtype=dtype, copy=True) for part in ("A", "B"))
        if parallel == "column":
            lora_b = _local_share(lora_b, 0, layout)
        else:
            lora_a = _local_share(lora_a, 1, layout)
        by_layer.setdefault((layer, linear), {})[proj] = LoRAProjection(
            lora_a.contiguous(), lora_b.contiguous(), module, adapter_names[module]
        )
    for param in gpt.parameters():
        param.requires_grad_(False)
    if getattr(gpt, "embedding", None) is not None:
        # the frozen embedding's output needs no gradient, so a recomputed (checkpointed) layer would get no input that
        # does and would leave the adapters inside it without one
        gpt.embedding.register_forward_hook(_embeddings_need_grad)
    rank = next(iter(pairs.values()))["A"].shape[0] if pairs else 1
    branches = []
    tp = layout.tensor_parallel_size
    groups = QueryGroups(
        layout.num_query_groups // tp, layout.num_attention_heads // layout.num_query_groups, layout.head_dim
    )
    for (layer, linear), projections in sorted(by_layer.items()):
        proj = next(iter(projections))
        block, _, parallel, parts = _LAYERS[proj]
        owner = getattr(gpt.decoder.layers[layer - layout.stage_layers.start], block)
        ordered = {name: projections[name] for name in parts if name in projections}
        branch = LoRABranch(
            parallel,
            parts,
            ordered,
            float(alpha) / rank,
            groups if linear == "linear_qkv" else None,
            layout.sequence_parallel,
        )
        setattr(owner, linear + ADAPTER_SUFFIX, branch)
        getattr(owner, linear).register_forward_hook(branch.hook, with_kwargs=True)
        branches.append(branch)
    return branches


def _embeddings_need_grad(module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled() and not output.requires_grad:
        output.requires_grad_(True)
    return output


@contextlib.contextmanager
def adapters_disabled(branches: list[LoRABranch]) -> Iterator[None]:
    """Within the block the model runs without its adapters (the base model)."""
    if not branches:
        raise RuntimeError("disable_adapter: this Megatron model has no LoRA adapters (lora.rank=0)")
    for branch in branches:
        branch.enabled = False
    try:
        yield
    finally:
        for branch in branches:
            branch.enabled = True


def gather_adapters(
    branches: list[LoRABranch], tp_group: Any, pipeline_group: Any = None, pipeline_first_rank: int = 0
) -> dict[str, torch.Tensor]:
    """Every adapter tensor, whole, by peft name, on CPU in float32, on global rank 0 ({} elsewhere; every rank of
    the model's groups must call this): each tensor-parallel share is gathered, then each pipeline stage's adapters
    are collected on the first stage."""
    local: dict[str, torch.Tensor] = {}
    tp = dist.get_world_size(tp_group)
    for branch in branches:
        for projection in branch.projections.values():
            for part, tensor, split in (
                ("A", projection.lora_A, branch.parallel == "row"),
                ("B", projection.lora_B, branch.parallel == "column"),
            ):
                tensor = tensor.detach().float().contiguous()
                if split and tp > 1:
                    shares = [torch.empty_like(tensor) for _ in range(tp)]
                    dist.all_gather(shares, tensor, group=tp_group)
                    tensor = torch.cat(shares, dim=0 if part == "B" else 1)
                local[projection.peft_name(part)] = tensor.cpu()
    if pipeline_group is not None and dist.get_world_size(pipeline_group) > 1:
        stages: Optional[list[Any]] = (
            [None] * dist.get_world_size(pipeline_group) if dist.get_rank() == pipeline_first_rank else None
        )
        dist.gather_object(local, stages, dst=pipeline_first_rank, group=pipeline_group)
        if stages is not None:
            local = {name: tensor for stage in stages for name, tensor in stage.items()}
    return local if dist.get_rank() == 0 else {}
