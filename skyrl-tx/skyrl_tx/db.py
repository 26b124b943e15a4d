"""The service's records in a SQL database through SQLAlchemy: sessions, models (training runs), futures, sampling
sessions and checkpoints.

SQLite (the default, a file under the checkpoint dir) runs in WAL mode with a busy timeout, so concurrent API
threads and the compute worker never see "database is locked"; PostgreSQL works by URL. Every write is a short
transaction; payloads and results are stored as bytes so a completed future survives a restart.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    func,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

PENDING, DONE, FAILED = "pending", "done", "failed"
"""Future states."""


def utcnow() -> dt.datetime:
    """The current time, timezone-aware UTC."""
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    """Declarative base of the service's tables."""


class SessionRow(Base):
    """A client session (`ServiceClient`): its owner, tags and last heartbeat."""

    __tablename__ = "sessions"
    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    tags: Mapped[Any] = mapped_column(JSON, default=list)
    user_metadata: Mapped[Any] = mapped_column(JSON, default=dict)
    sdk_version: Mapped[Optional[str]] = mapped_column(String(32), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="active")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_heartbeat_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class _SessionClient:
    """The columns of a client that a session opened on a base model: a training run or a sampling client."""

    session_id: Mapped[str] = mapped_column(String(64), index=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    base_model: Mapped[str] = mapped_column(String(256))


class ModelRow(_SessionClient, Base):
    """A training client's model (a training run): LoRA adapter on a base model plus its optimizer."""

    __tablename__ = "models"
    model_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    lora_config: Mapped[Any] = mapped_column(JSON)
    user_metadata: Mapped[Any] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(16), default="creating")
    """creating | ready | failed | lost (the server restarted: the in-memory weights are gone)."""
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_request_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class FutureRow(Base):
    """One submitted request: its payload hash (for deduplication), state and stored result."""

    __tablename__ = "futures"
    __table_args__ = (UniqueConstraint("target_id", "seq_id", name="uq_future_target_seq"),)
    request_id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    request_type: Mapped[str] = mapped_column(String(32))
    owner: Mapped[str] = mapped_column(String(64), index=True)
    target_id: Mapped[Optional[str]] = mapped_column(String(128), nullable=True)
    """The model or sampling session the request belongs to (with seq_id: the deduplication key)."""
    seq_id: Mapped[Optional[int]] = mapped_column(BigInteger, nullable=True)
    payload_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default=PENDING, index=True)
    result: Mapped[Optional[bytes]] = mapped_column(LargeBinary, nullable=True)
    result_is_proto: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[Optional[str]] = mapped_column(Text, nullable=True)
    error_category: Mapped[Optional[str]] = mapped_column(String(16), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime(timezone=True), nullable=True)


class SamplingSessionRow(_SessionClient, Base):
    """A sampling client: the base model and (optionally) the sampler weights it samples from."""

    __tablename__ = "sampling_sessions"
    sampling_session_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    model_path: Mapped[Optional[str]] = mapped_column(String(512), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CheckpointRow(Base):
    """A saved checkpoint: training state (`weights/`) or sampler weights (`sampler_weights/`)."""

    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("model_id", "kind", "name", name="uq_checkpoint"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[str] = mapped_column(String(128), index=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    """training | sampler"""
    name: Mapped[str] = mapped_column(String(256))
    tinker_path: Mapped[str] = mapped_column(String(512), unique=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    user_metadata: Mapped[Any] = mapped_column(JSON, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime(timezone=True), nullable=True)


def make_engine(url: str) -> Engine:
    """A SQLAlchemy engine for `url`; SQLite gets WAL mode, a 30 s busy timeout and cross-thread use."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, pool_pre_ping=True)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(connection: Any, _record: Any) -> None:
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=16, max_overflow=16)


class Database:
    """Sessions of the SQL database: `with db.session() as s: ...` commits on success."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def create_schema(self) -> None:
        """Bring the schema to the latest version (Alembic migrations)."""
        from skyrl_tx.migrations import upgrade

        upgrade(self.engine)

    def session(self) -> Any:
        """A transactional ORM session (use as a context manager; `.begin()` commits)."""
        return self._sessions.begin()

    def fail_unfinished(self, reason: str) -> int:
        """Mark every pending future failed (server-side) and every live model lost: called at start-up, after a
        stop or crash left them without a worker. Returns how many futures were failed."""
        with self.session() as s:
            rows = s.scalars(select(FutureRow).where(FutureRow.status == PENDING)).all()
            for row in rows:
                row.status, row.error, row.error_category, row.finished_at = FAILED, reason, "server", utcnow()
            for model in s.scalars(select(ModelRow).where(ModelRow.status.in_(["creating", "ready"]))).all():
                model.status = "lost"
            return len(rows)

    def record_checkpoint(
        self, owner: str, model_id: str, kind: str, name: str, path: str, size: int, metadata: dict[str, str]
    ) -> None:
        """Record a saved checkpoint (replacing the record of the one it overwrote)."""
        with self.session() as s:
            existing = s.scalars(select(CheckpointRow).where(CheckpointRow.tinker_path == path)).first()
            if existing is not None:
                s.delete(existing)
                s.flush()
            s.add(
                CheckpointRow(
                    model_id=model_id,
                    owner=owner,
                    kind=kind,
                    name=name,
                    tinker_path=path,
                    size_bytes=size,
                    user_metadata=metadata,
                )
            )

    def checkpoints_of(self, owner: str, model_id: Optional[str], limit: int, offset: int) -> tuple[list, int]:
        """A key's checkpoints (of one run, or all), newest first, and their total count."""
        return self._newest_first(CheckpointRow, CheckpointRow.id, owner, limit, offset, model_id=model_id)

    def runs_of(
        self, owner: str, limit: int, offset: int, session_id: Optional[str] = None
    ) -> tuple[list[ModelRow], int]:
        """A key's training runs (of one session, or all), newest first, and their total count."""
        return self._newest_first(ModelRow, ModelRow.created_at, owner, limit, offset, session_id=session_id)

    def _newest_first(
        self, table: type[Base], order_by: Any, owner: str, limit: int, offset: int, **match: Optional[str]
    ) -> tuple[list, int]:
        """One page (`limit` rows from `offset`) of a key's rows of `table` whose columns equal the `match` values
        that are not None, newest (largest `order_by`) first, and the total count of such rows."""
        query = select(table).where(table.owner == owner)
        for column, value in match.items():
            if value is not None:
                query = query.where(getattr(table, column) == value)
        with self.session() as s:
            total = s.scalar(select(func.count()).select_from(query.subquery()))
            rows = s.scalars(query.order_by(order_by.desc()).limit(limit).offset(offset)).all()
        return list(rows), int(total or 0)
