"""Checkpoint folders: an overwrite swaps the new folder in by renames, and the start-up sweep repairs or cleans up
what a crash at any step left (a missing checkpoint is put back, unfinished saves and unrecorded folders go)."""

from __future__ import annotations

import os
import time

from skyrl_tx.checkpoint_files import staging_folder, swap_in, sweep


def _write(folder, text: str) -> None:
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_text(text)


def test_an_overwrite_moves_the_old_folder_aside_until_the_caller_removes_it(tmp_path):
    final = tmp_path / "runs" / "m:train:0" / "weights" / "c"
    _write(final, "old")
    staging = staging_folder(final)
    _write(staging, "new")
    old = swap_in(staging, final)
    assert (final / "adapter_model.safetensors").read_text() == "new" and not staging.exists()
    assert (old / "adapter_model.safetensors").read_text() == "old" and old.name.startswith(".c.old-")
    assert swap_in(_new(final), tmp_path / "runs" / "m:train:0" / "weights" / "fresh") is None


def _new(final):
    staging = staging_folder(final)
    _write(staging, "x")
    return staging


def test_the_start_up_sweep_puts_back_an_interrupted_overwrite_and_removes_what_no_save_finished(tmp_path):
    runs = tmp_path / "runs"
    weights = runs / "m:train:0" / "weights"
    _write(weights / ".kept.old-1234abcd", "old")  # killed between the two renames: `kept` is missing
    _write(weights / "replaced", "new")
    _write(weights / ".replaced.old-1234abcd", "old")  # killed before the old folder was deleted
    _write(weights / ".half.new-1234abcd", "partial")  # killed while writing
    _write(weights / "unrecorded", "new")  # killed between the swap and the database row
    sampler = runs / "m:train:0" / "sampler_weights"
    for index in range(6):
        _write(sampler / f"ephemeral-{index}", str(index))
        os.utime(sampler / f"ephemeral-{index}", ns=(time.time_ns(), index * 10**9))
    recorded = {("m:train:0", "weights", "kept"), ("m:train:0", "weights", "replaced")}

    kept = sweep(runs, recorded, keep_ephemeral=4)

    assert sorted(path.name for path in weights.iterdir()) == ["kept", "replaced"]
    assert (weights / "kept" / "adapter_model.safetensors").read_text() == "old"
    assert (weights / "replaced" / "adapter_model.safetensors").read_text() == "new"
    assert [path.name for path in kept["m:train:0"]] == [f"ephemeral-{i}" for i in range(2, 6)]
    assert sorted(path.name for path in sampler.iterdir()) == [f"ephemeral-{i}" for i in range(2, 6)]
    assert sweep(tmp_path / "nothing-here", set(), 4) == {}
