"""Save and load the driver-side trainer state of a checkpoint: global step, RNG states, dataloader position, config.

Everything goes into one human-readable `trainer_state.json` inside the checkpoint directory (no pickle), written
by the trainer between `begin_checkpoint` and `commit_checkpoint`. Model, optimizer and scheduler states are the
workers' business and live in their own sub-directories.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skyrl_train.utils.checkpoint_io import open_fs
from skyrl_train.utils.plain_values import to_jsonable
from skyrl_train.utils.rng_state import capture_rng_state, restore_rng_state

TRAINER_STATE_FILE = "trainer_state.json"
"""File name of the trainer state inside a checkpoint directory."""

TRAINER_STATE_VERSION = 1
"""Layout version of `trainer_state.json`."""


@dataclass
class TrainerState:
    """What the driver needs to continue a run: the step reached and where the data and generators were."""

    global_step: int
    """Number of training steps completed when the checkpoint was taken."""

    dataloader: dict[str, Any] | None = None
    """The dataloader's `state_dict()`, or None when it was not saved."""

    config: dict[str, Any] | None = None
    """The run's full config as plain values (for inspection and mismatch warnings)."""

    rng: dict[str, Any] | None = None
    """`capture_rng_state()` of the driver process."""

    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else the trainer wants back (e.g. KL controller value, consumed sample ids)."""


def save_trainer_state(
    ckpt_dir: str,
    global_step: int,
    dataloader_state: Mapping[str, Any] | None = None,
    config: Any = None,
    extra: Mapping[str, Any] | None = None,
    save_rng: bool = True,
) -> str:
    """Write `trainer_state.json` into `ckpt_dir` (a path or URL) with the current RNG states; returns its path."""
    state = {
        "version": TRAINER_STATE_VERSION,
        "global_step": int(global_step),
        "dataloader": to_jsonable(dataloader_state, "dataloader_state"),
        "config": to_jsonable(config, "config"),
        "rng": capture_rng_state() if save_rng else None,
        "extra": to_jsonable(dict(extra or {}), "extra"),
    }
    fs, dir_path = open_fs(ckpt_dir)
    path = f"{dir_path.rstrip('/')}/{TRAINER_STATE_FILE}"
    fs.pipe_file(path, json.dumps(state, indent=1).encode())
    return f"{ckpt_dir.rstrip('/')}/{TRAINER_STATE_FILE}"


def load_trainer_state(ckpt_dir: str, restore_rng: bool = True) -> TrainerState:
    """Read `trainer_state.json` from `ckpt_dir`; with `restore_rng` the saved RNG states are applied right away."""
    fs, dir_path = open_fs(ckpt_dir)
    path = f"{dir_path.rstrip('/')}/{TRAINER_STATE_FILE}"
    if not fs.exists(path):
        raise FileNotFoundError(f"checkpoint {ckpt_dir!r} has no {TRAINER_STATE_FILE}")
    raw = json.loads(fs.cat_file(path))
    if raw.get("version") != TRAINER_STATE_VERSION:
        raise ValueError(
            f"{TRAINER_STATE_FILE} in {ckpt_dir!r} has version {raw.get('version')!r}; "
            f"this code reads version {TRAINER_STATE_VERSION}"
        )
    state = TrainerState(
        global_step=raw["global_step"],
        dataloader=raw.get("dataloader"),
        config=raw.get("config"),
        rng=raw.get("rng"),
        extra=raw.get("extra") or {},
    )
    if restore_rng and state.rng is not None:
        restore_rng_state(state.rng)
    return state
