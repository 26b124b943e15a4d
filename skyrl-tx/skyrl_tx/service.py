"""The service's state and request handling, independent of HTTP: base models, sessions, training runs and the
compute queue here; its checkpoint and sampling requests in `skyrl_tx.service_checkpoints` and
`skyrl_tx.service_sampling`, which `Service` inherits. `skyrl_tx.app` maps the Tinker routes onto these methods.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import select

from skyrl_tx import checkpoint_files
from skyrl_tx.compute import ComputeHost, LoraHost, LoraSpec, Sampler
from skyrl_tx.compute_queue import ComputeQueue, Job
from skyrl_tx.db import CheckpointRow, Database, ModelRow, SessionRow, utcnow
from skyrl_tx.futures import FutureStore, Notifier, UserError, describe_failure, payload_hash
from skyrl_tx.limits import Limits, strict_int
from skyrl_tx.losses import loss_spec
from skyrl_tx.quotas import Quotas
from skyrl_tx.request_errors import NotFound, SessionEnded
from skyrl_tx.service_checkpoints import KEEP_EPHEMERAL, CheckpointRequests
from skyrl_tx.service_sampling import SamplingRequests
from skyrl_tx.wire import ForwardBackwardCall, encode_forward_backward_output

log = logging.getLogger("skyrl_tx")


def _aware(value: dt.datetime) -> dt.datetime:
    """`value` as an aware UTC datetime (SQLite hands back naive ones)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


@dataclass
class BaseModel:
    """A served base model: its public name, its folder, and the folder `get_info` names as tokenizer."""

    name: str
    path: str
    tokenizer_id: str
    host: Optional[ComputeHost] = None
    sampler: Optional[Sampler] = None
    """Where `sample` runs when it is not the host (`--sampler vllm`)."""


