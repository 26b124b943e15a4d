"""Atomic checkpoint directories: commit order, crash leftovers, fallback to the previous valid one, prune, resume."""

import json
import logging
import os
import uuid
from pathlib import Path

import fsspec
import pytest

from skyrl_train.utils.checkpoint_io import (
    LATEST_MARKER_FILE,
    MANIFEST_FILE,
    CheckpointError,
    begin_checkpoint,
    checkpoint_step,
    commit_checkpoint,
    latest_valid,
    list_checkpoints,
    prune,
    read_latest_marker,
    resolve_resume,
    verify_checkpoint,
)


def write_checkpoint(root, step, files=None):
    """Commit a checkpoint holding `files` (relative path -> bytes) through the real begin/commit path."""
    files = files or {"policy/model.bin": b"weights-%d" % step, "trainer_state.json": b'{"step": %d}' % step}
    tmp = begin_checkpoint(str(root), step)
    for relative, data in files.items():
        path = os.path.join(tmp, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
    return commit_checkpoint(str(root), step, tmp)


def test_commit_renames_writes_manifest_and_marker(tmp_path):
    tmp = begin_checkpoint(str(tmp_path), 3)
    assert os.path.basename(tmp).startswith("global_step_3.tmp-")
    with open(os.path.join(tmp, "a.bin"), "wb") as handle:
        handle.write(b"abc")
    # Nothing is visible to readers before the commit.
    assert latest_valid(str(tmp_path)) is None
    assert read_latest_marker(str(tmp_path)) is None

    final = commit_checkpoint(str(tmp_path), 3, tmp)

    assert final == str(tmp_path / "global_step_3")
    assert not os.path.exists(tmp)
    manifest = json.loads((tmp_path / "global_step_3" / MANIFEST_FILE).read_text())
    # sha256("abc") is the well-known test vector from FIPS 180-2.
    assert manifest["files"] == {
        "a.bin": {"size": 3, "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}
    }
    assert (tmp_path / LATEST_MARKER_FILE).read_text().strip() == "3"
    assert latest_valid(str(tmp_path)) == final
    assert checkpoint_step(final) == 3


def test_crash_leftovers_fall_back_to_previous_good_checkpoint(tmp_path, caplog):
    root = str(tmp_path)
    good = write_checkpoint(root, 10)
    # Step 20: committed, then a file got truncated (size disagrees with the manifest).
    truncated = write_checkpoint(root, 20, {"policy/model.bin": b"0123456789", "trainer_state.json": b"{}"})
    with open(os.path.join(truncated, "policy/model.bin"), "r+b") as handle:
        handle.truncate(4)
    # Step 30: renamed into place but the process died before the COMPLETE manifest was written.
    no_manifest = write_checkpoint(root, 30)
    os.remove(os.path.join(no_manifest, MANIFEST_FILE))
    # Step 40: died mid-write, only the temp directory exists.
    leftover = begin_checkpoint(root, 40)
    with open(os.path.join(leftover, "partial.bin"), "wb") as handle:
        handle.write(b"half")

    with caplog.at_level(logging.WARNING, logger="skyrl_train.utils.checkpoint_io"):
        assert latest_valid(root) == good
    log = caplog.text
    assert "global_step_30" in log and "no COMPLETE manifest" in log
    assert "global_step_20" in log and "model.bin has 4 bytes, manifest says 10" in log
    assert "global_step_40" not in log  # temp dirs are never candidates
    assert [e.step for e in list_checkpoints(root)] == [10, 20, 30]
    assert [e.step for e in list_checkpoints(root, include_temporary=True)] == [10, 20, 30, 40]


def test_same_size_corruption_is_caught_by_hash_only_when_checked(tmp_path):
    root = str(tmp_path)
    good = write_checkpoint(root, 1)
    bad = write_checkpoint(root, 2, {"state.json": b"AAAA"})
    with open(os.path.join(bad, "state.json"), "wb") as handle:
        handle.write(b"BBBB")
    assert verify_checkpoint(bad) == ["state.json content differs from its manifest sha256"]
    assert verify_checkpoint(bad, check_hashes=False) == []
    assert latest_valid(root) == good


def test_large_files_are_checked_by_size_only(tmp_path):
    tmp = begin_checkpoint(str(tmp_path), 1)
    with open(os.path.join(tmp, "big.bin"), "wb") as handle:
        handle.write(b"x" * 100)
    final = commit_checkpoint(str(tmp_path), 1, tmp, hash_max_bytes=50)
    with open(os.path.join(final, MANIFEST_FILE)) as handle:
        manifest = json.load(handle)
    assert manifest["files"]["big.bin"] == {"size": 100, "sha256": None}


def test_recommit_same_step_replaces_it(tmp_path):
    root = str(tmp_path)
    write_checkpoint(root, 5, {"a": b"old"})
    final = write_checkpoint(root, 5, {"b": b"new!"})
    assert sorted(os.listdir(final)) == [MANIFEST_FILE, "b"]
    assert sorted(os.listdir(root)) == ["global_step_5", LATEST_MARKER_FILE]


def test_commit_rejects_foreign_or_empty_dirs(tmp_path):
    root = str(tmp_path)
    tmp = begin_checkpoint(root, 1)
    with pytest.raises(CheckpointError, match="is not a directory made by begin_checkpoint"):
        commit_checkpoint(root, 2, tmp)
    with pytest.raises(CheckpointError, match="is empty"):
        commit_checkpoint(root, 1, tmp)


def test_prune_keeps_newest_n_valid_and_removes_leftovers(tmp_path):
    root = str(tmp_path)
    for step in (1, 2, 3, 4):
        write_checkpoint(root, step)
    os.remove(os.path.join(root, "global_step_3", MANIFEST_FILE))  # corrupt, between valid ones
    stale_tmp = begin_checkpoint(root, 2)
    in_progress = begin_checkpoint(root, 9)

    deleted = prune(root, keep_last_n=2)

    # Valid: 1, 2, 4 -> keep 2 and 4; 1, corrupt 3 and the stale tmp of step 2 go; step 9 may be in progress.
    assert sorted(deleted) == sorted(
        [os.path.join(root, "global_step_1"), os.path.join(root, "global_step_3"), stale_tmp]
    )
    assert sorted(os.listdir(root)) == sorted(
        ["global_step_2", "global_step_4", os.path.basename(in_progress), LATEST_MARKER_FILE]
    )


def test_prune_never_deletes_the_newest_valid_checkpoint(tmp_path):
    root = str(tmp_path)
    write_checkpoint(root, 1)
    newest = write_checkpoint(root, 2)
    broken = write_checkpoint(root, 3)
    os.remove(os.path.join(broken, MANIFEST_FILE))
    assert prune(root, keep_last_n=1) == [os.path.join(root, "global_step_1")]
    assert os.path.isdir(newest) and os.path.isdir(broken)  # broken step 3 is newer than the newest valid: kept
    assert prune(root, keep_last_n=-1) == []


def test_prune_keeps_the_checkpoint_a_run_just_wrote_even_below_stale_ones(tmp_path):
    # An earlier run left steps 30 and 60; a fresh run (resume_mode none) then saves step 10 and step 20.
    root = str(tmp_path)
    write_checkpoint(root, 30)
    write_checkpoint(root, 60)
    just_written = write_checkpoint(root, 10)
    assert prune(root, keep_last_n=2, protect=(just_written,)) == []
    assert prune(root, keep_last_n=2) == [just_written]  # without protection the new one would go at once
    write_checkpoint(root, 10)
    second = write_checkpoint(root, 20)
    assert prune(root, keep_last_n=2, protect=(second,)) == [os.path.join(root, "global_step_10")]
    assert os.path.isdir(second)


def test_memory_filesystem_urls():
    root = f"memory://ckpt-{uuid.uuid4().hex[:8]}"
    fs = fsspec.filesystem("memory")
    tmp = begin_checkpoint(root, 7)
    assert tmp.startswith("memory://") and ".tmp-" in tmp
    fs.pipe_file(tmp + "/policy/model.bin", b"12345")
    final = commit_checkpoint(root, 7, tmp)
    assert final == f"{root.replace('memory://', 'memory:///')}/global_step_7"
    assert latest_valid(root) == final
    assert fs.cat_file(f"{root}/{LATEST_MARKER_FILE}") == b"7\n"
    fs.pipe_file(final + "/policy/model.bin", b"12")
    assert latest_valid(root) is None
    fs.rm(root, recursive=True)


def test_resolve_resume_modes(tmp_path):
    root = str(tmp_path)
    assert resolve_resume(root, "latest") is None  # nothing saved yet
    first = write_checkpoint(root, 1)
    second = write_checkpoint(root, 2)
    assert resolve_resume(root, "none") is None
    assert resolve_resume(root, "latest") == second
    assert resolve_resume(root, "path", first) == first
    with pytest.raises(CheckpointError, match="resume_path must be set"):
        resolve_resume(root, "path", None)
    with pytest.raises(CheckpointError, match="does not end in a 'global_step_<step>' directory"):
        resolve_resume(root, "path", root)
    os.remove(os.path.join(first, MANIFEST_FILE))
    with pytest.raises(CheckpointError, match="is not a valid checkpoint: no COMPLETE manifest"):
        resolve_resume(root, "path", first)
    with pytest.raises(CheckpointError, match="is not a valid checkpoint: directory does not exist"):
        resolve_resume(root, "path", os.path.join(root, "global_step_99"))
    with pytest.raises(CheckpointError, match=r"resume_mode must be one of \['latest', 'none', 'path'\]"):
        resolve_resume(root, "from_path", first)


def test_local_directories_stand_in_for_urls_when_writing_and_reading():
    from skyrl_train.utils.checkpoint_io import local_directory_for_reading, local_directory_for_writing

    url = f"memory://staging-{uuid.uuid4().hex[:8]}/ckpt"
    fs = fsspec.filesystem("memory")
    with local_directory_for_writing(url) as local:  # "rank 0"
        assert "://" not in local
        with open(os.path.join(local, "a.bin"), "wb") as handle:
            handle.write(b"rank0")
        os.makedirs(os.path.join(local, "sub"))
        with open(os.path.join(local, "sub", "b.txt"), "w") as handle:
            handle.write("nested")
    with local_directory_for_writing(url) as local:  # "rank 1" adds its own file to the same directory
        Path(local, "c.bin").write_bytes(b"rank1")
    assert fs.cat_file(url + "/a.bin") == b"rank0" and fs.cat_file(url + "/c.bin") == b"rank1"
    with local_directory_for_reading(url) as local:
        assert sorted(os.listdir(local)) == ["a.bin", "c.bin", "sub"]
        with open(os.path.join(local, "sub", "b.txt")) as handle:
            assert handle.read() == "nested"
    with pytest.raises(FileNotFoundError, match="is not a directory"), local_directory_for_reading(url + "-missing"):
        pass


def test_local_paths_are_used_as_they_are(tmp_path):
    from skyrl_train.utils.checkpoint_io import local_directory_for_reading, local_directory_for_writing

    with local_directory_for_writing(tmp_path / "new" / "dir") as local:
        assert local == str(tmp_path / "new" / "dir") and os.path.isdir(local)
    with local_directory_for_reading(tmp_path) as local:
        assert local == str(tmp_path)
