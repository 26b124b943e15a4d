"""Checkpoint folders on disk: a save is written under a staging name and swapped in by renames, so a crash at any
point leaves either the old checkpoint or the new one at its path, and the start-up sweep cleans up what a crash left
behind.

Layout: `<checkpoint dir>/runs/<model_id>/<weights|sampler_weights>/<name>`. A save writes `.<name>.new-<hex>`; an
overwrite renames the old folder to `.<name>.old-<hex>`, renames the new one in, records it, then deletes the old one.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Optional

log = logging.getLogger("skyrl_tx")

NEW, OLD = ".new-", ".old-"
EPHEMERAL = "ephemeral-"
"""Unnamed sampler weights (`save_weights_and_get_sampling_client`) are saved as `ephemeral-<seq_id>`, unlisted."""


def staging_folder(final: Path) -> Path:
    """Where a save into `final` writes before it is swapped in."""
    return final.with_name(f".{final.name}{NEW}{uuid.uuid4().hex[:8]}")


def swap_in(staging: Path, final: Path) -> Optional[Path]:
    """Move the complete `staging` folder to `final`; an existing `final` is first renamed aside, and that old folder
    is returned for the caller to delete once the new one is recorded."""
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}{OLD}{uuid.uuid4().hex[:8]}")
        os.replace(final, old)
    os.replace(staging, final)
    return old


def _hidden_name(folder: Path, marker: str) -> Optional[str]:
    """The checkpoint name of a `.<name><marker><hex>` folder, or None."""
    if not folder.name.startswith(".") or marker not in folder.name:
        return None
    return folder.name[1:].rsplit(marker, 1)[0]


def sweep(runs: Path, recorded: set[tuple[str, str, str]], keep_ephemeral: int) -> dict[str, list[Path]]:
    """Clean `runs` at start-up, before any save runs: put back an old folder whose replacement never arrived (a
    crash between the two renames), delete the other old and staging folders, delete named checkpoint folders without
    a database row (`recorded` holds (model_id, segment, name); a crash between the swap and the row), and keep only
    the newest `keep_ephemeral` unnamed sampler saves per model. Returns those kept, oldest first, per model id."""
    ephemeral: dict[str, list[Path]] = {}
    if not runs.is_dir():
        return ephemeral
    for model in sorted(path for path in runs.iterdir() if path.is_dir()):
        for segment in ("weights", "sampler_weights"):
            folder = model / segment
            if not folder.is_dir():
                continue
            for path in sorted(folder.iterdir()):
                name = _hidden_name(path, OLD)
                if name is not None and not (folder / name).exists():
                    log.warning("restoring checkpoint %s: a crash interrupted its overwrite", folder / name)
                    os.replace(path, folder / name)
                elif name is not None or _hidden_name(path, NEW) is not None:
                    shutil.rmtree(path, ignore_errors=True)
            saves = []
            for path in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
                if segment == "sampler_weights" and path.name.startswith(EPHEMERAL):
                    saves.append(path)
                elif (model.name, segment, path.name) not in recorded:
                    log.warning("deleting %s: its save never completed (no checkpoint record)", path)
                    shutil.rmtree(path, ignore_errors=True)
            saves.sort(key=lambda path: path.stat().st_mtime_ns)
            cut = max(0, len(saves) - keep_ephemeral)
            for path in saves[:cut]:
                shutil.rmtree(path, ignore_errors=True)
            if saves[cut:]:
                ephemeral[model.name] = saves[cut:]
    return ephemeral