@dataclass
class Service(CheckpointRequests, SamplingRequests):
    """Everything a running server holds, and its requests: sessions, models and training here, checkpoints in
    `CheckpointRequests`, sampling in `SamplingRequests`."""

    db: Database
    checkpoint_dir: Path
    base_models: dict[str, BaseModel]
    notifier: Notifier = field(default_factory=Notifier)
    session_timeout_s: float = 300.0
    """Sessions without a heartbeat for this long are ended and their adapters unloaded (0: never)."""
    device: str = "cpu"
    """Where the base models, adapters and optimizers live (`cpu`, `cuda`, `cuda:1`, ...)."""
    dtype: str = "float32"
    """The base models' weight dtype."""
    make_host: Optional[Callable[[BaseModel], ComputeHost]] = None
    """Builds each base model's compute host; None: a `LoraHost` in this process on `device` (`--compute local`).
    `skyrl-tx serve --compute ray` passes one that builds a `RayLoraHost`."""
    make_sampler: Optional[Callable[[BaseModel], Sampler]] = None
    """Builds each base model's sampler once its host is up; None: the host samples (`--sampler hf`).
    `skyrl-tx serve --sampler vllm` passes one that builds a `VLLMSampler`."""
    limits: Limits = field(default_factory=Limits)
    """Per-request budgets and per-key quotas."""

    def __post_init__(self) -> None:
        self.futures = FutureStore(self.db, self.notifier)
        self.compute = ComputeQueue(self.futures, self._run_sample_batch)
        self.quotas = Quotas(self.db, self.compute, self.limits)
        self._ephemeral: dict[str, list[Path]] = {}
        self._stopping = threading.Event()

    # ----- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Migrate the database, fail what a previous process left unfinished, load the base models, start compute."""
        self.db.create_schema()
        failed = self.db.fail_unfinished("the server stopped while this request was in flight; resubmit it")
        if failed:
            log.warning("%d request(s) left unfinished by a previous server process were marked failed", failed)
        with self.db.session() as s:
            recorded = {
                (row.model_id, "weights" if row.kind == "training" else "sampler_weights", row.name)
                for row in s.scalars(select(CheckpointRow)).all()
            }
        self._ephemeral = checkpoint_files.sweep(self.checkpoint_dir / "runs", recorded, KEEP_EPHEMERAL)
        for base in self.base_models.values():
            if self.make_host is not None:
                base.host = self.make_host(base)
            else:
                base.host = LoraHost(base.name, base.path, device=self.device, dtype=self.dtype)
            if self.make_sampler is not None:
                base.sampler = self.make_sampler(base)
        self.compute.start()
        if self.session_timeout_s > 0:
            threading.Thread(target=self._expire_sessions_forever, name="skyrl-tx-sessions", daemon=True).start()

    def stop(self) -> None:
        """Stop the compute thread and the session sweeper, then close the compute hosts (Ray actors end)."""
        self._stopping.set()
        self.compute.stop()
        for base in self.base_models.values():
            if base.sampler is not None:
                base.sampler.close()
            if base.host is not None:
                base.host.close()

    def _expire_sessions_forever(self) -> None:
        while not self._stopping.wait(min(30.0, max(0.5, self.session_timeout_s / 4))):
            try:
                self.expire_sessions()
            except Exception:  # the sweep must outlive a database hiccup
                log.exception("session sweep failed")

    def expire_sessions(self) -> list[str]:
        """End every active session whose last heartbeat is older than `session_timeout_s`; returns their ids."""
        cutoff = utcnow() - dt.timedelta(seconds=self.session_timeout_s)
        with self.db.session() as s:
            rows = s.scalars(select(SessionRow).where(SessionRow.status == "active")).all()
            stale = [(row.owner, row.session_id) for row in rows if _aware(row.last_heartbeat_at) < cutoff]
        for owner, session_id in stale:
            log.info(
                "session %s sent no heartbeat for %.0f s: unloading its models", session_id, self.session_timeout_s
            )
            self.end_session(owner, session_id, "expired")
        return [session_id for _, session_id in stale]

    def host(self, base_model: str) -> ComputeHost:
        """The compute host of a served base model; unknown names are refused listing the served ones."""
        base = self.base_models.get(base_model)
        if base is None or base.host is None:
            raise UserError(f"base_model {base_model!r} is not served here; served: {sorted(self.base_models)}")
        return base.host

    # ----- sessions ----------------------------------------------------------------------------------------------
    def create_session(self, owner: str, body: dict[str, Any]) -> str:
        """A new session id (hex, so model ids `{session}:train:{n}` parse unambiguously); a key holds at most
        `max_sessions_per_key` active sessions."""
        tags, metadata = self.limits.check_metadata(body)
        sdk_version = body.get("sdk_version")
        if sdk_version is not None and (not isinstance(sdk_version, str) or len(sdk_version) > 32):
            raise UserError("sdk_version must be a string of at most 32 characters")
        self.quotas.admit_session(owner)
        session_id = uuid.uuid4().hex[:16]
        with self.db.session() as s:
            s.add(
                SessionRow(
                    session_id=session_id, owner=owner, tags=tags, user_metadata=metadata, sdk_version=sdk_version
                )
            )
        return session_id

    def _owned(self, table: Any, key: str, owner: str, what: str) -> Any:
        """The row of `table` with primary key `key` if the caller's key created it, else `NotFound`."""
        with self.db.session() as s:
            row = s.get(table, key)
        if row is None or row.owner != owner:
            raise NotFound(f"{what} {key!r} not found")
        return row

    def session_row(self, owner: str, session_id: str) -> SessionRow:
        """The caller's session, or `NotFound`."""
        return self._owned(SessionRow, session_id, owner, "session")

    def heartbeat(self, owner: str, session_id: str) -> None:
        """Record a heartbeat; an ended session is told so (410 stops the client's heartbeats)."""
        if self.session_row(owner, session_id).status != "active":
            raise SessionEnded(f"session {session_id} has ended; create a new ServiceClient")
        with self.db.session() as s:
            s.get(SessionRow, session_id).last_heartbeat_at = utcnow()

    def end_session(self, owner: str, session_id: str, status: str) -> None:
        """Mark a session ended (`status`: finished by the client, or expired) and unload its models' adapters, each after
        the requests already queued for it. Their checkpoints stay; a new client loads them."""
        self.session_row(owner, session_id)
        with self.db.session() as s:
            s.get(SessionRow, session_id).status = status
            models = s.scalars(
                select(ModelRow).where(ModelRow.session_id == session_id, ModelRow.status.in_(["creating", "ready"]))
            ).all()
            targets = [(model.model_id, model.base_model) for model in models]
        for model_id, base_model in targets:

            def unload(model_id: str = model_id, base_model: str = base_model) -> tuple[bytes, bool]:
                self.host(base_model).remove_adapter(model_id)
                self._set_model(model_id, status="closed")
                return b"", False

            self.compute.put(Job(None, "unload", unload, owner=owner))

    # ----- models ------------------------------------------------------------------------------------------------
    def model_row(self, owner: str, model_id: str) -> ModelRow:
        """The caller's model, or `NotFound`."""
        return self._owned(ModelRow, model_id, owner, "model")

    def _usable_model(self, owner: str, model_id: str) -> ModelRow:
        row = self.model_row(owner, model_id)
        if row.status == "lost":
            raise UserError(
                f"model {model_id!r} was in memory when the server restarted and its weights are gone; continue from "
                "its last checkpoint with create_training_client_from_state_with_optimizer(path)"
            )
        if row.status == "failed":
            raise UserError(f"model {model_id!r} failed to be created or loaded")
        if row.status == "closed":
            ended = self.session_row(owner, row.session_id).status
            raise UserError(
                f"model {model_id!r} was unloaded when its session {ended} (closed by the client, or no heartbeat "
                f"for {self.session_timeout_s:g} s); load its last checkpoint with "
                "create_training_client_from_state_with_optimizer(path)"
            )
        return row

    def create_model(self, owner: str, body: dict[str, Any], raw: bytes) -> tuple[int, str]:
        """Queue the creation of a LoRA training client; returns (request_id, model_id)."""
        session_id, seq = body["session_id"], strict_int("model_seq_id", body["model_seq_id"])
        self.session_row(owner, session_id)
        base_model = body["base_model"]
        self.host(base_model)
        spec = self.limits.lora_spec(body.get("lora_config"))
        optimizer = (body.get("optimizer_config") or {}).get("type", "adamw")
        if optimizer != "adamw":
            raise UserError(f"optimizer_config.type {optimizer!r} is not supported; this server trains with adamw")
        model_id = f"{session_id}:train:{seq}"
        return self._new_model(owner, session_id, model_id, base_model, spec, body, raw, "create_model", None), model_id

    # ----- quotas and queueing -------------------------------------------------------------------------------------
    def _queue(
        self,
        kind: str,
        owner: str,
        target: Optional[str],
        seq_id: Optional[int],
        raw: bytes,
        make_job: Callable[[int], Job],
        admit: Optional[Callable[[], None]] = None,
    ) -> int:
        """Submit a future (quotas checked first) and queue its job; a resubmission of a request returns its id and
        queues nothing unless that request failed on the server's side. If anything fails between storing the
        future and queueing the job, the future is marked failed, so no future is left pending without a job."""

        def admitted() -> None:
            if admit is not None:
                admit()
            self.quotas.admit_job(owner)

        request_id, new = self.futures.submit(kind, owner, target, seq_id, payload_hash(raw), admitted)
        if new:
            try:
                self.compute.put(make_job(request_id))
            except BaseException as exc:
                failure = describe_failure(exc)
                self.futures.fail(request_id, failure["error"], failure["category"])
                raise
        return request_id

    def _new_model(
        self,
        owner: str,
        session_id: str,
        model_id: str,
        base_model: str,
        spec: LoraSpec,
        body: dict[str, Any],
        raw: bytes,
        kind: str,
        source: Optional[tuple[Path, bool, str]],
    ) -> int:
        _, metadata = self.limits.check_metadata({"user_metadata": body.get("user_metadata")})
        host = self.host(base_model)

        def run() -> tuple[bytes, bool]:
            try:
                if source is None:
                    host.add_adapter(model_id, spec)
                    result: dict[str, Any] = {"model_id": model_id}
                else:
                    directory, with_optimizer, path = source
                    loaded = host.load(model_id, directory, with_optimizer)
                    self._set_model(model_id, lora_config=loaded.to_dict())
                    result = {"model_id": model_id, "path": path, "type": "load_weights"}
            except Exception:
                self._set_model(model_id, status="failed")
                raise
            self._set_model(model_id, status="ready")
            return json.dumps(result).encode(), False

        def make_job(request_id: int) -> Job:
            with self.db.session() as s:
                row = s.get(ModelRow, model_id)
                if row is None:
                    s.add(
                        ModelRow(
                            model_id=model_id,
                            session_id=session_id,
                            owner=owner,
                            base_model=base_model,
                            lora_config=spec.to_dict(),
                            user_metadata=metadata,
                        )
                    )
                else:  # a rerun of a request the server failed (a restart): the model is made again
                    row.status = "creating"
            return Job(request_id, kind, run, owner=owner)

        return self._queue(
            kind, owner, model_id, 0, raw, make_job, admit=lambda: self.quotas.admit_adapter(owner, spec.rank)
        )

    def _set_model(self, model_id: str, **values: Any) -> None:
        with self.db.session() as s:
            row = s.get(ModelRow, model_id)
            for key, value in values.items():
                setattr(row, key, value)
            row.last_request_at = utcnow()

    def get_info(self, owner: str, model_id: str) -> dict[str, Any]:
        """Tinker's `GetInfoResponse` for a training client."""
        row = self.model_row(owner, model_id)
        base = self.base_models[row.base_model]
        host = self.host(row.base_model)
        return {
            "type": "get_info",
            "model_id": model_id,
            "model_data": {
                "model_name": row.base_model,
                "arch": host.model_type,
                "tokenizer_id": base.tokenizer_id,
            },
            "is_lora": True,
            "lora_rank": row.lora_config["rank"],
            "model_name": row.base_model,
        }

    # ----- training ----------------------------------------------------------------------------------------------
    def _training_job(
        self,
        owner: str,
        model_id: str,
        seq_id: Any,
        kind: str,
        raw: bytes,
        run: Any,
        admit: Optional[Callable[[], None]] = None,
    ) -> int:
        row = self._usable_model(owner, model_id)
        seq = strict_int("seq_id", seq_id)
        return self._queue(
            kind, owner, model_id, seq, raw, lambda rid: Job(rid, kind, lambda: run(row), owner=owner), admit
        )

    def forward_backward(self, owner: str, call: ForwardBackwardCall, raw: bytes) -> int:
        """Queue a forward(_backward) chunk; its result is a `ForwardBackwardOutput` protobuf. The loss name and
        config, the batch budgets and the context length are checked now (HTTP 400 naming them); token ids and
        input lengths when the chunk runs."""
        loss_spec(call.loss_fn, call.loss_fn_config)
        self.limits.check_batch(call.data, self.host(self.model_row(owner, call.model_id).base_model).max_context)

        def run(row: ModelRow) -> tuple[bytes, bool]:
            host = self.host(row.base_model)
            outputs, metrics = host.forward_backward(
                call.model_id, call.data, call.loss_fn, call.loss_fn_config, call.forward_only
            )
            self._set_model(call.model_id)
            return encode_forward_backward_output(outputs, metrics), True

        kind = "forward" if call.forward_only else "forward_backward"
        return self._training_job(owner, call.model_id, call.seq_id, kind, raw, run)

    def optim_step(self, owner: str, body: dict[str, Any], raw: bytes) -> int:
        """Queue an AdamW step with every `AdamParams` field."""
        adam = body.get("adam_params")
        if adam is None:
            raise UserError("optim_step: adam_params is required (this server trains with AdamW only)")
        defaults = {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0.0}
        params = {**defaults, "grad_clip_norm": 0.0, **{k: float(v) for k, v in adam.items()}}
        unknown = sorted(set(params) - set(defaults) - {"grad_clip_norm"})
        if unknown:
            raise UserError(f"adam_params: unknown fields {unknown}")
        if params["learning_rate"] < 0 or not 0 <= params["beta1"] < 1 or not 0 <= params["beta2"] < 1:
            raise UserError(f"adam_params: need learning_rate >= 0 and betas in [0, 1), got {params}")

        def run(row: ModelRow) -> tuple[bytes, bool]:
            metrics = self.host(row.base_model).optim_step(body["model_id"], params)
            self._set_model(body["model_id"])
            return json.dumps({"metrics": metrics}).encode(), False

        return self._training_job(owner, body["model_id"], body["seq_id"], "optim_step", raw, run)

    def status(self, owner: str) -> dict[str, int]:
        """What one key has at the server now: its requests waiting for compute and its adapters in memory."""
        in_memory = {name for base in self.base_models.values() if base.host is not None for name in base.host.adapters}
        with self.db.session() as s:
            mine = set(s.scalars(select(ModelRow.model_id).where(ModelRow.owner == owner)).all())
        return {"queued": self.compute.waiting(owner), "adapters": len(in_memory & mine)}
