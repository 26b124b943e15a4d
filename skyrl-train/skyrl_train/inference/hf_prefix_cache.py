"""`PrefixCache`: the `hf` engine's KV cache kept between calls, per conversation (`generator.inference_engine.
enable_prefix_caching`).

A multi-turn rollout sends each turn's whole conversation so far; without a cache the engine prefills all of it again,
turn after turn, and on a small model that prefill is most of the engine's time. When a row of a session (the
`session_ids` of a request: one per trajectory in the multi-turn generator) finishes, its keys and values (prompt and
tokens fed so far) are kept here under the session id; the session's next prompt reuses the longest common prefix of
the two, so only the new tokens (the env's observation, the next turn's header) run through the model.

An entry belongs to the weight version that computed it: one from another version is never reused, and a weight
update or `reset_prefix_cache` drops them all. Weights changed in place without `update_weights` (a caller training
the engine's own model object) drop them too: `weights_stamp` (the sum of the parameters' in-place version counters)
is compared by `check_weights`, which a decode batch calls once before its lookups and once before its stores. The
oldest entries go first once the kept keys and values pass `max_bytes`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Optional

import torch

COUNTERS = ("hits", "misses", "reused_tokens", "prefilled_tokens")
"""`PrefixCache`'s counters, which `take_counts` reports."""


@dataclass
class CachedPrefix:
    """The keys and values of `tokens` (per layer `[kv heads, len(tokens), head dim]`) under weight `version`."""

    tokens: list[int]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    version: int

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


def common_prefix_length(first: Sequence[int], second: Sequence[int]) -> int:
    """How many leading tokens `first` and `second` share."""
    shorter = min(len(first), len(second))
    if list(first[:shorter]) == list(second[:shorter]):
        return shorter
    length = 0
    while first[length] == second[length]:
        length += 1
    return length


class PrefixCache:
    """Keys and values of finished rows by session id, least recently stored dropped first past `max_bytes`.

    `take` hands out (and removes) a session's entry with how many of a new prompt's tokens it covers; `put` stores a
    finished row's. Counters: `reused_tokens` (prompt tokens not prefilled thanks to an entry) and `prefilled_tokens`
    (prompt tokens that ran through the model, counted by the decode batch), `hits` and `misses` (lookups of a session
    with and without a usable entry).
    """

    def __init__(self, max_bytes: int = 512 * 2**20, weights_stamp: Optional[Callable[[], Hashable]] = None) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.weights_stamp = weights_stamp
        """Read by `check_weights`: a different value than last time means the weights changed (in place, unseen by
        `update_weights`), and every entry is dropped."""
        self._stamp: Optional[Hashable] = None
        self.entries: OrderedDict[Hashable, CachedPrefix] = OrderedDict()
        self.nbytes = 0
        self.reused_tokens = self.prefilled_tokens = self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self.entries)

    def take(self, session: Hashable, prompt: Sequence[int], version: int) -> Optional[tuple[CachedPrefix, int]]:
        """The session's entry and the count of `prompt`'s leading tokens it covers (at most all but the last, whose
        logits the prefill must compute); None when there is no entry of this `version` sharing a prefix. The entry
        leaves the cache either way: the row that takes it stores the longer conversation when it finishes."""
        entry = self.entries.pop(session, None)
        if entry is not None:
            self.nbytes -= entry.nbytes
        if entry is None or entry.version != version:
            self.misses += 1
            return None
        reuse = min(common_prefix_length(entry.tokens, prompt), len(prompt) - 1)
        if reuse <= 0:
            self.misses += 1
            return None
        self.hits += 1
        self.reused_tokens += reuse
        return entry, reuse

    def put(self, session: Hashable, entry: CachedPrefix) -> None:
        """Keep `entry` as the session's (replacing an older one), then drop the oldest entries past `max_bytes`."""
        previous = self.entries.pop(session, None)
        if previous is not None:
            self.nbytes -= previous.nbytes
        if entry.nbytes > self.max_bytes:
            return
        self.entries[session] = entry
        self.nbytes += entry.nbytes
        while self.nbytes > self.max_bytes:
            _, oldest = self.entries.popitem(last=False)
            self.nbytes -= oldest.nbytes

    def take_counts(self) -> dict[str, int]:
        """The counters since the last call (then zeroed): `hits`, `misses`, `reused_tokens`, `prefilled_tokens`."""
        counts = {name: getattr(self, name) for name in COUNTERS}
        for name in COUNTERS:
            setattr(self, name, 0)
        return counts

    def check_weights(self) -> None:
        """Drop every entry if the weights changed since the last check (`weights_stamp`); call it before a round of
        `take`s or `put`s (it reads every parameter's version counter, so once per round, not per row)."""
        if self.weights_stamp is not None:
            stamp = self.weights_stamp()
            if stamp != self._stamp:
                self.clear()
                self._stamp = stamp

    def clear(self) -> None:
        """Drop every entry (weights changed, or the caller reset the cache)."""
        self.entries.clear()
        self.nbytes = 0
