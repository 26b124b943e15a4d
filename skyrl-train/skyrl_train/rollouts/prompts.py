"""`PromptSource`: the prompts a run generates from, and which of them are still owed a training step.

Prompts come from the dataloader one batch at a time; prompts given back (`release(again=True)`: a fully async group
dropped for staleness) or restored from a checkpoint are drawn first. Every drawn prompt carries a key until a step
is done with it (`use`: trained on, or left out by dynamic sampling). The prompts drawn and not yet done with are the
checkpoint's `pending_prompts`, generated again first on resume, so a killed run loses and repeats no prompt.
"""

from __future__ import annotations

from typing import Any, Optional

Prompt = dict[str, Any]


class PromptSource:
    """The dataloader plus requeued prompts, with the keys of the prompts drawn but not yet used."""

    def __init__(self, loader: Any, epochs: int, batch_size: int) -> None:
        self.loader = loader
        self.epochs = epochs
        self.batch_size = batch_size
        self.pending: dict[int, Prompt] = {}
        """Prompts drawn (by key) but not done with yet: checkpointed, generated again first on resume."""
        self.used_uids: list[list[str]] = []
        """Per step of this process, the dataset uids of the prompts it used up: trained on, or generated and left
        out by dynamic sampling (for tests and debugging)."""
        self._requeued: list[Prompt] = []
        self._loader_batch: list[Prompt] = []
        self._next_key = 0
        self._used_now: list[str] = []

    def draw(self) -> Optional[tuple[int, Prompt]]:
        """(key, prompt) of the next prompt: requeued ones first, then the dataloader's; None when the data ran out."""
        if self._requeued:
            item = self._requeued.pop(0)
        else:
            if not self._loader_batch:
                batch = self.loader.next_batch(max_epochs=self.epochs)
                if batch is None:
                    return None
                self._loader_batch = list(batch)
            item = self._loader_batch.pop(0)
        key, self._next_key = self._next_key, self._next_key + 1
        self.pending[key] = item
        return key, item

    def draw_batch(self) -> Optional[list[tuple[int, Prompt]]]:
        """`batch_size` drawn prompts; None when the data ran out first (a partial last batch is not trained, as the
        dataloader drops it)."""
        drawn = []
        while len(drawn) < self.batch_size:
            pair = self.draw()
            if pair is None:
                break
            drawn.append(pair)
        return drawn if len(drawn) == self.batch_size else None

    def use(self, keys: list[int]) -> None:
        """A step is done with these prompts (and with those released as used since the last step)."""
        self.used_uids.append([*self._used_now, *(str(self.pending[key].get("uid")) for key in keys)])
        self._used_now = []
        for key in keys:
            self.pending.pop(key, None)

    def release(self, key: int, again: bool) -> None:
        """Let go of a prompt that will not be trained: generated `again` (put first in line), or used up (left out
        by dynamic sampling, as a step moves past such prompts)."""
        item = self.pending.pop(key)
        if again:
            self._requeued.append(item)
        else:
            self._used_now.append(str(item.get("uid")))

    def state(self) -> list[Prompt]:
        """The prompts drawn and not yet used (in flight, dropped for staleness, or drawn and not started)."""
        return [*self.pending.values(), *self._requeued, *self._loader_batch]

    def restore(self, prompts: Optional[list[Prompt]]) -> None:
        """Queue a checkpoint's untrained prompts to be drawn first."""
        self._requeued = [dict(item) for item in prompts or []]
