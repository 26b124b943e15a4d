"""Pipeline stages of a Megatron state dict: which decoder layers each stage builds, and a stage's part of the
weights (and back).

Pure torch, like `megatron_convert`. megatron-core's `GPTModel` on one pipeline stage names its decoder layers by
their index within the stage (`decoder.layers.0` is the stage's first layer); the embedding lives on the first stage,
the final norm and the output layer on the last. With tied embeddings and more than one stage, the last stage holds
its own copy of the embedding as `output_layer.weight` (megatron-core keeps the two equal by summing their gradients
over its embedding group).
"""

from __future__ import annotations

import re
from typing import Optional

import torch

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
EMBEDDING = "embedding.word_embeddings.weight"
OUTPUT = "output_layer.weight"


def pipeline_stage_layers(
    num_layers: int, stages: int, first: Optional[int] = None, last: Optional[int] = None
) -> list[range]:
    """The decoder layers each of `stages` pipeline stages builds, as megatron-core assigns them: `first` / `last`
    layers on the first / last stage when given (uneven stages), the rest split evenly over the other stages.
    ValueError naming the key when the layers do not split that way."""
    keys = "trainer.<role>.megatron.num_layers_in_{first,last}_pipeline_stage"
    if stages < 1:
        raise ValueError(f"trainer.<role>.megatron.pipeline_model_parallel_size must be at least 1, got {stages}")
    if stages == 1:
        if first is not None or last is not None:
            raise ValueError(f"{keys} need pipeline_model_parallel_size > 1")
        return [range(num_layers)]
    for name, value in (("first", first), ("last", last)):
        if value is not None and value < 1:
            raise ValueError(f"trainer.<role>.megatron.num_layers_in_{name}_pipeline_stage must be at least 1")
    middle_stages = stages - (first is not None) - (last is not None)
    middle_layers = num_layers - (first or 0) - (last or 0)
    if middle_stages == 0:
        if middle_layers != 0:
            raise ValueError(
                f"{keys} = {first} + {last} layers, but the model has {num_layers} and there is no middle stage"
            )
        per_stage = 0
    elif middle_layers < middle_stages or middle_layers % middle_stages:
        raise ValueError(
            f"the model's {num_layers} decoder layers do not split into {stages} pipeline stages: "
            f"{middle_layers} layers left for {middle_stages} stage(s) after {keys} ({first}, {last}) must be a "
            "positive multiple of them (trainer.<role>.megatron.pipeline_model_parallel_size)"
        )
    else:
        per_stage = middle_layers // middle_stages
    counts = [per_stage] * stages
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    ranges, start = [], 0
    for count in counts:
        ranges.append(range(start, start + count))
        start += count
    return ranges


def stage_state(
    mc_state: dict[str, torch.Tensor], layers: range, first_stage: bool, last_stage: bool, tied_embeddings: bool
) -> dict[str, torch.Tensor]:
    """One pipeline stage's part of a full Megatron state dict: its decoder layers renumbered from 0, the embedding
    on the first stage, the final norm and output layer on the last (a copy of the embedding when tied and the
    stage is not also the first)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in mc_state.items():
        match = _LAYER.match(name)
        if match is not None:
            index = int(match.group(1))
            if index in layers:
                out[f"decoder.layers.{index - layers.start}.{match.group(2)}"] = tensor
        elif name.startswith("embedding."):
            if first_stage:
                out[name] = tensor
        elif last_stage:
            out[name] = tensor
    if tied_embeddings and last_stage and not first_stage:
        out[OUTPUT] = mc_state[EMBEDDING]
    return out


def merge_stage_states(
    stages: list[tuple[dict[str, torch.Tensor], range]], tied_embeddings: bool
) -> dict[str, torch.Tensor]:
    """The full Megatron state dict from every stage's `(state, layers)` in stage order (inverse of `stage_state`).
    A tied model's last-stage copy of the embedding is dropped: the first stage's embedding is the weight."""
    out: dict[str, torch.Tensor] = {}
    last = len(stages) - 1
    for number, (state, layers) in enumerate(stages):
        for name, tensor in state.items():
            match = _LAYER.match(name)
            if match is not None:
                out[f"decoder.layers.{int(match.group(1)) + layers.start}.{match.group(2)}"] = tensor
            elif name == OUTPUT and tied_embeddings and number == last and last > 0:
                continue
            else:
                out[name] = tensor
    return out
