"""The service's checkpoint requests: save a training client's state or sampler weights into a tinker path, load
one into a new or existing client, resolve a path the caller owns to its folder, and delete one. Part of `Service`
(`skyrl_tx.service`), whose database, hosts and queue these methods use."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from skyrl_tx import checkpoint_files
from skyrl_tx.compute import read_meta
from skyrl_tx.db import CheckpointRow, ModelRow
from skyrl_tx.futures import UserError
from skyrl_tx.limits import strict_int
from skyrl_tx.request_errors import NotFound
from skyrl_tx.tinker_paths import CHECKPOINT_NAME, SEGMENTS, TinkerPath

if TYPE_CHECKING:
    from skyrl_tx.service import Service

KEEP_EPHEMERAL = 4
"""Unnamed sampler weights (`save_weights_and_get_sampling_client`) kept per model; older ones are deleted."""


class CheckpointRequests:
    """`Service`'s checkpoint requests (see the module docstring)."""

    def _checkpoint_dir(self: Service, path: TinkerPath) -> Path:
        return self.checkpoint_dir / "runs" / path.model_id / path.segment / path.name

    def save(self: Service, owner: str, body: dict[str, Any], raw: bytes, for_sampler: bool) -> int:
        """Queue save_weights (training state with optimizer) or save_weights_for_sampler (adapter only). A sampler
        save without a name is ephemeral (for `save_weights_and_get_sampling_client`) and answers with a sampling
        session."""
        model_id = body["model_id"]
        name = body.get("path")
        if name is not None and (not isinstance(name, str) or not CHECKPOINT_NAME.match(name)):
            raise UserError(f"path (checkpoint name) {name!r} must match {CHECKPOINT_NAME.pattern}")
        if name is None and not for_sampler:
            raise UserError("save_weights: path (the checkpoint name) is required")
        _, metadata = self.limits.check_metadata({"user_metadata": body.get("user_metadata")})
        segment = "sampler_weights" if for_sampler else "weights"
        ephemeral = name is None
        seq_id = strict_int("seq_id", body["seq_id"])
        target = TinkerPath(model_id, segment, name or f"{checkpoint_files.EPHEMERAL}{seq_id}")
        kind = "save_weights_for_sampler" if for_sampler else "save_weights"

        def run(row: ModelRow) -> tuple[bytes, bool]:
            final = self._checkpoint_dir(target)
            if final.exists() and not ephemeral and not body.get("overwrite"):
                raise UserError(f"checkpoint {target} exists; save under another name or pass overwrite=True")
            staging = checkpoint_files.staging_folder(final)
            try:
                size = self.host(row.base_model).save(model_id, staging, with_optimizer=not for_sampler)
                old = checkpoint_files.swap_in(staging, final)  # a reader sees the old folder or the new one
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            result: dict[str, Any] = {"path": str(target), "type": kind}
            if ephemeral:
                self._keep_ephemeral(model_id, final)
                session = self._sampling_session(
                    owner, row.session_id, body.get("sampling_session_seq_id"), row.base_model, str(target)
                )
                result = {"sampling_session_id": session, "type": kind}
            else:
                self.db.record_checkpoint(
                    owner, target.model_id, SEGMENTS[target.segment], target.name, str(target), size, metadata
                )
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            self._set_model(model_id)
            return json.dumps(result).encode(), False

        admit = None if ephemeral else (lambda: self.quotas.admit_checkpoint(owner, target))
        return self._training_job(owner, model_id, seq_id, kind, raw, run, admit)

    def _keep_ephemeral(self: Service, model_id: str, folder: Path) -> None:
        kept = self._ephemeral.setdefault(model_id, [])
        if folder in kept:
            kept.remove(folder)
        kept.append(folder)
        while len(kept) > KEEP_EPHEMERAL:
            shutil.rmtree(kept.pop(0), ignore_errors=True)

    def checkpoint(self: Service, owner: str, path: str) -> tuple[TinkerPath, Path, CheckpointRow | ModelRow]:
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

    def load_weights(self: Service, owner: str, body: dict[str, Any], raw: bytes) -> tuple[int, str]:
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

            return self._training_job(owner, model_id, body["seq_id"], "load_weights", raw, run), model_id
        session_id = body["session_id"]
        self.session_row(owner, session_id)
        base_model = body.get("base_model") or meta["base_model"]
        if base_model != meta["base_model"]:
            raise UserError(f"base_model {base_model!r} differs from the checkpoint's {meta['base_model']!r}")
        model_id = f"{session_id}:train:{strict_int('model_seq_id', body['model_seq_id'])}"
        spec = self.limits.lora_spec(meta["lora"])
        source = (folder, with_optimizer, str(parsed))
        return (
            self._new_model(owner, session_id, model_id, base_model, spec, body, raw, "load_weights", source),
            model_id,
        )

    def delete_checkpoint(self: Service, owner: str, model_id: str, checkpoint: str) -> None:
        """Delete a checkpoint's files and record (`checkpoint` is `weights/<name>` or `sampler_weights/<name>`)."""
        parsed, folder, row = self.checkpoint(owner, f"tinker://{model_id}/{checkpoint}")
        if not isinstance(row, CheckpointRow):
            raise NotFound(f"checkpoint {parsed} not found")
        with self.db.session() as s:  # the row first: a crash before the folder goes leaves one the start-up sweeps
            s.delete(s.get(CheckpointRow, row.id))
        shutil.rmtree(folder, ignore_errors=True)
