"""`WeightPublisher`: the engines serve the policy's newest weights, as the next version.

It owns the served version, the gate the run's OpenAI endpoint (if any) holds open per request, and the engines'
sleep around training. A publish is either a call of its own (`publish`) or rides inside the policy update
(`in_update` before it, `finish_in_update` with the ranks' parts after it); the `RunPlan` says which. The weight-sync
strategy and the sharded-send protocol stay behind it: the trainer never sees a transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Optional

from skyrl_train.config.run_plan import RunPlan
from skyrl_train.inference.gate import WeightGate
from skyrl_train.utils.timeline import SpanLog
from skyrl_train.weight_sync.strategy import WeightSyncStrategy
from skyrl_train.workers.roles import PolicyClient, SyncRequest
from skyrl_train.workers.shard_send import PresumedWrite, update_send


class WeightPublisher:
    """Moves the policy's weights into the engines, each time as a new version (see the module docstring)."""

    def __init__(
        self,
        policy: PolicyClient,
        strategy: Optional[WeightSyncStrategy],
        client: Any,
        plan: RunPlan,
        verify: bool = False,
        colocated_groups: Sequence[Any] = (),
    ) -> None:
        self.policy, self.strategy, self.client, self.plan, self.verify = policy, strategy, client, plan, verify
        self.colocated_groups = [group for group in colocated_groups if group is not None]
        """The worker groups sharing the engines' GPUs (policy, ref, critic, reward model), which hand their freed
        memory back before the engines wake."""
        self.version = 0
        self.gate = WeightGate()
        self.pauses = SpanLog()
        """When the engines were paused for a sync (wall clock), for the run's timeline."""

    async def publish(self) -> dict[str, float]:
        """Send the policy's weights to every engine as the next version (a call of its own); optionally verify
        them by checksum. Endpoint requests wait meanwhile; async modes also pause the engines (running rollouts go
        on with the new weights afterwards)."""
        paused_at = time.time()
        if self.plan.pause_engines_to_sync:
            await self.client.pause()
        try:
            if not self.gate.is_closed:
                await self.gate.close()
            try:
                await self.strategy.install_deferred()
                self.version += 1
                return await self._finish(await self.policy.send_weights(self.version))
            finally:
                self.gate.open()
        finally:
            if self.plan.pause_engines_to_sync:
                await self.client.resume()
                self.pauses.add("paused", paused_at, time.time())

    async def in_update(self) -> SyncRequest:
        """The request a policy update carries to send its weights as the next version."""
        await self.strategy.install_deferred()  # the last sync's payload is about to be overwritten
        self.version += 1
        return SyncRequest(self.version, self.plan.defer_install)

    async def finish_in_update(self, parts: list[Any]) -> dict[str, float]:
        """After an update that carried `in_update`'s request: confirm (or defer) what its ranks sent. When they
        presumed a write plan rank 0 no longer proposes, nothing was sent and the sync runs again on its own."""
        sent = update_send(parts)
        report = await self.policy.send_weights(self.version) if sent is None else sent.report()
        metrics = await self._finish(report)
        metrics["weight_sync/presumed_plan"] = float(sent is not None and isinstance(parts[0], PresumedWrite))
        metrics["weight_sync/in_update"] = 1.0
        return metrics

    async def _finish(self, report: dict[str, Any]) -> dict[str, float]:
        """After rank 0 sent the weights (its report): confirm every engine serves the version, verify checksums when
        asked, and return the `weight_sync/*` metrics. A deferred final chunk (`report["deferred"]`) goes to the
        engines' proxies instead, which confirm the version at the next generate."""
        deferred = report.get("deferred")
        if deferred is not None:
            self.strategy.defer_install(report["version"], deferred)
        else:
            await self.strategy.confirm(report["version"], report.get("served_versions"))  # no round trip if given
        metrics = {
            "weight_sync/installed_at_generate": float(deferred is not None),
            "weight_sync/version": float(report["version"]),
            "weight_sync/megabytes": report["num_bytes"] / 1e6,
            "weight_sync/seconds": report["seconds"],
            "weight_sync/writer_ranks": float(report.get("writers", 1)),
        }
        if self.verify:
            verdict = await self.strategy.verify(report["checksums"])
            metrics["weight_sync/verified_tensors"] = float(verdict.num_checked)
        return metrics

    @contextlib.asynccontextmanager
    async def engines_asleep(self) -> AsyncIterator[None]:
        """While the workers train: with `RunPlan.engines_sleep`, close the endpoint gate (requests wait until the
        next publish) and put the engines to sleep, waking them after."""
        if not self.plan.engines_sleep:
            yield
            return
        await self.gate.close()
        await self.client.sleep()
        yield
        await self.wake_engines()

    async def wake_engines(self) -> None:
        """Hand the GPUs back to the engines: every colocated worker group first returns the memory its caching
        allocator holds for freed tensors (`BaseWorker.release_memory`: the policy's offloaded optimizer state,
        gradients and activations, the ref's activations), then the engines wake into it. Without that step they
        would wake next to everything the workers ever reserved."""
        await asyncio.gather(*(asyncio.to_thread(group.run_all, "release_memory") for group in self.colocated_groups))
        await self.client.wake_up()
