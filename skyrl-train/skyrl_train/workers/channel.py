"""A worker rank's local channel: its methods served on a Unix socket, from a thread of its own.

A Ray call to a rank costs the trainer submitting, scheduling and result handling, several times what a local socket
costs (`utils.local_channel`). `WorkerGroup`'s async
sharded calls (the policy update, the log-prob forwards) therefore go through each rank's channel when every rank runs
on the caller's machine; everything else stays with Ray.

The rank's methods then run in the channel's thread instead of Ray's. That is safe because a group never has two calls
in flight on a rank (each rank runs the group's collectives in the order the trainer issues them, so the trainer awaits
one call before the next), whichever way they travel. What is per thread in torch is set up for that thread: the
rank's CUDA device; grad mode and autocast are entered by the methods themselves.
"""

from __future__ import annotations

from typing import Any, Optional

import ray
import torch

from skyrl_train.utils.local_channel import ThreadedChannelServer


class ChannelHost:
    """The serving half, mixed into `BaseWorker` (which sets `role`, `rank` and `device`)."""

    role: str
    rank: int
    device: torch.device
    _channel: Optional[ThreadedChannelServer] = None

    def open_channel(self, caller_node_id: str) -> Optional[str]:
        """The path of this rank's channel (started on first use), or None when the caller runs on another machine
        (its calls stay with Ray)."""
        if caller_node_id != ray.get_runtime_context().get_node_id():
            return None
        if self._channel is None:
            self._channel = ThreadedChannelServer(
                self._channel_call, f"skyrl-{self.role}-rank{self.rank}-channel", self._channel_thread_setup
            )
        return self._channel.start()

    def close_channel(self) -> None:
        """Stop serving the channel (its connections close; calls waiting on them fail)."""
        channel, self._channel = self._channel, None
        if channel is not None:  # a call stuck in a collective with a dead rank keeps its thread: do not wait long
            channel.close(timeout_s=1.0)

    def _channel_thread_setup(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # the current device is per thread

    def _channel_call(self, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Run the public method `method(*args, **kwargs)` of this rank (in the channel's thread)."""
        if method.startswith("_") or not callable(getattr(self, method, None)):
            raise AttributeError(f"{type(self).__name__} has no public method {method!r} to call through its channel")
        return getattr(self, method)(*args, **kwargs)
