"""Per-key quotas: what one API key may hold at the server at once (active sessions, live adapters and their total
LoRA rank, listed checkpoints and their bytes, requests waiting for compute). Each check raises `QuotaExceeded`
(HTTP 429) naming the quota, its flag and the key's current amount; they run when something new would be stored, so
a resubmission of a request already accepted is never refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from skyrl_tx.compute_queue import ComputeQueue
from skyrl_tx.db import CheckpointRow, Database, ModelRow, SessionRow
from skyrl_tx.limits import Limits, QuotaExceeded
from skyrl_tx.tinker_paths import TinkerPath

LIVE = ("creating", "ready")
"""Model states whose adapter is (or is about to be) in memory."""


@dataclass
class Quotas:
    """The quota checks of one server over its database and compute queue."""

    db: Database
    compute: ComputeQueue
    limits: Limits

    def admit_session(self, owner: str) -> None:
        """Refuse a new session when the key holds `max_sessions_per_key` active ones."""
        with self.db.session() as s:
            active = s.scalar(
                select(func.count())
                .select_from(SessionRow)
                .where(SessionRow.owner == owner, SessionRow.status == "active")
            )
        if active >= self.limits.max_sessions_per_key:
            raise QuotaExceeded(
                f"this key has {active} active sessions, the most it may hold (--max-sessions-per-key "
                f"{self.limits.max_sessions_per_key}); close() unused ServiceClients or wait for their sessions to "
                "time out"
            )

    def admit_job(self, owner: str) -> None:
        """Refuse a new request when `max_queued_per_key` of the key's requests wait for compute (retryable)."""
        waiting = self.compute.waiting(owner)
        if waiting >= self.limits.max_queued_per_key:
            raise QuotaExceeded(
                f"this key has {waiting} requests waiting for compute, the most it may queue (--max-queued-per-key "
                f"{self.limits.max_queued_per_key}); retry once some have finished",
                retry=True,
            )

    def admit_adapter(self, owner: str, rank: int) -> None:
        """Refuse a new adapter beyond `max_adapters_per_key` live ones or `max_lora_rank_per_key` total rank."""
        with self.db.session() as s:
            configs = s.scalars(
                select(ModelRow.lora_config).where(ModelRow.owner == owner, ModelRow.status.in_(LIVE))
            ).all()
        ranks = [int((config or {}).get("rank", 0)) for config in configs]
        if len(ranks) >= self.limits.max_adapters_per_key:
            raise QuotaExceeded(
                f"this key has {len(ranks)} live adapters, the most it may hold (--max-adapters-per-key "
                f"{self.limits.max_adapters_per_key}); close() finished ServiceClients to unload theirs"
            )
        if sum(ranks) + rank > self.limits.max_lora_rank_per_key:
            raise QuotaExceeded(
                f"this key's live adapters have a total LoRA rank of {sum(ranks)}; a rank-{rank} adapter would pass "
                f"the quota of {self.limits.max_lora_rank_per_key} (--max-lora-rank-per-key)"
            )

    def admit_checkpoint(self, owner: str, target: TinkerPath) -> None:
        """Refuse a new listed checkpoint beyond `max_checkpoints_per_key`, or when the key's checkpoints already take
        `max_checkpoint_gb_per_key`; overwriting one of the key's checkpoints is always admitted."""
        with self.db.session() as s:
            rows = s.execute(
                select(CheckpointRow.tinker_path, CheckpointRow.size_bytes).where(CheckpointRow.owner == owner)
            ).all()
        if any(path == str(target) for path, _ in rows):
            return
        if len(rows) >= self.limits.max_checkpoints_per_key:
            raise QuotaExceeded(
                f"this key keeps {len(rows)} checkpoints, the most it may (--max-checkpoints-per-key "
                f"{self.limits.max_checkpoints_per_key}); delete some first"
            )
        total = sum(size or 0 for _, size in rows)
        if total >= self.limits.max_checkpoint_bytes_per_key:
            raise QuotaExceeded(
                f"this key's checkpoints take {total} bytes, the most it may keep (--max-checkpoint-gb-per-key "
                f"{self.limits.max_checkpoint_gb_per_key:g}); delete some first"
            )
