"""Micro-batches through megatron-core's pipeline schedule (`trainer.<role>.megatron.pipeline_model_parallel_size`
> 1): the worker's per-micro-batch bodies run on the last stage, inside the schedule's loss function.

Every stage of a pipeline holds the same rows (they are one model-parallel group) and walks the same micro-batches.
The schedule (1F1B, `get_forward_backward_func`) calls `forward_step` on each stage: the first stage embeds the
tokens, the others receive the previous stage's activations, and the last one produces the logits. There the
body runs with a `ReplayedOutput` in place of the model, so the workers' log-prob and loss code is the one of every
other strategy; the schedule backpropagates the returned loss through every stage. The bodies' payloads are then
sent from the last stage to the others, so every rank of the pipeline returns the same results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from skyrl_train.workers.strategy.megatron_model import megatron_call_arguments
from skyrl_train.workers.strategy.micro_batch_run import (
    MicroBatchBody,
    ModelInputs,
    ReplayedOutput,
    detached_to_cpu,
)


def run_pipelined(
    module: torch.nn.Module,
    vocab_size: int,
    entries: Sequence[Any],
    body: MicroBatchBody,
    forward_only: bool,
    inputs: ModelInputs,
    sequence_multiple: int = 1,
) -> list[Any]:
    """Run `entries` through the pipeline of `module` (this rank's stage, DDP-wrapped or not); the bodies' payloads
    in entry order, on every stage. Each call is padded to a multiple of `sequence_multiple` tokens
    (`megatron_call_arguments`)."""
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func

    entries = list(entries)
    if not entries:
        return []
    count = len(entries)
    payloads: list[Any] = []

    hf_arguments = [inputs(entry) for entry in entries]
    widths = [arguments["input_ids"].shape[1] for arguments in hf_arguments]
    arguments = [megatron_call_arguments(**call, sequence_multiple=sequence_multiple) for call in hf_arguments]

    def forward_step(data_iterator: Any, model: torch.nn.Module) -> tuple[torch.Tensor, Any]:
        entry, width, call_arguments = next(data_iterator)
        output = model(**call_arguments)

        def loss_func(logits: torch.Tensor) -> tuple[torch.Tensor, dict]:
            loss, payload = body(entry, ReplayedOutput(logits[:, :width, :vocab_size]))
            payloads.append(detached_to_cpu(payload))
            if loss is None:
                loss = logits.new_zeros(())
            # the schedule divides each micro-batch's loss by their count; a body's loss is already weighted
            return loss * count, {}

        return output, loss_func

    shapes = [call["input_ids"].shape for call in arguments]
    schedule = get_forward_backward_func()  # 1F1B: forward_backward_pipelining_without_interleaving
    schedule(
        forward_step_func=forward_step,
        data_iterator=iter(zip(entries, widths, arguments)),
        model=[module],
        num_microbatches=count,
        seq_length=max(shape[1] for shape in shapes),
        micro_batch_size=max(shape[0] for shape in shapes),
        forward_only=forward_only,
    )
    holder = [payloads if parallel_state.is_pipeline_last_stage() else None]
    dist.broadcast_object_list(
        holder,
        src=parallel_state.get_pipeline_model_parallel_last_rank(),
        group=parallel_state.get_pipeline_model_parallel_group(),
    )
    return holder[0]
