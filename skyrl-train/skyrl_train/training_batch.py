"""`TrainingBatch`: trajectories turned into aligned tensors (left-padded prompts, right-padded responses)."""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, Optional

import numpy as np
import torch

from skyrl_train.generators.types import Trajectory


@dataclass
class TrainingBatch:
    """Tensors for one batch of trajectories. Sequence i is `[pad.. prompt_i | response_i ..pad]`, so response token
    j of every row sits at column `prompt_width + j`.

    Shapes: `input_ids`, `attention_mask`, `position_ids` [B, P + R]; `response_mask`, `loss_mask`, `token_rewards`,
    `rollout_logprobs` [B, R]; `valid` [B]. `uids` group samples of one prompt.

    The two masks have one meaning each:
    - `response_mask`: 1 on every token the policy generated (0 on observations, chat-template tokens and padding),
      whether or not the row is trained on. Advantage estimators and group statistics use it.
    - `loss_mask`: `response_mask` on the rows the loss uses (valid and not filtered), 0 elsewhere. Losses, their
      reductions and the KL/entropy terms use it.
    `valid` is False for rows whose environment failed: they have no reward to learn from, so they are left out of
    the advantage statistics as well as the loss.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    response_mask: torch.Tensor
    loss_mask: torch.Tensor
    token_rewards: torch.Tensor
    rollout_logprobs: Optional[torch.Tensor]
    prompt_width: int
    uids: list[str]
    valid: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        if self.valid is None:
            self.valid = torch.ones(self.input_ids.shape[0], dtype=torch.bool)

    @property
    def valid_response_mask(self) -> torch.Tensor:
        """`response_mask` with the rows whose environment failed zeroed: the generated tokens that have a reward."""
        return self.response_mask * self.valid[:, None].to(self.response_mask.dtype)

    @property
    def response_width(self) -> int:
        """R: the padded response length."""
        return self.response_mask.shape[1]

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @classmethod
    def from_trajectories(cls, trajectories: list[Trajectory], pad_token_id: int) -> TrainingBatch:
        """Pad and stack trajectories; trajectories with no response still get one (masked) column."""
        if not trajectories:
            raise ValueError("TrainingBatch.from_trajectories needs at least one trajectory")
        rows = len(trajectories)
        prompt_lengths = np.fromiter((len(t.prompt_token_ids) for t in trajectories), dtype=np.int64, count=rows)
        response_lengths = np.fromiter((len(t.response_ids) for t in trajectories), dtype=np.int64, count=rows)
        has_logprobs = all(t.rollout_logprobs is not None for t in trajectories)
        _check_token_lists(trajectories, has_logprobs)
        prompt_width, response_width = int(prompt_lengths.max()), max(1, int(response_lengths.max()))
        width = prompt_width + response_width
        # Every field is filled by one scatter of all rows' values (flattened in one pass), then shared with torch
        # (no copy): cheaper than a slice assignment per row and field.
        prompt_rows, prompt_positions = _row_positions(prompt_lengths)
        response_rows, response_positions = _row_positions(response_lengths)
        total_prompt, total_response = len(prompt_rows), len(response_rows)
        ids = np.full((rows, width), pad_token_id, dtype=np.int64)
        prompt_columns = prompt_width - prompt_lengths[prompt_rows] + prompt_positions
        ids[prompt_rows, prompt_columns] = _flatten((t.prompt_token_ids for t in trajectories), total_prompt, np.int64)
        response_values = _flatten((t.response_ids for t in trajectories), total_response, np.int64)
        ids[response_rows, prompt_width + response_positions] = response_values
        columns = np.arange(width)
        starts, stops = prompt_width - prompt_lengths, prompt_width + response_lengths
        attention_array = ((columns >= starts[:, None]) & (columns < stops[:, None])).astype(np.int64)

        def per_token(name: str) -> np.ndarray:
            values = np.zeros((rows, response_width), dtype=np.float32)
            flat = _flatten((getattr(t, name) for t in trajectories), total_response, np.float32)
            values[response_rows, response_positions] = flat
            return values

        input_ids, attention = torch.from_numpy(ids), torch.from_numpy(attention_array)
        response_mask, rewards = torch.from_numpy(per_token("loss_mask")), torch.from_numpy(per_token("token_rewards"))
        logprobs = torch.from_numpy(per_token("rollout_logprobs")) if has_logprobs else None
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        trained = np.fromiter((t.is_trained for t in trajectories), dtype=np.float32, count=rows)
        valid = np.fromiter((t.is_valid for t in trajectories), dtype=np.bool_, count=rows)
        return cls(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            response_mask=response_mask,
            loss_mask=response_mask * torch.from_numpy(trained)[:, None],
            token_rewards=rewards,
            rollout_logprobs=logprobs,
            prompt_width=prompt_width,
            uids=[t.uid for t in trajectories],
            valid=torch.from_numpy(valid),
        )

    def select(self, indices: list[int]) -> TrainingBatch:
        """The rows at `indices` (e.g. one micro-batch), same widths."""
        index = torch.tensor(indices, dtype=torch.long)
        values = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                values[f.name] = value[index]
            elif f.name == "uids":
                values[f.name] = [value[i] for i in indices]
            else:
                values[f.name] = value
        return TrainingBatch(**values)

    @classmethod
    def concat(cls, batches: list[TrainingBatch]) -> TrainingBatch:
        """The rows of `batches` one after the other; they must share their widths (e.g. selections of one batch)."""
        if not batches:
            raise ValueError("TrainingBatch.concat needs at least one batch")
        widths = {(batch.prompt_width, batch.input_ids.shape[1]) for batch in batches}
        if len(widths) != 1:
            raise ValueError(f"TrainingBatch.concat: batches of different (prompt, total) widths {sorted(widths)}")
        values: dict[str, Any] = {}
        for f in fields(cls):
            parts = [getattr(batch, f.name) for batch in batches]
            if f.name == "uids":
                values[f.name] = [uid for uids in parts for uid in uids]
            elif isinstance(parts[0], torch.Tensor):
                values[f.name] = torch.cat(parts)
            else:  # prompt_width, or rollout_logprobs when the batches have none
                values[f.name] = parts[0]
        return cls(**values)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its CPU tensors as numpy arrays: Ray then ships them as out-of-band buffers, cheaper than
        torch's own tensor pickling. Integer tensors travel in the narrowest integer type that holds their values
        (ids, positions and 0/1 masks are int64 in memory), which keeps small updates under the 100 KB up to which Ray
        sends arguments inline instead of through its object store."""
        return {name: _to_wire(value) for name, value in vars(self).items()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Rebuild the tensors of `__getstate__` (copies, so they are writable even from a read-only buffer)."""
        for name, value in state.items():
            setattr(self, name, _from_wire(value))

    def to(self, device: torch.device | str) -> TrainingBatch:
        """A copy with every tensor on `device`."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                values[name] = value.to(device)
        return TrainingBatch(**values)


def _check_token_lists(trajectories: list[Trajectory], has_logprobs: bool) -> None:
    """Raise naming the trajectory whose per-token lists do not have one entry per response token."""
    for i, t in enumerate(trajectories):
        r = len(t.response_ids)
        if len(t.loss_mask) == r and len(t.token_rewards) == r and (not has_logprobs or len(t.rollout_logprobs) == r):
            continue
        per_token = {"loss_mask": t.loss_mask, "token_rewards": t.token_rewards}
        if has_logprobs:
            per_token["rollout_logprobs"] = t.rollout_logprobs
        name, values = next((name, values) for name, values in per_token.items() if len(values) != r)
        raise ValueError(f"trajectory {i} (uid {t.uid!r}): {name} has {len(values)} entries for {r} response tokens")


def _row_positions(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the rows' values laid end to end: each value's row, and its position within its row."""
    rows = np.repeat(np.arange(len(lengths)), lengths)
    row_starts = np.cumsum(lengths) - lengths
    return rows, np.arange(len(rows)) - row_starts[rows]


def _flatten(lists: Iterable[Sequence[float]], count: int, dtype: type) -> np.ndarray:
    """The values of `lists` end to end, as one array of `count` values."""
    return np.fromiter(itertools.chain.from_iterable(lists), dtype=dtype, count=count)


_NUMPY_DTYPES = {
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.float32,
    torch.float64,
}


_NARROW_INTEGERS = (np.uint8, np.int8, np.int16, np.int32)
_NARROWING = contextvars.ContextVar("skyrl_narrow_integers_on_wire", default=True)


@contextlib.contextmanager
def integers_at_full_width() -> Iterator[None]:
    """Within this block, and in the tasks created in it, `TrainingBatch`es and `TensorOnWire`s pickle their integer
    tensors at their own width. Narrowing exists for Ray's 100 KB inline limit; a local channel has no such threshold,
    and there the narrowing's min/max/cast on the trainer (and the widening on the rank) only cost time on the
    step's critical path."""
    token = _NARROWING.set(False)
    try:
        yield
    finally:
        _NARROWING.reset(token)


@dataclass(frozen=True)
class _NarrowedIntegers:
    """An integer tensor on the wire in a narrower numpy type than its own (`dtype`, restored on arrival)."""

    values: np.ndarray
    dtype: str  # numpy's name of the tensor's own type: "int64" or "int32"


class TensorOnWire:
    """A tensor travelling to or from an actor as `TrainingBatch`'s tensors do (a numpy array, integers narrowed),
    arriving as a writable tensor. Plain tensors are pickled by torch, which `torch.save`s each storage into bytes
    on one side and loads it on the other, a visible part of the driver's time on every update call (advantages and
    old log-probs per mini-batch). Use it only at the actor boundary: it is a
    tensor again only once pickled and unpickled."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __reduce__(self) -> tuple:
        return (_from_wire, (_to_wire(self.tensor),))


def on_wire(value: Any) -> Any:
    """`value` as a `TensorOnWire` when it is a tensor, else `value` itself."""
    return TensorOnWire(value) if isinstance(value, torch.Tensor) else value


def _to_wire(value: Any) -> Any:
    """A CPU tensor numpy can hold, as a numpy array (integers in the narrowest type that holds their values,
    wrapped with their own dtype); anything else (CUDA, bfloat16, non-tensors) unchanged."""
    if not (isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dtype in _NUMPY_DTYPES):
        return value
    array = value.detach().numpy()
    if value.dtype in (torch.int64, torch.int32) and array.size and _NARROWING.get():
        low, high = int(array.min()), int(array.max())
        for narrow in _NARROW_INTEGERS:
            limits = np.iinfo(narrow)
            if limits.min <= low and high <= limits.max and limits.bits < array.itemsize * 8:
                return _NarrowedIntegers(array.astype(narrow), array.dtype.name)
    return array


def _from_wire(value: Any) -> Any:
    """The tensor `_to_wire` sent (a writable copy), or `value` itself when it was not one."""
    if isinstance(value, _NarrowedIntegers):
        return torch.from_numpy(value.values.astype(value.dtype))  # astype copies: writable
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    return value
