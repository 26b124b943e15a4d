"""A benchmark's work folder that survives a stopped run: `vs_trl.py --work-dir` resumes after the sides it
finished, and refuses a folder whose sides ran under other settings."""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional


def run_settings(args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    """What a side's results depend on: a kept work folder is resumed only under the same settings."""
    return {
        "shape": args.shape,
        "steps": args.steps,
        "model_dir": str(model_dir),
        "ours_overrides": list(args.ours_overrides),
        "trl_precision": args.trl_precision,
    }


@contextlib.contextmanager
def work_folder(kept: Optional[str]) -> Iterator[Path]:
    """`--work-dir` as given (kept, so a stopped run resumes there), or a temporary folder removed at the end."""
    if kept is None:
        with tempfile.TemporaryDirectory(prefix="vs_trl_") as scratch:
            yield Path(scratch)
        return
    folder = Path(kept).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    yield folder


def check_resumable(work: Path, settings: dict[str, Any]) -> None:
    """Record `settings` in `work/settings.json`, or refuse a folder whose finished sides ran under other ones."""
    recorded_file = work / "settings.json"
    if recorded_file.exists():
        recorded = json.loads(recorded_file.read_text())
        changed = sorted(key for key in set(recorded) | set(settings) if recorded.get(key) != settings.get(key))
        if changed:
            details = ", ".join(f"{key}: {recorded.get(key)!r} there, {settings.get(key)!r} now" for key in changed)
            raise SystemExit(
                f"vs_trl: --work-dir {work} holds sides trained under other settings ({details}); "
                "give another folder or remove it"
            )
    recorded_file.write_text(json.dumps(settings, indent=1))
