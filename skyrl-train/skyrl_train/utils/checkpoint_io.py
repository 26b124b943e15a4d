"""Atomic, verifiable checkpoint directories: write, commit, find the newest valid one, prune, and pick a resume point.

Layout under a checkpoint root (a local path or an fsspec URL such as `s3://bucket/run` or `memory://run`):

    global_step_N.tmp-<id>/      while being written (ignored by readers, removed by `prune`)
    global_step_N/               after `commit_checkpoint` renamed it
    global_step_N/COMPLETE       manifest written last inside the directory: file list, sizes, sha256 of small files
    latest_checkpointed_step.txt written after the manifest (atomic replace); a hint for humans and tools

A checkpoint is valid only when its manifest exists and every listed file exists with the listed size (and hash).
A crash at any moment therefore leaves either the previous valid checkpoint as the newest valid one, or the new one
complete; `latest_valid` walks back over anything half-written and logs why it skipped it.

The trainer calls `begin_checkpoint` -> writes files into the returned directory -> `commit_checkpoint`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

logger = logging.getLogger(__name__)

STEP_DIR_PREFIX = "global_step_"
"""Name prefix of a committed checkpoint directory; the global step follows it."""

MANIFEST_FILE = "COMPLETE"
"""Manifest inside a committed checkpoint; its presence (and agreement with the files) makes the checkpoint valid."""

LATEST_MARKER_FILE = "latest_checkpointed_step.txt"
"""File at the checkpoint root holding the global step of the last committed checkpoint."""

TMP_INFIX = ".tmp-"
"""Separates the step directory name from the random id of a directory still being written."""

MANIFEST_VERSION = 1
"""Layout version of the manifest."""

DEFAULT_HASH_MAX_BYTES = 16 * 1024 * 1024
"""Files up to this size get a sha256 in the manifest; larger ones (model shards) are checked by size only."""

_STEP_DIR_RE = re.compile(rf"^{STEP_DIR_PREFIX}(\d+)$")
_TMP_DIR_RE = re.compile(rf"^{STEP_DIR_PREFIX}(\d+)(?:{re.escape(TMP_INFIX)}|\.old-)[0-9a-f]+$")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written, found or trusted; the message names the path and what is wrong."""


@dataclass(frozen=True)
class CheckpointEntry:
    """One directory under a checkpoint root: its step, its path or URL, and whether it is a leftover temp dir."""

    step: int
    path: str
    temporary: bool


