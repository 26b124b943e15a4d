"""KV cache layers with spare columns, for the `hf` engine's decoding.

transformers' `DynamicLayer.update` concatenates each step's keys and values onto the cache: every decode step copies
the whole cache, so decoding n tokens copies O(n^2) columns. `GrowingLayer` keeps its keys and values in buffers with
spare columns after the filled ones, so a step writes its token in place; `new_kv_cache` builds a `DynamicCache` of
them. Measured through the engine (`benchmarks/kv_growth.py`, quiet 2-core machine): long decodes of the 21 M tiny
model (8 rows x 300 tokens, 4 x 900) 6 % faster; short ones (128 rows x 8, 64 x 16) unchanged. (A profile taken while
the machine was busy put the copy at 44 % of a step: memory-bound copies suffer most from a neighbour.)
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import DynamicLayer

MIN_SPARE_COLUMNS = 64
"""Spare columns a buffer gets when it grows (at least; a quarter of its length when that is more), so a buffer is
reallocated once every that many decode steps, not at each."""


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of the filled columns of larger buffers.

    `update` writes new columns in place while there is room and reallocates with spare columns when there is not;
    `batch_select_indices` and `drop_left_columns` keep the spare room; `join_left_padded` stacks two layers' rows
    into one buffer. Assigning `keys` / `values` (as transformers' own methods do) replaces the buffers without spare
    room. The values held are exactly a `DynamicLayer`'s: only where they live differs."""

    def __init__(self, **kwargs: Any) -> None:
        self._keys: Optional[torch.Tensor] = None
        self._values: Optional[torch.Tensor] = None
        self._length = 0
        super().__init__(**kwargs)

    @property
    def keys(self) -> Optional[torch.Tensor]:
        """The filled key columns, [batch, heads, length, head_dim] (a view of the buffer)."""
        return self._filled(self._keys)

    @keys.setter
    def keys(self, tensor: Optional[torch.Tensor]) -> None:
        self._keys = tensor
        self._length = tensor.shape[-2] if tensor is not None and tensor.dim() >= 2 else 0

    @property
    def values(self) -> Optional[torch.Tensor]:
        """The filled value columns, [batch, heads, length, head_dim] (a view of the buffer)."""
        return self._filled(self._values)

    @values.setter
    def values(self, tensor: Optional[torch.Tensor]) -> None:
        self._values = tensor

    def _filled(self, buffer: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        if buffer is None or buffer.dim() < 2:
            return buffer
        return buffer[..., : self._length, :]

    @property
    def capacity(self) -> int:
        """Columns the buffers hold, filled or spare."""
        return self._keys.shape[-2] if self._keys is not None and self._keys.dim() >= 2 else 0

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new columns (in place while there is room) and return all filled keys and values."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length, added = self._length, key_states.shape[-2]
        if self.capacity < length + added:
            self._reallocate(key_states, value_states, length + added)
        self._keys[..., length : length + added, :] = key_states
        self._values[..., length : length + added, :] = value_states
        self._length = length + added
        return self.keys, self.values

    @staticmethod
    def spare_columns(filled: int) -> int:
        """Spare columns a buffer of `filled` columns gets when it is (re)allocated."""
        return max(MIN_SPARE_COLUMNS, filled // 4)

    def _reallocate(self, key_states: torch.Tensor, value_states: torch.Tensor, needed: int) -> None:
        columns = needed + self.spare_columns(needed)
        keys = key_states.new_empty((*key_states.shape[:-2], columns, key_states.shape[-1]))
        values = value_states.new_empty((*value_states.shape[:-2], columns, value_states.shape[-1]))
        if self._length:
            keys[..., : self._length, :] = self.keys
            values[..., : self._length, :] = self.values
        self._keys, self._values = keys, values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows at `indices`, spare columns included."""
        if self._length:
            self._keys, self._values = self._keys[indices], self._values[indices]

    def drop_left_columns(self, count: int) -> None:
        """Drop the first `count` columns (left padding no row attends to any more); the spare room stays."""
        if count > 0:
            self._keys, self._values = self._keys[..., count:, :], self._values[..., count:, :]
            self._length -= count

    def join_left_padded(self, other: DynamicLayer, columns: int) -> None:
        """Stack `other`'s rows after this layer's, each side left-padded with zeros to `columns` filled columns,
        into one new buffer with spare columns (one copy of each side)."""
        mine, theirs = self.keys, other.keys
        rows = mine.shape[0] + theirs.shape[0]
        width = columns + self.spare_columns(columns)
        keys = mine.new_zeros((rows, *mine.shape[1:-2], width, mine.shape[-1]))
        values = self.values.new_zeros((rows, *self.values.shape[1:-2], width, self.values.shape[-1]))
        for buffer, top, bottom in ((keys, mine, theirs), (values, self.values, other.values)):
            buffer[: top.shape[0], ..., columns - top.shape[-2] : columns, :] = top
            buffer[top.shape[0] :, ..., columns - bottom.shape[-2] : columns, :] = bottom
        self._keys, self._values, self._length = keys, values, columns


def new_kv_cache(config: PretrainedConfig, layer_class: type[GrowingLayer] = GrowingLayer) -> DynamicCache:
    """A `DynamicCache` for `config` whose plain dynamic layers are `layer_class` (sliding-window and other layers
    stay as transformers makes them)."""
    cache = DynamicCache(config=config)
    cache.layers = [layer_class() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
