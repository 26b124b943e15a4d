"""`create_workdir`: a run's private directory, refused up front when the sandbox uid could not reach it."""

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from skyrl_gym.sandbox.workdir import create_workdir


@pytest.fixture
def open_dir():
    """A world-traversable directory under the system temp dir (pytest's own tmp_path sits below a 0700 folder)."""
    path = tempfile.mkdtemp()
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path)


def test_a_base_dir_behind_a_closed_directory_is_refused_naming_that_directory(open_dir):
    closed = open_dir / "closed"
    (closed / "inner").mkdir(parents=True)
    closed.chmod(0o700)  # owner only: another uid cannot traverse it
    other_uid = os.stat(closed).st_uid + 1
    with pytest.raises(ValueError, match=rf"not reachable by the sandbox uid {other_uid} \({closed} is closed\)"):
        create_workdir(str(closed / "inner"), other_uid, other_uid)


def test_a_reachable_base_dir_gets_a_private_directory_owned_by_the_run(tmp_path):
    uid, gid = os.getuid(), os.getgid()
    path = create_workdir(str(tmp_path), uid, gid)
    info = os.stat(path)
    assert os.path.dirname(path) == str(tmp_path.resolve())
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (uid, 0o700)
