"""Restrict the calling process with Linux Landlock (syscalls 444-446) through ctypes; stdlib only.

The policy: read and execute only beneath the given read-only roots, full access beneath the writable roots, write
access to /dev/null, and (ABI >= 4) no TCP bind/connect at all; (ABI >= 6) no signals or abstract unix sockets to
processes outside the sandbox's Landlock domain.
"""

from __future__ import annotations

import ctypes
import os
import stat

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

READ_ONLY = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
FILE_ONLY_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi_version() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is unsupported or disabled."""
    version = _libc.syscall(
        ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION)
    )
    return max(int(version), 0)


def handled_fs_rights(abi: int) -> int:
    """Every filesystem right the given ABI knows about."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def _syscall_error(what: str) -> OSError:
    errno = ctypes.get_errno()
    return OSError(errno, f"{what} failed: {os.strerror(errno)}")


def _add_path_rule(ruleset_fd: int, path: str, allowed: int) -> bool:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False  # missing or unreachable: nothing to allow
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            allowed &= FILE_ONLY_RIGHTS
        attr = _PathBeneathAttr(allowed_access=allowed, parent_fd=fd)
        result = _libc.syscall(
            ctypes.c_long(SYS_ADD_RULE),
            ctypes.c_int(ruleset_fd),
            ctypes.c_int(RULE_PATH_BENEATH),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
        if result != 0:
            raise _syscall_error(f"landlock_add_rule({path})")
        return True
    finally:
        os.close(fd)


def restrict_self(writable: list[str], readable: list[str], abi: int) -> dict[str, bool]:
    """Apply the policy to this process and its future children; return which parts are enforced.

    `readable` are roots where reading and executing is allowed (pass ["/"] to leave reads unrestricted). The caller
    must have set no_new_privs first. Raises OSError if the kernel refuses the ruleset.
    """
    if abi < 1:
        raise OSError(95, "Landlock is not supported by this kernel")
    fs_rights = handled_fs_rights(abi)
    net_rights = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    attr = _RulesetAttr(handled_access_fs=fs_rights, handled_access_net=net_rights, scoped=scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset_fd = _libc.syscall(
        ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset_fd < 0:
        raise _syscall_error("landlock_create_ruleset")
    try:
        for path in readable:
            _add_path_rule(ruleset_fd, path, READ_ONLY)
        for path in writable:
            if not _add_path_rule(ruleset_fd, path, fs_rights):
                raise OSError(2, f"landlock: writable path {path} cannot be opened")
        _add_path_rule(ruleset_fd, "/dev/null", (FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE) & fs_rights)
        if _libc.syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)) != 0:
            raise _syscall_error("landlock_restrict_self")
    finally:
        os.close(ruleset_fd)
    return {"landlock_fs": True, "landlock_net": bool(net_rights), "landlock_scope": bool(scoped)}
