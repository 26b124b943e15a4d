"""`StatefulDataLoader`: batches of prompts in a seeded per-epoch order, resumable from a saved position.

The order of epoch `e` is a permutation drawn from `(seed, e)` alone, so it can be recomputed on resume instead of
stored. The loader's state is `(epoch, position)`: the epoch being read and how many of its samples were handed out.
The position advances when a batch is handed out, and the epoch rolls over as soon as its last batch is handed out,
so `state_dict()` taken after any batch resumes exactly at the next one. Plain Python: no worker processes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Optional, TypeVar

import numpy as np

T = TypeVar("T")

STATE_VERSION = 1


def epoch_permutation(num_samples: int, seed: int, epoch: int) -> list[int]:
    """The sample order of `epoch`: a permutation of range(num_samples) that depends only on (seed, epoch)."""
    return np.random.default_rng([seed, epoch]).permutation(num_samples).tolist()


class StatefulDataLoader:
    """Yield lists of `batch_size` items of `dataset`, epoch after epoch, with a state that resumes mid-epoch.

    `shuffle=True` draws each epoch's order from `(seed, epoch)`; otherwise items come in dataset order. With
    `drop_last=True` the samples left after the last full batch of an epoch are skipped; otherwise the last batch is
    smaller. `iter(loader)` yields the rest of the current epoch; `batches(num_epochs)` runs until `num_epochs` epochs
    (counted from 0) are done. `state_dict()`/`load_state_dict()` save and restore the position exactly.
    """

    def __init__(
        self,
        dataset: Sequence[T],
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 42,
        drop_last: bool = True,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if len(dataset) == 0:
            raise ValueError("dataset is empty; the dataloader needs at least one sample")
        if drop_last and len(dataset) < batch_size:
            raise ValueError(
                f"dataset has {len(dataset)} samples, fewer than batch_size={batch_size}, and drop_last=True: no batch "
                "would ever be produced; lower batch_size or set drop_last=False"
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        """The epoch being read (0-based)."""
        self.position = 0
        """Samples of the current epoch's order already handed out."""
        self._order_cache: tuple[int, list[int]] = (-1, [])

    @property
    def num_samples(self) -> int:
        """Samples in the dataset."""
        return len(self.dataset)

    @property
    def samples_per_epoch(self) -> int:
        """Samples handed out per epoch (fewer than `num_samples` when drop_last skips a partial batch)."""
        if self.drop_last:
            return self.num_samples - self.num_samples % self.batch_size
        return self.num_samples

    def __len__(self) -> int:
        """Batches per epoch."""
        return -(-self.samples_per_epoch // self.batch_size)

    def _order(self, epoch: int) -> list[int]:
        if self._order_cache[0] != epoch:
            order = (
                epoch_permutation(self.num_samples, self.seed, epoch) if self.shuffle else list(range(self.num_samples))
            )
            self._order_cache = (epoch, order)
        return self._order_cache[1]

    def _next_batch(self) -> list[Any]:
        """Hand out the batch at the current position and advance (rolling over to the next epoch at its end)."""
        order = self._order(self.epoch)
        end = min(self.position + self.batch_size, self.samples_per_epoch)
        batch = [self.dataset[index] for index in order[self.position : end]]
        self.position = end
        if self.position >= self.samples_per_epoch:
            self.epoch += 1
            self.position = 0
        return batch

    def next_batch(self, max_epochs: Optional[int] = None) -> Optional[list[Any]]:
        """The next batch (rolling over epochs), or None once `max_epochs` epochs are done."""
        if max_epochs is not None and self.epoch >= max_epochs:
            return None
        return self._next_batch()

    def __iter__(self) -> Iterator[list[Any]]:
        """Yield the remaining batches of the current epoch."""
        start_epoch = self.epoch
        while self.epoch == start_epoch:
            yield self._next_batch()

    def batches(self, num_epochs: Optional[int] = None) -> Iterator[list[Any]]:
        """Yield batches from the current position until `num_epochs` epochs are done (forever when None)."""
        while num_epochs is None or self.epoch < num_epochs:
            yield self._next_batch()

    def state_dict(self) -> dict[str, Any]:
        """The position to resume from, plus the settings that determine the order (all plain Python values)."""
        return {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_samples": self.num_samples,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict()` output: the same epoch, position, seed and shuffle.

        The dataset must have as many samples as when the state was saved (else the order differs; ValueError).
        `batch_size` and `drop_last` are this loader's own: the next batch starts at the saved sample position.
        """
        missing = [
            key for key in ("version", "epoch", "position", "seed", "shuffle", "num_samples") if key not in state
        ]
        if missing:
            raise ValueError(f"dataloader state is missing {missing}; expected the output of state_dict()")
        if state["version"] != STATE_VERSION:
            raise ValueError(
                f"dataloader state has version {state['version']!r}; this loader reads version {STATE_VERSION}"
            )
        if state["num_samples"] != self.num_samples:
            raise ValueError(
                f"dataloader state was saved for a dataset of {state['num_samples']} samples, but this dataset has "
                f"{self.num_samples}; the saved order cannot be resumed on different data"
            )
        self.seed = int(state["seed"])
        self.shuffle = bool(state["shuffle"])
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self._order_cache = (-1, [])
        if self.position >= self.samples_per_epoch:  # e.g. drop_last changed since the save: nothing left this epoch
            self.epoch += 1
            self.position = 0
