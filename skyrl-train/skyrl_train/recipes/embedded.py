"""The embedded default model on disk: warm-started once per settings and cached under `$SKYRL_CACHE/embedded/<key>`.

`get_embedded_model(settings)` returns a Hugging Face folder (model, tokenizer, and `skyrl_embedded.json` with the
settings and the measured accuracy). The folder's name hashes the settings and `CODE_VERSION`; it is built in a
temporary folder and renamed into place, reused while its files are intact, and rebuilt (deterministically, from
the seed) when a file is missing or the weights do not match their recorded hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from skyrl_train.models.loading import load_causal_lm, load_tokenizer
from skyrl_train.models.tokenizer import save_tokenizer
from skyrl_train.recipes.warm_start import WarmStartSettings, make_splits, sampled_stats, warm_start

CODE_VERSION = "1"
"""Bump whenever the warm start, tokenizer or tiny model change what a given setting builds (it renames the cache)."""

DESCRIPTION_FILE = "skyrl_embedded.json"
WEIGHTS_FILE = "model.safetensors"
REQUIRED_FILES = ("config.json", WEIGHTS_FILE, "tokenizer.json", "tokenizer_config.json", DESCRIPTION_FILE)
"""Files a cache entry must hold to be reused."""


def cache_root() -> Path:
    """`$SKYRL_CACHE` if set, else `~/.cache/skyrl`."""
    return Path(os.path.expanduser(os.environ.get("SKYRL_CACHE") or "~/.cache/skyrl"))


def cache_key(settings: WarmStartSettings) -> str:
    """A short hash of the settings and `CODE_VERSION`: equal keys mean the same model would be built."""
    payload = json.dumps({"code_version": CODE_VERSION, "settings": settings.to_dict()}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def embedded_model_dir(settings: WarmStartSettings) -> Path:
    """Where the model for `settings` is (or would be) cached."""
    return cache_root() / "embedded" / cache_key(settings)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_description(directory: str | Path) -> dict[str, Any]:
    """The `skyrl_embedded.json` of a built model folder (settings, measured accuracy, build facts)."""
    return json.loads((Path(directory) / DESCRIPTION_FILE).read_text(encoding="utf-8"))


def load_embedded_model(directory: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load the model (fp32, CPU, eval mode) and the char tokenizer (left padding) of a built folder.

    Both go through `skyrl_train.models.loading`, the path the trainer uses; its `load_tokenizer` keeps the char
    tokenizer as saved (`AutoTokenizer` alone would swap in `Qwen2Tokenizer`, dropping spaces and newlines).
    """
    model = load_causal_lm(str(directory), dtype="float32", device="cpu")
    return model.eval(), load_tokenizer(str(directory), padding_side="left")


def cache_problem(directory: Path, settings: WarmStartSettings) -> Optional[str]:
    """Why the folder cannot be reused for `settings` (a missing file, an unreadable description, other settings, a
    file whose sha256 differs from the recorded one), or None when it is a valid entry."""
    if not directory.is_dir():
        return "not built"
    missing = [name for name in REQUIRED_FILES if not (directory / name).is_file()]
    if missing:
        return f"missing {', '.join(missing)}"
    try:
        description = read_description(directory)
    except (OSError, ValueError) as exc:
        return f"{DESCRIPTION_FILE} is unreadable ({exc})"
    if description.get("cache_key") != cache_key(settings) or description.get("settings") != settings.to_dict():
        return f"{DESCRIPTION_FILE} describes other settings"
    recorded = description.get("files") or {}
    if WEIGHTS_FILE not in recorded:
        return f"{DESCRIPTION_FILE} records no sha256 for {WEIGHTS_FILE}"
    for name, digest in recorded.items():
        if not (directory / name).is_file():
            return f"missing {name}"
        if _sha256(directory / name) != digest:
            return f"{name} does not match its recorded sha256"
    return None


