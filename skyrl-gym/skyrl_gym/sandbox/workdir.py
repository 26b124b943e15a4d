"""The sandbox's private working directory and identity: the run's uid, its temp dir, and the minimal environment."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from typing import Optional

from skyrl_gym.sandbox.child.kernel import first_blocked_ancestor

logger = logging.getLogger("skyrl_gym.sandbox")

# Fresh per-run uids come from this range (far above regular and systemd users), so RLIMIT_NPROC counts only one
# run's processes and leftovers can be found by uid.
SANDBOX_UID_BASE = 2_000_000_000
SANDBOX_UID_SPAN = 100_000_000


def choose_identity(drop_privileges: bool, sandbox_uid: Optional[int]) -> tuple[Optional[int], Optional[int]]:
    """The (uid, gid) the program will run as, or (None, None) to keep the caller's identity.

    Only root can (and must) switch identity; ordinary users stay themselves.
    """
    if os.geteuid() != 0 or not drop_privileges:
        return None, None
    uid = sandbox_uid if sandbox_uid is not None else SANDBOX_UID_BASE + secrets.randbelow(SANDBOX_UID_SPAN)
    return uid, uid


def create_workdir(base_dir: Optional[str], uid: Optional[int], gid: Optional[int]) -> str:
    """Create a private (0700) directory for one run, owned by the run's uid when it differs from ours."""
    base = os.path.realpath(base_dir or tempfile.gettempdir())
    if uid is not None:
        blocked = first_blocked_ancestor(base, uid, gid)
        if blocked is not None:
            raise ValueError(
                f"sandbox base_dir {base} is not reachable by the sandbox uid {uid} ({blocked} is closed); "
                "choose a base_dir under a world-traversable directory such as /tmp"
            )
    path = tempfile.mkdtemp(prefix="skyrl-sandbox-", dir=base)
    if uid is not None:
        os.chown(path, uid, gid)
    return path


def write_file(workdir: str, name: str, text: str, uid: Optional[int], gid: Optional[int]) -> None:
    """Write one file into the workdir (names must be plain file names), owned by the run's uid."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"sandbox file name must be a plain file name, got {name!r}")
    path = os.path.join(workdir, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    if uid is not None:
        os.chown(path, uid, gid)


def remove_workdir(path: str, max_rounds: int = 64) -> None:
    """Delete the workdir even if the program locked parts of it (chmod 000); never raises.

    Each round removes what it can and opens up (chmod 0700) every directory that blocked it, so a chain of locked
    directories needs one round per level. Root needs no rounds: it ignores permissions.
    """
    blocked: list[str] = []
    for _ in range(max_rounds):
        blocked.clear()
        shutil.rmtree(path, onerror=lambda _function, failed, _info: blocked.append(failed))
        if not os.path.lexists(path):
            return
        for failed in blocked:
            for candidate in (os.path.dirname(failed), failed):
                with contextlib.suppress(OSError):
                    if os.path.isdir(candidate) and not os.path.islink(candidate):
                        os.chmod(candidate, 0o700)
    logger.warning("could not fully remove sandbox directory %s", path)


def minimal_env(workdir: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of the child: nothing inherited from the parent, so no secrets leak in."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    env.update(extra)
    return env
