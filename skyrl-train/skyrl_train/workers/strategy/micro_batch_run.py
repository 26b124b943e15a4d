"""Running a worker's micro-batches through its model: the contract between the workers' loops and the strategies.

A worker describes one micro-batch's work as a `MicroBatchBody`: `body(entry, model) -> (loss, payload)` calls
`model` like a Hugging Face causal LM (once), computes what it needs from the output and returns the tensor to
backpropagate (None for forward-only work) and a payload of detached results. The strategy's
`run_micro_batches(model, entries, body, forward_only, inputs)` runs the bodies and returns their payloads in
order. FSDP2 (and Megatron without pipeline stages) call them one after another (`run_in_order`); Megatron's
pipeline stages run them inside megatron-core's schedule, on the last stage, and hand the payloads to every stage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, Optional

import torch

MicroBatchBody = Callable[[Any, Any], tuple[Optional[torch.Tensor], Any]]
"""`body(entry, model) -> (loss or None, payload)`."""

ModelInputs = Callable[[Any], dict[str, Any]]
"""`inputs(entry) -> keyword arguments`: the Hugging Face-style arguments `body` passes to the model (`input_ids`,
`attention_mask`, `position_ids` for padded rows; `input_ids`, `position_ids`, `packed_segments` for a packed
sequence), without `logits_to_keep`."""


def run_in_order(
    model: Any,
    entries: Sequence[Any],
    body: MicroBatchBody,
    forward_only: bool,
    backward: Callable[[torch.Tensor], None],
) -> list[Any]:
    """Each entry's body in turn, backpropagating its loss right after it (unless `forward_only`); the payloads."""
    payloads = []
    for entry in entries:
        loss, payload = body(entry, model)
        if not forward_only and loss is not None:
            backward(loss)
        payloads.append(payload)
    return payloads


def kept_logits(logits: torch.Tensor, logits_to_keep: int | torch.Tensor = 0) -> torch.Tensor:
    """`logits` [B, S, V] at the positions a Hugging Face causal LM keeps for `logits_to_keep`: the last n positions
    for an int n (0: all), the given positions for a 1-D tensor."""
    if isinstance(logits_to_keep, torch.Tensor):
        return logits.index_select(1, logits_to_keep.to(logits.device))
    return logits[:, -logits_to_keep:] if logits_to_keep else logits


class ReplayedOutput:
    """A stand-in for the model inside a body whose forward already ran (a pipeline's last stage): calling it returns
    the logits computed by the schedule, whatever the other arguments, at the positions of `logits_to_keep`."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits

    def __call__(self, *args: Any, logits_to_keep: int | torch.Tensor = 0, **kwargs: Any) -> SimpleNamespace:
        """The logits, as an HF model's output."""
        return SimpleNamespace(logits=kept_logits(self.logits, logits_to_keep))


def detached_to_cpu(value: Any) -> Any:
    """`value` with every tensor in it (nested in lists, tuples and dicts) detached and on the CPU, for sending."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: detached_to_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(detached_to_cpu(item) for item in value)
    return value
