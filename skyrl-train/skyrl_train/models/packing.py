"""Sequence packing: a micro-batch's rows laid end to end in one sequence without padding, and the results put back.

A micro-batch row is `[pad.. prompt | response ..pad]` (see `TrainingBatch`). Packed, its real tokens follow the
previous row's in one sequence of T tokens; position ids restart at 0 for every row (they are the row's own), and the
attention segments (`models.varlen_attention`) keep every row's attention inside the row. Only the tokens that
predict something are kept: a row's prompt and its response but the last token (which predicts no response token).

With `share_prompts`, rows that repeat a prompt (the samples of a GRPO group) share one copy of it: the first row's
response follows the prompt in one segment, and every other row's response is a segment whose keys are the prompt's
span followed by its own, so each row still sees exactly its prompt and its own earlier tokens.

The outputs the losses need (log-probs, entropies, values of response token j, predicted at the position before it)
are read at `predict_positions` only and scattered back to the padded [rows, response columns] layout, with 0 in the
padding: log-probs, entropies and values equal the padded forward's up to float summation order.

With `bucket_length`, the packed sequence ends with a segment of filler tokens (attending only to each other, read
by nothing) that rounds its length up to one of 32 lengths per doubling (`bucketed_length`): at most 1/32 more tokens.
On CPU in bfloat16 oneDNN builds and keeps kernels for every new size, and the heap freed around them is not returned:
a policy rank of the long benchmark grew from 1.2 to 2.7 GB in 80 steps. Rounded lengths repeat, which cut that
growth by 18 % in a run and by 44 % in `benchmarks/bf16_cpu_memory.py`, at the same speed (docs/performance.md).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from skyrl_train.algorithms.entropy import entropy_from_logits
from skyrl_train.models.varlen_attention import PACKED_ATTENTION, VarlenSegments, varlen_kernel


@dataclass(eq=False, slots=True)
class PackedRows:
    """A micro-batch packed into one sequence, with the maps that put per-token results back in the row layout."""

    input_ids: torch.Tensor
    """[1, T] token ids of the packed sequence."""
    position_ids: torch.Tensor
    """[1, T] each token's position within its own row."""
    segments: VarlenSegments
    """Which keys each query attends to."""
    predict_positions: torch.Tensor
    """[N] packed position whose output predicts each response token that is read back."""
    target_ids: torch.Tensor
    """[N] the response token predicted there."""
    target_slots: torch.Tensor
    """[N] where it goes in the row layout: `row * response_width + column`."""
    rows: int
    response_width: int
    shared_prompt_rows: int
    """Rows whose prompt was not packed again because an earlier row of the micro-batch has the same one."""
    head_positions: Optional[torch.Tensor] = None
    """With `bucket_length`: `predict_positions` followed by copies of its last entry up to a bucketed count, the
    positions the LM head runs at (its matmul then also sees repeating sizes); None: `predict_positions`."""

    @property
    def num_tokens(self) -> int:
        """T: tokens the model runs on."""
        return int(self.input_ids.shape[1])

    def scatter(self, values: torch.Tensor) -> torch.Tensor:
        """Per-target values [N] -> [rows, response_width], 0 where nothing was predicted (differentiable)."""
        out = values.new_zeros(self.rows * self.response_width)
        return out.index_put((self.target_slots,), values).view(self.rows, self.response_width)

    def model_inputs(self) -> dict[str, Any]:
        """Keyword arguments of the packed forward of a Hugging Face model switched to packed attention."""
        return {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "packed_segments": self.segments,
            "use_cache": False,
        }


def prompt_groups(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_width: int) -> np.ndarray:
    """Group index of each row of a `[pad.. prompt | response ..pad]` batch; rows whose prompt columns agree
    (tokens and padding) share one."""
    columns = slice(0, prompt_width)
    keys = torch.cat([input_ids[:, columns] * attention_mask[:, columns], attention_mask[:, columns]], dim=1)
    _, inverse = torch.unique(keys.cpu(), dim=0, return_inverse=True)
    return inverse.numpy()


LENGTH_BUCKETS_PER_DOUBLING = 32
"""`bucketed_length` rounds a packed length up to one of this many evenly spaced lengths between each power of two."""


