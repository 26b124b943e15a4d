"""The shm sender's blocks are named after their owner, and only blocks of owners that are gone are swept."""

import os
import subprocess
import sys

import pytest

from skyrl_train.weight_sync import shm_blocks
from skyrl_train.weight_sync.shm_blocks import (
    BLOCK_PREFIX,
    block_owner,
    create_block,
    pid_namespace,
    remove_orphaned_blocks,
)


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _name(namespace: int, pid: int, tail: str = "ab12") -> str:
    return f"{BLOCK_PREFIX}{namespace:x}_{pid:x}_{tail}"


def test_a_block_is_named_after_this_process_and_fits_macos_names():
    block = create_block(100)
    try:
        assert block.size >= 100
        assert block_owner(block.name) == (pid_namespace(), os.getpid())
        assert len("/" + block.name.lstrip("/")) <= 31  # macOS refuses longer shared-memory names
        assert block_owner("/" + block.name.lstrip("/")) == (pid_namespace(), os.getpid())
    finally:
        block.close()
        block.unlink()


def test_names_not_made_by_create_block_have_no_owner():
    for name in ["psm_1a2b3c4d", f"{BLOCK_PREFIX}zz_10_ab12", f"{BLOCK_PREFIX}10_ab12", "PostgreSQL.1662971646"]:
        assert block_owner(name) is None, name


def test_the_sweep_unlinks_only_blocks_of_this_namespace_whose_process_is_gone(tmp_path, caplog):
    here, dead = pid_namespace(), _dead_pid()
    orphan = tmp_path / _name(here, dead)
    orphan.write_bytes(b"x" * 4096)
    kept = {
        "live owner": tmp_path / _name(here, os.getpid()),
        "other namespace": tmp_path / _name(here + 1, dead),
        "not ours": tmp_path / "psm_1a2b3c4d",
        "malformed": tmp_path / f"{BLOCK_PREFIX}nothex_{dead:x}_ab12",
    }
    for path in kept.values():
        path.write_bytes(b"y")
    with caplog.at_level("WARNING", logger=shm_blocks.__name__):
        assert remove_orphaned_blocks(tmp_path) == 4096
    assert not orphan.exists()
    assert {label: path.exists() for label, path in kept.items()} == dict.fromkeys(kept, True)
    assert "unlinked 1 block(s) left by killed senders" in caplog.text and orphan.name in caplog.text
    assert remove_orphaned_blocks(tmp_path) == 0  # nothing left to sweep
    assert remove_orphaned_blocks(tmp_path / "missing") == 0  # no shared-memory folder: nothing to do


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs a listable /dev/shm (Linux)")
def test_the_sweep_frees_the_real_block_of_a_killed_process():
    """A child makes a real block and dies by SIGKILL before unlinking it. Ray kills a rank's resource tracker with
    the rank; here the child unregisters the block from its tracker instead, so nothing else can unlink it."""
    script = (
        "import os\n"
        "from multiprocessing import resource_tracker\n"
        "from skyrl_train.weight_sync.shm_blocks import create_block\n"
        "block = create_block(1 << 16)\n"
        "resource_tracker.unregister(block._name, 'shared_memory')\n"
        "print(block.name, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert child.returncode == -9, child.stderr
    leaked = f"/dev/shm/{child.stdout.strip().lstrip('/')}"
    try:
        assert os.path.exists(leaked)  # what a killed sender used to leave until the machine restarted
        assert remove_orphaned_blocks() >= 1 << 16
        assert not os.path.exists(leaked)
    finally:
        if os.path.exists(leaked):
            os.unlink(leaked)