def build_embedded_model(settings: WarmStartSettings, directory: str | Path, progress: bool = True) -> dict[str, Any]:
    """Warm-start a model for `settings`, measure it, and save model + tokenizer + description into `directory`.

    Returns the description (also written to `directory/skyrl_embedded.json`).
    """
    directory = Path(directory)
    started = time.perf_counter()
    splits = make_splits(settings)
    result = warm_start(settings, progress=progress, splits=splits)
    sampled = sampled_stats(
        result.model,
        result.tokenizer,
        splits["test"][: settings.sample_prompts],
        n=settings.sample_n,
        max_new_tokens=settings.max_new_tokens,
        seed=settings.seed,
    )
    directory.mkdir(parents=True, exist_ok=True)
    result.model.save_pretrained(directory)
    save_tokenizer(result.tokenizer, directory)
    spec = settings.model_spec
    description = {
        "code_version": CODE_VERSION,
        "cache_key": cache_key(settings),
        "settings": settings.to_dict(),
        "model": {
            "architecture": spec.architecture,
            "num_parameters": result.num_parameters,
            "hidden_size": spec.hidden_size,
            "num_layers": spec.num_layers,
        },
        "accuracy": {
            "greedy": result.greedy_accuracy,
            "held_out_problems": settings.eval_examples,
            "sampled": {
                "temperature": 1.0,
                "n": settings.sample_n,
                "prompts": settings.sample_prompts,
                **asdict(sampled),
            },
        },
        "warm_start": {
            "steps": result.steps,
            "reached_target": result.reached_target,
            "in_target_band": settings.target_low <= result.greedy_accuracy <= settings.target_high,
            "train_seconds": round(result.train_seconds, 2),
            "history": result.history,
        },
        "held_out_split": (
            f"generate_splits({settings.task!r}, difficulty={settings.difficulty}, seed={settings.seed}, "
            f"test_size={settings.eval_examples}) gives the same test split; no warm-start example is in it"
        ),
        "build": {
            "seconds": round(time.perf_counter() - started, 2),
            "torch_threads": torch.get_num_threads(),
            "torch_version": torch.__version__,
            "machine": platform.machine(),
        },
        "files": {path.name: _sha256(path) for path in sorted(directory.iterdir()) if path.is_file()},
    }
    (directory / DESCRIPTION_FILE).write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    return description


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (serialises builders of one entry; a no-op where fcntl is missing)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the rename below still keeps the entry whole
        yield
        return
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _discard(path: Path) -> None:
    """Move `path` out of the way (so its name is free at once), then delete it."""
    if path.exists():
        doomed = path.with_name(f".stale-{path.name}-{uuid.uuid4().hex[:8]}")
        os.rename(path, doomed)
        shutil.rmtree(doomed, ignore_errors=True)


def build_cached(
    target: Path, is_valid: Callable[[Path], bool], build: Callable[[Path], Any], rebuild: bool = False
) -> Path:
    """`target`, built by `build(folder)` unless `is_valid(target)` (or `rebuild`): one builder at a time (a file
    lock next to it), built in a temporary folder and renamed into place, so a half-built entry is never used."""
    if not rebuild and is_valid(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(target.parent / f".{target.name}.lock"):
        if not rebuild and is_valid(target):  # another process built it meanwhile
            return target
        staging = target.with_name(f".building-{target.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            build(staging)
            _discard(target)
            os.rename(staging, target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return target


def get_embedded_model(
    settings: Optional[WarmStartSettings] = None, progress: bool = True, rebuild: bool = False
) -> Path:
    """The folder of the embedded model for `settings` (defaults: `WarmStartSettings()`), building it if needed.

    A valid cached entry is reused; a missing or damaged one is built in a temporary folder and renamed into place.
    `rebuild=True` builds afresh even when the entry is valid.
    """
    settings = settings or WarmStartSettings()
    return build_cached(
        embedded_model_dir(settings),
        lambda folder: cache_problem(folder, settings) is None,
        lambda folder: build_embedded_model(settings, folder, progress=progress),
        rebuild,
    )