def bucketed_length(tokens: int) -> int:
    """`tokens` rounded up to a multiple of `2 ** (bit_length - 6)`: one of `LENGTH_BUCKETS_PER_DOUBLING` lengths
    in `[2**k, 2**(k+1))`, at most 1/32 above `tokens` (lengths below 64 stay as they are)."""
    if tokens < 0:
        raise ValueError(f"bucketed_length: tokens must be >= 0, got {tokens}")
    step = 1 << max(0, tokens.bit_length() - LENGTH_BUCKETS_PER_DOUBLING.bit_length())
    return -(-tokens // step) * step


def pack_rows(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    prompt_width: int,
    share_prompts: bool = False,
    bucket_length: bool = False,
) -> PackedRows:
    """Pack the rows of a `[pad.. prompt | response ..pad]` micro-batch (tensors [B, W], prompts ending at column
    `prompt_width`) into one sequence on the tensors' device; see the module docstring. `bucket_length` appends
    filler tokens up to `bucketed_length` of the packed length.

    Every row is read back at `max(1, response length)` response columns, like the padded forward's output: a row
    without a response still gets one (meaningless, masked) value predicted from its prompt's last token."""
    rows, width = input_ids.shape
    response_width = width - prompt_width
    if response_width < 1 or prompt_width < 1:
        raise ValueError(
            f"pack_rows needs >= 1 prompt and >= 1 response column, got {prompt_width} and {response_width}"
        )
    mask = attention_mask.detach().to("cpu", torch.int64)
    prompt_lengths = mask[:, :prompt_width].sum(1).numpy()
    response_lengths = mask[:, prompt_width:].sum(1).numpy()
    columns = np.arange(width)
    starts, stops = prompt_width - prompt_lengths, prompt_width + response_lengths
    expected = (columns >= starts[:, None]) & (columns < stops[:, None])
    if not np.array_equal(mask.numpy() != 0, expected):
        bad = int(np.nonzero((mask.numpy() != 0) != expected)[0][0])
        raise ValueError(
            f"pack_rows: row {bad}'s attention mask is not one span [pad.. prompt | response ..pad] around column "
            f"{prompt_width}; packing needs each row's tokens to be contiguous"
        )
    if (prompt_lengths == 0).any():
        raise ValueError(f"pack_rows: row {int(np.argmin(prompt_lengths))} has no prompt token to predict its response")
    groups = prompt_groups(input_ids, attention_mask, prompt_width) if share_prompts else np.arange(rows)

    sources: list[np.ndarray] = []  # flat [B * W] index of each packed token
    query_lengths: list[int] = []
    key_pieces: list[np.ndarray] = []
    predict: list[np.ndarray] = []
    slots: list[np.ndarray] = []
    cursor = 0
    prompt_starts: dict[int, int] = {}  # group -> packed position of its prompt's first token
    for row in range(rows):
        prompt, response = int(prompt_lengths[row]), int(response_lengths[row])
        inputs = max(response - 1, 0)  # response tokens that predict a later response token
        base = row * width
        shared = groups[row] in prompt_starts
        if not shared:
            prompt_starts[groups[row]] = cursor
            sources.append(base + np.arange(prompt_width - prompt, prompt_width))
            cursor += prompt
        prompt_start = prompt_starts[groups[row]]
        own = np.arange(cursor, cursor + inputs)
        sources.append(base + prompt_width + np.arange(inputs))
        cursor += inputs
        if not shared:  # one causal segment: the prompt and this row's response
            query_lengths.append(prompt + inputs)
            key_pieces.append(np.arange(prompt_start, cursor))
        elif inputs:  # the response attends to the packed prompt, then to its own tokens
            query_lengths.append(inputs)
            key_pieces.append(np.concatenate([np.arange(prompt_start, prompt_start + prompt), own]))
        # Response token 0 is predicted by the prompt's last token, token j > 0 by response token j - 1.
        predict.append(np.concatenate([[prompt_start + prompt - 1], own]))
        slots.append(row * response_width + np.arange(inputs + 1))

    filler = bucketed_length(cursor) - cursor if bucket_length else 0
    if filler:  # its own segment: no real token attends to it, and no output is read from it
        sources.append(np.zeros(filler, dtype=np.int64))
        query_lengths.append(filler)
        key_pieces.append(np.arange(cursor, cursor + filler))
        cursor += filler
    source = torch.from_numpy(np.concatenate(sources))
    lengths = np.asarray(query_lengths, dtype=np.int64)
    query_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    keys = np.concatenate(key_pieces)
    squares = all(
        piece.size == length and piece[0] == start for piece, length, start in zip(key_pieces, lengths, query_starts)
    )
    segments = (
        VarlenSegments(query_starts, lengths)
        if squares
        else VarlenSegments(query_starts, lengths, keys, np.asarray([piece.size for piece in key_pieces]))
    )
    device = input_ids.device
    predict_positions = torch.from_numpy(np.concatenate(predict))
    head_positions = None
    if bucket_length:
        extra = bucketed_length(predict_positions.numel()) - predict_positions.numel()
        head_positions = torch.cat([predict_positions, predict_positions[-1:].expand(extra)]).to(device)
    predict_positions = predict_positions.to(device)
    target_slots = torch.from_numpy(np.concatenate(slots)).to(device)
    flat_slot_rows, flat_slot_columns = target_slots // response_width, target_slots % response_width
    source = source.to(device)
    packed_positions = position_ids.reshape(-1).index_select(0, source).unsqueeze(0)
    if filler:
        packed_positions[0, -filler:] = torch.arange(filler, device=device)
    return PackedRows(
        input_ids=input_ids.reshape(-1).index_select(0, source).unsqueeze(0),
        position_ids=packed_positions,
        segments=segments,
        predict_positions=predict_positions,
        target_ids=input_ids[flat_slot_rows, prompt_width + flat_slot_columns],
        target_slots=target_slots,
        rows=rows,
        response_width=response_width,
        shared_prompt_rows=rows - len(prompt_starts),
        head_positions=head_positions,
    )


def target_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Per-position log-prob of `targets` [N] under `log_softmax(logits / temperature)` (logits [N, V]; greedy,
    temperature <= 0, counts as 1: the engine reports unscaled logprobs), and that distribution's entropy [N]
    when `with_entropy`; both float32."""
    if temperature <= 0:
        temperature = 1.0
    shifted = logits.float() / temperature
    logprobs = torch.log_softmax(shifted, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = entropy_from_logits(shifted.unsqueeze(0))[0] if with_entropy else None
    return logprobs, entropy


def packed_response_logprobs(
    model: torch.nn.Module, packed: PackedRows, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Log-probs [B, R] (and entropies) of the response tokens from one packed forward; the LM head runs only at
    `predict_positions`. Values past a row's response are 0."""
    positions = packed.predict_positions if packed.head_positions is None else packed.head_positions
    logits = model(**packed.model_inputs(), logits_to_keep=positions).logits
    logits = logits[0, : packed.predict_positions.numel()]
    logprobs, entropy = target_logprobs(logits, packed.target_ids, temperature, with_entropy)
    return packed.scatter(logprobs), None if entropy is None else packed.scatter(entropy)


def packed_token_scores(model: torch.nn.Module, packed: PackedRows) -> torch.Tensor:
    """A token-classification model's first output at the position before each response token (a critic's value),
    [B, R] float32 from one packed forward; 0 past a row's response."""
    scores = model(**packed.model_inputs()).logits
    return packed.scatter(scores[0, :, 0].index_select(0, packed.predict_positions).float())


def _hf_model(model: torch.nn.Module) -> Any:
    """The Hugging Face `PreTrainedModel` inside a peft wrapper (or the model itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def packing_support(model: torch.nn.Module) -> Optional[str]:
    """None when `model` can run packed forwards, else why not (shown in errors and logs)."""
    hf = _hf_model(model)
    name = type(hf).__name__
    can_set = getattr(hf, "_can_set_attn_implementation", None)
    if not callable(can_set) or not can_set():
        return f"{name} does not route its attention through transformers' AttentionInterface"
    if hasattr(hf, "lm_head") and "logits_to_keep" not in inspect.signature(hf.forward).parameters:
        return f"{name}.forward takes no logits_to_keep (the LM head would run on every packed token)"
    config = hf.config
    if any(layer != "full_attention" for layer in (getattr(config, "layer_types", None) or [])):
        return (
            f"{name} has sliding-window or other non-causal-full attention layers ({sorted(set(config.layer_types))})"
        )
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return f"{name} uses sliding-window attention"
    if getattr(config, "attn_logit_softcapping", None):
        return f"{name} soft-caps its attention logits"
    if any(hasattr(module, "sinks") for module in hf.modules()):
        return f"{name} has attention sinks"
    return None


def enable_packed_attention(model: torch.nn.Module) -> None:
    """Switch `model`'s attention to `PACKED_ATTENTION` (padded calls still run SDPA); raise ValueError naming
    the reason when the model cannot pack."""
    reason = packing_support(model)
    if reason is not None:
        raise ValueError(f"sequence packing: {reason}")
    hf = _hf_model(model)
    hf.set_attn_implementation(PACKED_ATTENTION)
    if hf.config._attn_implementation != PACKED_ATTENTION:
        raise ValueError(f"sequence packing: {type(hf).__name__} kept attention {hf.config._attn_implementation!r}")


def describe_kernel(device: torch.device, dtype: torch.dtype) -> str:
    """A one-line description of the packed-attention kernel on `device` for `dtype` (for start-up logs)."""
    kernel = varlen_kernel(device, dtype)
    if kernel == "flash_attn":
        return "flash-attention varlen"
    if device.type == "cuda":
        return "SDPA over buckets of similar rows (install flash-attn and train in bf16/fp16 for the varlen kernel)"
    return "SDPA over buckets of similar rows"