def open_fs(path_or_url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and the filesystem-internal path of a local path (`~` expanded) or an fsspec URL."""
    if "://" not in path_or_url:
        path_or_url = os.path.abspath(os.path.expanduser(path_or_url))
    return url_to_fs(path_or_url)


def public_path(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The path callers see: a plain path for local files, a full URL otherwise."""
    return path if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(path)


def _join(*parts: str) -> str:
    return "/".join(p.rstrip("/") for p in parts)


def _fsync_path(path: str) -> None:
    """Flush a local file or directory to disk (best effort for directories on filesystems that refuse it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        if not os.path.isdir(path):
            raise
    finally:
        os.close(fd)


def _write_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Replace `path` with `data` so readers see the old or the new content, never a mix.

    Local files go through a temp file, fsync and `os.replace`; object stores write whole objects atomically.
    """
    if not isinstance(fs, LocalFileSystem):
        fs.pipe_file(path, data)
        return
    tmp_path = f"{path}{TMP_INFIX}{uuid.uuid4().hex[:8]}"
    with open(tmp_path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp_path, path)
    _fsync_path(os.path.dirname(path))


def _sha256(fs: fsspec.AbstractFileSystem, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _list_files(fs: fsspec.AbstractFileSystem, directory: str) -> dict[str, int]:
    """Relative posix path -> size of every file under `directory` (the manifest itself excluded)."""
    base = directory.rstrip("/") + "/"
    found = fs.find(directory, detail=True)
    files = {}
    for path, info in found.items():
        if info.get("type") != "file":
            continue
        relative = path[len(base) :] if path.startswith(base) else os.path.relpath(path, directory)
        if relative != MANIFEST_FILE:
            files[relative] = int(info["size"])
    return files


def checkpoint_dir_name(step: int) -> str:
    """`global_step_<step>`: the directory name of the checkpoint of a global step."""
    if not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    return f"{STEP_DIR_PREFIX}{step}"


def checkpoint_step(path: str) -> int:
    """The global step of a committed checkpoint path (`.../global_step_N`); ValueError for any other name."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    match = _STEP_DIR_RE.match(name)
    if match is None:
        raise ValueError(f"checkpoint path {path!r} does not end in a '{STEP_DIR_PREFIX}<step>' directory")
    return int(match.group(1))


def begin_checkpoint(root: str, step: int) -> str:
    """Create and return a fresh temp directory `<root>/global_step_<step>.tmp-<id>` to write a checkpoint into."""
    fs, root_path = open_fs(root)
    tmp_path = _join(root_path, f"{checkpoint_dir_name(step)}{TMP_INFIX}{uuid.uuid4().hex[:12]}")
    fs.makedirs(tmp_path, exist_ok=False)
    return public_path(fs, tmp_path)


def build_manifest(directory: str, step: int, hash_max_bytes: int = DEFAULT_HASH_MAX_BYTES) -> dict[str, Any]:
    """The manifest of the files now in `directory`: relative path -> size, plus sha256 for files up to the limit."""
    fs, path = open_fs(directory)
    files = {}
    for relative, size in sorted(_list_files(fs, path).items()):
        digest = _sha256(fs, _join(path, relative)) if size <= hash_max_bytes else None
        files[relative] = {"size": size, "sha256": digest}
    return {"version": MANIFEST_VERSION, "step": step, "files": files}


def commit_checkpoint(root: str, step: int, tmp_dir: str, hash_max_bytes: int = DEFAULT_HASH_MAX_BYTES) -> str:
    """Turn the temp directory from `begin_checkpoint` into the committed `<root>/global_step_<step>`.

    Order: fsync the files, rename the directory, write the `COMPLETE` manifest inside it, then the latest-step
    marker at the root. An existing checkpoint of the same step is replaced. Returns the committed path or URL.
    """
    fs, root_path = open_fs(root)
    tmp_fs, tmp_path = open_fs(tmp_dir)
    expected_prefix = _join(root_path, checkpoint_dir_name(step)) + TMP_INFIX
    if type(tmp_fs) is not type(fs) or not tmp_path.startswith(expected_prefix):
        raise CheckpointError(
            f"tmp_dir {tmp_dir!r} is not a directory made by begin_checkpoint({root!r}, {step}); "
            f"expected a path starting with {public_path(fs, expected_prefix)!r}"
        )
    if not fs.isdir(tmp_path):
        raise CheckpointError(f"tmp_dir {tmp_dir!r} does not exist; was it committed or removed already?")

    manifest = build_manifest(public_path(fs, tmp_path), step, hash_max_bytes)
    if not manifest["files"]:
        raise CheckpointError(f"tmp_dir {tmp_dir!r} is empty; write the checkpoint files before committing it")
    local = isinstance(fs, LocalFileSystem)
    if local:
        for relative in manifest["files"]:
            _fsync_path(os.path.join(tmp_path, relative))
        for dirpath, _, _ in os.walk(tmp_path):
            _fsync_path(dirpath)

    final_path = _join(root_path, checkpoint_dir_name(step))
    replaced = None
    if fs.exists(final_path):
        replaced = f"{final_path}.old-{uuid.uuid4().hex[:12]}"
        _rename_dir(fs, final_path, replaced)
        logger.info("replacing existing checkpoint %s", public_path(fs, final_path))
    _rename_dir(fs, tmp_path, final_path)
    _write_atomic(fs, _join(final_path, MANIFEST_FILE), json.dumps(manifest, indent=1).encode())
    _write_atomic(fs, _join(root_path, LATEST_MARKER_FILE), f"{step}\n".encode())
    if replaced is not None:
        fs.rm(replaced, recursive=True)
    return public_path(fs, final_path)


def _rename_dir(fs: fsspec.AbstractFileSystem, source: str, target: str) -> None:
    if isinstance(fs, LocalFileSystem):
        os.rename(source, target)
        _fsync_path(os.path.dirname(target))
    else:
        fs.mv(source, target, recursive=True)


def list_checkpoints(root: str, include_temporary: bool = False) -> list[CheckpointEntry]:
    """Checkpoint directories under `root`, oldest step first (validity is not checked; see `verify_checkpoint`).

    With `include_temporary`, leftover `global_step_N.tmp-*` (and `.old-*`) directories are listed too.
    """
    fs, root_path = open_fs(root)
    if not fs.isdir(root_path):
        return []
    entries = []
    for info in fs.ls(root_path, detail=True):
        if info.get("type") != "directory":
            continue
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        committed, leftover = _STEP_DIR_RE.match(name), _TMP_DIR_RE.match(name)
        if committed:
            entries.append(CheckpointEntry(int(committed.group(1)), public_path(fs, info["name"]), temporary=False))
        elif leftover and include_temporary:
            entries.append(CheckpointEntry(int(leftover.group(1)), public_path(fs, info["name"]), temporary=True))
    return sorted(entries, key=lambda entry: (entry.step, entry.temporary, entry.path))


def verify_checkpoint(path: str, check_hashes: bool = True) -> list[str]:
    """Reasons why the checkpoint at `path` cannot be trusted; an empty list means it is valid."""
    fs, dir_path = open_fs(path)
    if not fs.isdir(dir_path):
        return ["directory does not exist"]
    manifest_path = _join(dir_path, MANIFEST_FILE)
    if not fs.exists(manifest_path):
        return [f"no {MANIFEST_FILE} manifest (the write did not finish)"]
    try:
        manifest = json.loads(fs.cat_file(manifest_path))
        files = manifest["files"]
    except (ValueError, KeyError, TypeError) as error:
        return [f"unreadable {MANIFEST_FILE} manifest: {error}"]
    present = _list_files(fs, dir_path)
    problems = []
    for relative, expected in files.items():
        if relative not in present:
            problems.append(f"missing file {relative}")
        elif present[relative] != expected["size"]:
            problems.append(f"{relative} has {present[relative]} bytes, manifest says {expected['size']}")
        elif check_hashes and expected.get("sha256") and _sha256(fs, _join(dir_path, relative)) != expected["sha256"]:
            problems.append(f"{relative} content differs from its manifest sha256")
    return problems


def read_latest_marker(root: str) -> int | None:
    """The step in `<root>/latest_checkpointed_step.txt`, or None when the marker is absent or unreadable."""
    fs, root_path = open_fs(root)
    marker = _join(root_path, LATEST_MARKER_FILE)
    try:
        return int(fs.cat_file(marker).decode().strip())
    except (FileNotFoundError, ValueError):
        return None


def latest_valid(root: str, check_hashes: bool = True) -> str | None:
    """The newest checkpoint under `root` that passes `verify_checkpoint`, or None when there is none.

    Newer directories that are half-written or corrupt are skipped with a warning naming what is wrong.
    """
    marker_step = read_latest_marker(root)
    for entry in reversed(list_checkpoints(root)):
        problems = verify_checkpoint(entry.path, check_hashes=check_hashes)
        if problems:
            logger.warning("skipping checkpoint %s: %s", entry.path, "; ".join(problems))
            continue
        if marker_step is not None and marker_step != entry.step:
            logger.warning(
                "%s says step %d but the newest valid checkpoint is step %d; using step %d",
                LATEST_MARKER_FILE,
                marker_step,
                entry.step,
                entry.step,
            )
        return entry.path
    return None


def prune(root: str, keep_last_n: int, check_hashes: bool = False, protect: Sequence[str] = ()) -> list[str]:
    """Delete all but the newest `keep_last_n` valid checkpoints, and leftovers up to the newest valid step.

    `keep_last_n <= 0` keeps every checkpoint (leftovers are still removed). The newest valid checkpoint and the
    `protect`ed paths (the one a run just wrote: an earlier run may have left higher-numbered checkpoints in the same
    root) are never deleted. Directories newer than the newest valid one (possibly still being written by someone)
    are left alone. Returns the deleted paths.
    """
    entries = list_checkpoints(root, include_temporary=True)
    valid = [e for e in entries if not e.temporary and not verify_checkpoint(e.path, check_hashes=check_hashes)]
    if not valid:
        return []
    newest_step = valid[-1].step
    keep = {e.path for e in valid[-keep_last_n:]} if keep_last_n > 0 else {e.path for e in valid}
    keep.add(valid[-1].path)
    keep.update(protect)
    fs, _ = open_fs(root)
    deleted = []
    for entry in entries:
        if entry.path in keep or entry.step > newest_step:
            continue
        _, path = open_fs(entry.path)
        fs.rm(path, recursive=True)
        deleted.append(entry.path)
        logger.info("pruned checkpoint directory %s", entry.path)
    return deleted


def _resume_none(root: str, resume_path: str | None) -> str | None:
    return None


def _resume_latest(root: str, resume_path: str | None) -> str | None:
    found = latest_valid(root)
    if found is None:
        logger.info("no valid checkpoint under %s; starting from step 0", root)
    return found


def _resume_path(root: str, resume_path: str | None) -> str | None:
    if not resume_path:
        raise CheckpointError("resume_path must be set when resume_mode is 'path'")
    try:
        checkpoint_step(resume_path)
    except ValueError as error:
        raise CheckpointError(f"resume_path: {error}") from None
    problems = verify_checkpoint(resume_path)
    if problems:
        raise CheckpointError(f"resume_path {resume_path!r} is not a valid checkpoint: {'; '.join(problems)}")
    return resume_path


RESUME_RESOLVERS: dict[str, Callable[[str, str | None], str | None]] = {
    "none": _resume_none,
    "latest": _resume_latest,
    "path": _resume_path,
}
"""How each `trainer.resume_mode` finds the checkpoint to resume from."""


def resolve_resume(root: str, resume_mode: str, resume_path: str | None = None) -> str | None:
    """The checkpoint to resume from: None for `none` (or `latest` with nothing valid), else a verified path."""
    resolver = RESUME_RESOLVERS.get(resume_mode)
    if resolver is None:
        raise CheckpointError(f"resume_mode must be one of {sorted(RESUME_RESOLVERS)}, got {resume_mode!r}")
    return resolver(root, resume_path)


def is_remote(path_or_url: str | os.PathLike[str]) -> bool:
    """Whether `path_or_url` is an fsspec URL (`s3://...`, `gs://...`, `file://...`) rather than a plain local path."""
    return "://" in str(path_or_url)


@contextlib.contextmanager
def local_directory_for_writing(target: str | os.PathLike[str]) -> Iterator[str]:
    """A local directory to write `target`'s files into: `target` itself when it is a local path, else a temporary
    directory whose files are uploaded into the `target` URL (merged with what is there) when the block ends.

    Each process uploads only what it wrote, so ranks on different nodes can fill one remote directory.
    """
    if not is_remote(target):
        os.makedirs(target, exist_ok=True)
        yield str(target)
        return
    with tempfile.TemporaryDirectory(prefix="skyrl-upload-") as staging:
        yield staging
        fs, remote = open_fs(str(target))
        fs.makedirs(remote, exist_ok=True)
        for name in sorted(os.listdir(staging)):
            fs.put(os.path.join(staging, name), _join(remote, name), recursive=True)


@contextlib.contextmanager
def local_directory_for_reading(source: str | os.PathLike[str]) -> Iterator[str]:
    """`source` itself when it is a local path, else a temporary local copy of the `source` URL's files."""
    if not is_remote(source):
        yield str(source)
        return
    with tempfile.TemporaryDirectory(prefix="skyrl-download-") as staging:
        fs, remote = open_fs(str(source))
        if not fs.isdir(remote):
            raise FileNotFoundError(f"{source} is not a directory")
        for entry in fs.ls(remote, detail=False):
            fs.get(entry, os.path.join(staging, entry.rstrip("/").rsplit("/", 1)[-1]), recursive=True)
        yield staging
