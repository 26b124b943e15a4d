"""Call the Linux primitives the sandbox child needs (namespaces, prctl, mounts) through ctypes; stdlib only."""

from __future__ import annotations

import ctypes
import os
import stat

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what} failed: {os.strerror(errno)}")


def unshare(flags: int) -> None:
    """Move the calling process into new namespaces (see unshare(2)); raises OSError on failure."""
    _check(_libc.unshare(flags), f"unshare({flags:#x})")


def set_no_new_privs() -> None:
    """Forbid gaining privileges through execve (setuid binaries, file capabilities) for this process tree."""
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def set_parent_death_signal(signal_number: int) -> None:
    """Have the kernel send `signal_number` to this process when its parent dies."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal_number, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2) with str arguments; raises OSError on failure."""

    def enc(value: str | None) -> bytes | None:
        return None if value is None else os.fsencode(value)

    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount({target})")


def umount_detach(target: str) -> None:
    """Lazily unmount `target` (MNT_DETACH)."""
    _check(_libc.umount2(os.fsencode(target), MNT_DETACH), f"umount({target})")


def searchable_by(path: str, uid: int, gid: int) -> bool:
    """True if a process with this uid/gid (no supplementary groups) may traverse directory `path`."""
    info = os.stat(path)
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def first_blocked_ancestor(path: str, uid: int, gid: int) -> str | None:
    """The top-most proper ancestor of `path` that uid/gid cannot traverse, or None when the path is reachable."""
    parts = os.path.realpath(path).strip("/").split("/")
    current = "/"
    for part in parts[:-1]:
        if not searchable_by(current, uid, gid):
            return current
        current = os.path.join(current, part)
    return None if searchable_by(current, uid, gid) else current


def expose_paths(paths: list[str], uid: int, gid: int, staging_dir: str) -> list[str]:
    """Make `paths` reachable for uid/gid although an ancestor directory is closed to them (e.g. a Python under /root).

    Must run as root inside a fresh mount namespace. Each closed ancestor is covered with a small read-only tmpfs
    (which also hides the rest of it), and only the needed subtrees are bind-mounted back, read-only, at their
    original paths. Returns the paths that were re-exposed.
    """
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # never let our mounts propagate back to the host
    wanted: dict[str, list[str]] = {}
    for path in sorted({os.path.realpath(p) for p in paths if os.path.exists(p)}):
        blocked = first_blocked_ancestor(path, uid, gid)
        if blocked is None or blocked == path:
            continue
        siblings = wanted.setdefault(blocked, [])
        if not any(path == kept or path.startswith(kept + "/") for kept in siblings):
            siblings.append(path)
    exposed: list[str] = []
    for index, (blocked, subtrees) in enumerate(sorted(wanted.items())):
        stages = []
        for number, subtree in enumerate(subtrees):
            stage = os.path.join(staging_dir, f".stage-{index}-{number}")
            os.mkdir(stage, 0o700)
            mount(subtree, stage, None, MS_BIND | MS_REC)
            stages.append(stage)
        mount("tmpfs", blocked, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        for subtree, stage in zip(subtrees, stages):
            os.makedirs(subtree, mode=0o755, exist_ok=True)
            mount(stage, subtree, None, MS_BIND | MS_REC)
            mount(None, subtree, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
            umount_detach(stage)
            os.rmdir(stage)
            exposed.append(subtree)
        mount(None, blocked, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return exposed
