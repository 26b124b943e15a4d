"""The service's state and request handling, independent of HTTP: base models, training runs, checkpoints, sampling
sessions and the compute queue. `skyrl_tx.app` maps the Tinker routes onto these methods.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import func, select

from skyrl_tx.compute import ComputeHost, LoraHost, LoraSpec, Sampler, read_meta
from skyrl_tx.compute_queue import ComputeQueue, Job
from skyrl_tx.db import CheckpointRow, Database, ModelRow, SamplingSessionRow, SessionRow, utcnow
from skyrl_tx.futures import FutureStore, Notifier, UserError, payload_hash
from skyrl_tx.losses import loss_spec
from skyrl_tx.sample_requests import parse_sample_request
from skyrl_tx.tinker_paths import CHECKPOINT_NAME, SEGMENTS, TinkerPath
from skyrl_tx.wire import ForwardBackwardCall, encode_forward_backward_output, encode_sample_response

log = logging.getLogger("skyrl_tx")

KEEP_EPHEMERAL = 4
"""Unnamed sampler weights (`save_weights_and_get_sampling_client`) kept per model; older ones are deleted."""


class NotFound(LookupError):
    """An id or path the caller does not own or that does not exist (HTTP 404)."""


class SessionEnded(RuntimeError):
    """A heartbeat for a session that was finished or expired (HTTP 410: the client stops heartbeating)."""


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
class Service:
    """Everything a running server holds."""

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

    def __post_init__(self) -> None:
        self.futures = FutureStore(self.db, self.notifier)
        self.compute = ComputeQueue(self.futures, self._run_sample_batch)
        self._ephemeral: dict[str, list[Path]] = {}
        self._stopping = threading.Event()

    # ----- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Migrate the database, fail what a previous process left unfinished, load the base models, start compute."""
        self.db.create_schema()
        failed = self.db.fail_unfinished("the server stopped while this request was in flight; resubmit it")
        if failed:
            log.warning("%d request(s) left unfinished by a previous server process were marked failed", failed)
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
        """A new session id (hex, so model ids `{session}:train:{n}` parse unambiguously)."""
        session_id = uuid.uuid4().hex[:16]
        with self.db.session() as s:
            s.add(
                SessionRow(
                    session_id=session_id,
                    owner=owner,
                    tags=list(body.get("tags") or []),
                    user_metadata=dict(body.get("user_metadata") or {}),
                    sdk_version=body.get("sdk_version"),
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

            self.compute.put(Job(None, "unload", unload))

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
        session_id, seq = body["session_id"], int(body["model_seq_id"])
        self.session_row(owner, session_id)
        base_model = body["base_model"]
        self.host(base_model)
        lora = dict(body.get("lora_config") or {})
        spec = LoraSpec(
            rank=int(lora.get("rank", 32)),
            seed=lora.get("seed"),
            train_mlp=bool(lora.get("train_mlp", True)),
            train_attn=bool(lora.get("train_attn", True)),
            train_unembed=bool(lora.get("train_unembed", True)),
        )
        optimizer = (body.get("optimizer_config") or {}).get("type", "adamw")
        if optimizer != "adamw":
            raise UserError(f"optimizer_config.type {optimizer!r} is not supported; this server trains with adamw")
        model_id = f"{session_id}:train:{seq}"
        return self._new_model(owner, session_id, model_id, base_model, spec, body, raw, "create_model", None), model_id

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
        request_id, new = self.futures.submit(kind, owner, model_id, 0, payload_hash(raw))
        if not new:
            return request_id
        with self.db.session() as s:
            if s.get(ModelRow, model_id) is None:
                s.add(
                    ModelRow(
                        model_id=model_id,
                        session_id=session_id,
                        owner=owner,
                        base_model=base_model,
                        lora_config=spec.to_dict(),
                        user_metadata={str(k): str(v) for k, v in (body.get("user_metadata") or {}).items()},
                    )
                )
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

        self.compute.put(Job(request_id, kind, run))
        return request_id

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
    def _training_job(self, owner: str, model_id: str, seq_id: int, kind: str, raw: bytes, run: Any) -> int:
        row = self._usable_model(owner, model_id)
        request_id, new = self.futures.submit(kind, owner, model_id, seq_id, payload_hash(raw))
        if new:
            self.compute.put(Job(request_id, kind, lambda: run(row)))
        return request_id

    def forward_backward(self, owner: str, call: ForwardBackwardCall, raw: bytes) -> int:
        """Queue a forward(_backward) chunk; its result is a `ForwardBackwardOutput` protobuf. The loss name and
        config are checked now (HTTP 400 naming them); shapes and token ids when the chunk runs."""
        loss_spec(call.loss_fn, call.loss_fn_config)
        if not call.data:
            raise UserError("forward_backward: data is empty")

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

        return self._training_job(owner, body["model_id"], int(body["seq_id"]), "optim_step", raw, run)

    # ----- checkpoints -------------------------------------------------------------------------------------------
    def _checkpoint_dir(self, path: TinkerPath) -> Path:
        return self.checkpoint_dir / "runs" / path.model_id / path.segment / path.name

    def save(self, owner: str, body: dict[str, Any], raw: bytes, for_sampler: bool) -> int:
        """Queue save_weights (training state with optimizer) or save_weights_for_sampler (adapter only). A sampler
        save without a name is ephemeral (for `save_weights_and_get_sampling_client`) and answers with a sampling
        session."""
        model_id = body["model_id"]
        name = body.get("path")
        if name is not None and not CHECKPOINT_NAME.match(name):
            raise UserError(f"path (checkpoint name) {name!r} must match {CHECKPOINT_NAME.pattern}")
        if name is None and not for_sampler:
            raise UserError("save_weights: path (the checkpoint name) is required")
        segment = "sampler_weights" if for_sampler else "weights"
        ephemeral = name is None
        seq_id = int(body["seq_id"])
        target = TinkerPath(model_id, segment, name or f"ephemeral-{seq_id}")
        kind = "save_weights_for_sampler" if for_sampler else "save_weights"

        def run(row: ModelRow) -> tuple[bytes, bool]:
            final = self._checkpoint_dir(target)
            if final.exists() and not ephemeral and not body.get("overwrite"):
                raise UserError(f"checkpoint {target} exists; save under another name or pass overwrite=True")
            staging = final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}")
            size = self.host(row.base_model).save(model_id, staging, with_optimizer=not for_sampler)
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)  # atomic: a reader sees the old folder or the complete new one
            result: dict[str, Any] = {"path": str(target), "type": kind}
            if ephemeral:
                self._keep_ephemeral(model_id, final)
                session = self._sampling_session(
                    owner, row.session_id, body.get("sampling_session_seq_id"), row.base_model, str(target)
                )
                result = {"sampling_session_id": session, "type": kind}
            else:
                self._record_checkpoint(owner, target, size, body)
            self._set_model(model_id)
            return json.dumps(result).encode(), False

        return self._training_job(owner, model_id, seq_id, kind, raw, run)

    def _keep_ephemeral(self, model_id: str, folder: Path) -> None:
        kept = self._ephemeral.setdefault(model_id, [])
        kept.append(folder)
        while len(kept) > KEEP_EPHEMERAL:
            shutil.rmtree(kept.pop(0), ignore_errors=True)

    def _record_checkpoint(self, owner: str, target: TinkerPath, size: int, body: dict[str, Any]) -> None:
        with self.db.session() as s:
            existing = s.scalars(select(CheckpointRow).where(CheckpointRow.tinker_path == str(target))).first()
            if existing is not None:
                s.delete(existing)
                s.flush()
            s.add(
                CheckpointRow(
                    model_id=target.model_id,
                    owner=owner,
                    kind=SEGMENTS[target.segment],
                    name=target.name,
                    tinker_path=str(target),
                    size_bytes=size,
                    user_metadata={str(k): str(v) for k, v in (body.get("user_metadata") or {}).items()},
                )
            )

    def checkpoint(self, owner: str, path: str) -> tuple[TinkerPath, Path, CheckpointRow | ModelRow]:
        """Resolve a tinker path the caller owns to its folder (listed checkpoints and live ephemeral ones)."""
        parsed = TinkerPath.parse(path)
        with self.db.session() as s:
            row = s.scalars(select(CheckpointRow).where(CheckpointRow.tinker_path == str(parsed))).first()
        folder = self._checkpoint_dir(parsed)
        if row is not None and row.owner == owner and folder.is_dir():
            return parsed, folder, row
        if row is None and parsed.name.startswith("ephemeral-") and folder.is_dir():
            return parsed, folder, self.model_row(owner, parsed.model_id)
        raise NotFound(f"checkpoint {path!r} not found")

    def load_weights(self, owner: str, body: dict[str, Any], raw: bytes) -> tuple[int, str]:
        """Queue `load_weights`: a new training client `{session}:train:{n}` from a checkpoint (with or without its
        optimizer), or (deprecated `load_state`) new weights for an existing client."""
        parsed, folder, _ = self.checkpoint(owner, body["path"])
        if parsed.segment != "weights":
            raise UserError(f"load_weights needs a training checkpoint (tinker://.../weights/...), got {parsed}")
        meta = read_meta(folder)
        with_optimizer = bool(body.get("optimizer"))
        if body.get("model_id"):
            model_id = body["model_id"]

            def run(current: ModelRow) -> tuple[bytes, bool]:
                host = self.host(current.base_model)
                host.remove_adapter(model_id)
                spec = host.load(model_id, folder, with_optimizer)
                self._set_model(model_id, lora_config=spec.to_dict())
                return json.dumps({"path": str(parsed), "model_id": model_id, "type": "load_weights"}).encode(), False

            return self._training_job(owner, model_id, int(body["seq_id"]), "load_weights", raw, run), model_id
        session_id = body["session_id"]
        self.session_row(owner, session_id)
        base_model = body.get("base_model") or meta["base_model"]
        if base_model != meta["base_model"]:
            raise UserError(f"base_model {base_model!r} differs from the checkpoint's {meta['base_model']!r}")
        model_id = f"{session_id}:train:{int(body['model_seq_id'])}"
        spec = LoraSpec(**meta["lora"])
        source = (folder, with_optimizer, str(parsed))
        return (
            self._new_model(owner, session_id, model_id, base_model, spec, body, raw, "load_weights", source),
            model_id,
        )

    # ----- sampling ----------------------------------------------------------------------------------------------
    def _sampling_session(
        self, owner: str, session_id: str, seq: Optional[int], base_model: str, model_path: Optional[str]
    ) -> str:
        sampling_id = f"{session_id}:sample:{seq if seq is not None else uuid.uuid4().hex[:8]}"
        with self.db.session() as s:
            existing = s.get(SamplingSessionRow, sampling_id)
            if existing is None:
                s.add(
                    SamplingSessionRow(
                        sampling_session_id=sampling_id,
                        session_id=session_id,
                        owner=owner,
                        base_model=base_model,
                        model_path=model_path,
                    )
                )
            else:
                existing.base_model, existing.model_path = base_model, model_path
        return sampling_id

    def create_sampling_session(self, owner: str, body: dict[str, Any]) -> str:
        """A sampling session on sampler weights (`model_path`) or on a base model."""
        session_id = body["session_id"]
        self.session_row(owner, session_id)
        model_path, base_model = body.get("model_path"), body.get("base_model")
        if model_path:
            parsed, folder, _ = self.checkpoint(owner, model_path)
            base_model = read_meta(folder)["base_model"]
            model_path = str(parsed)
        elif not base_model:
            raise UserError("create_sampling_session needs model_path or base_model")
        self.host(base_model)
        return self._sampling_session(owner, session_id, body.get("sampling_session_seq_id"), base_model, model_path)

    def sampler(self, owner: str, sampling_session_id: str) -> SamplingSessionRow:
        """The caller's sampling session, or `NotFound`."""
        return self._owned(SamplingSessionRow, sampling_session_id, owner, "sampler")

    def asample(self, owner: str, body: dict[str, Any], raw: bytes) -> tuple[int, int]:
        """Queue a sample request; returns (request_id, num_samples)."""
        if body.get("sampling_session_id"):
            session = self.sampler(owner, body["sampling_session_id"])
            base_model, model_path = session.base_model, session.model_path
            target, seq_id = session.sampling_session_id, body.get("seq_id")
        else:
            base_model, model_path, target, seq_id = body.get("base_model"), body.get("model_path"), None, None
        folder = self.checkpoint(owner, model_path)[1] if model_path else None
        if folder is not None:
            base_model = read_meta(folder)["base_model"]
        if not base_model:
            raise UserError("asample needs sampling_session_id, model_path or base_model")
        host = self.host(base_model)
        job = parse_sample_request(body, host)
        request_id, new = self.futures.submit("sample", owner, target, seq_id, payload_hash(raw))
        if new:
            self.compute.put(Job(request_id, "sample", batch_key=(base_model, folder), payload=job))
        return request_id, job.num_samples

    def _run_sample_batch(self, key: Any, jobs: list[Job]) -> list[Any]:
        base_model, folder = key
        sampler = self.base_models[base_model].sampler or self.host(base_model)
        results = sampler.sample(folder, [job.payload for job in jobs])
        return [
            (
                encode_sample_response(
                    result.sequences, result.prompt_logprobs, result.topk_prompt, job.payload.topk_prompt_logprobs
                ),
                True,
            )
            for job, result in zip(jobs, results)
        ]

    # ----- listing -----------------------------------------------------------------------------------------------
    def checkpoints_of(self, owner: str, model_id: Optional[str], limit: int, offset: int) -> tuple[list, int]:
        """The caller's checkpoints (of one run, or all), newest first, and their total count."""
        with self.db.session() as s:
            query = select(CheckpointRow).where(CheckpointRow.owner == owner)
            if model_id is not None:
                query = query.where(CheckpointRow.model_id == model_id)
            total = s.scalar(select(func.count()).select_from(query.subquery()))
            rows = s.scalars(query.order_by(CheckpointRow.id.desc()).limit(limit).offset(offset)).all()
        return list(rows), int(total or 0)

    def runs_of(
        self, owner: str, limit: int, offset: int, session_id: Optional[str] = None
    ) -> tuple[list[ModelRow], int]:
        """The caller's training runs (of one session, or all), newest first, and their total count."""
        with self.db.session() as s:
            query = select(ModelRow).where(ModelRow.owner == owner)
            if session_id is not None:
                query = query.where(ModelRow.session_id == session_id)
            total = s.scalar(select(func.count()).select_from(query.subquery()))
            rows = s.scalars(query.order_by(ModelRow.created_at.desc()).limit(limit).offset(offset)).all()
        return list(rows), int(total or 0)

    def delete_checkpoint(self, owner: str, model_id: str, checkpoint: str) -> None:
        """Delete a checkpoint's files and record (`checkpoint` is `weights/<name>` or `sampler_weights/<name>`)."""
        parsed, folder, row = self.checkpoint(owner, f"tinker://{model_id}/{checkpoint}")
        if not isinstance(row, CheckpointRow):
            raise NotFound(f"checkpoint {parsed} not found")
        shutil.rmtree(folder, ignore_errors=True)
        with self.db.session() as s:
            s.delete(s.get(CheckpointRow, row.id))
