"""A seccomp filter for the sandboxed program: deny the system calls that widen the kernel's attack surface; stdlib only.

The other layers decide what the program may touch; this one removes kernel interfaces a plain Python program never
needs and that local privilege escalations keep finding bugs in: io_uring, eBPF, userfaultfd, perf events, ptrace
and cross-process memory access, keyrings, module and kexec loading, mounting, and new namespaces (`unshare`,
`setns`, and `clone` with a namespace flag). Those calls fail with EPERM; `clone3` fails with ENOSYS, which makes the C
library fall back to `clone` (whose flags the filter can read). Calls made through another ABI than the process's own
(x32, or 32-bit calls from a 64-bit process) are denied too, so the table cannot be sidestepped. Needs
`no_new_privs`; x86_64 and aarch64 only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
_LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_IF_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_IF_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JUMP_IF_ANY_BIT = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RETURN = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_NAMESPACE_FLAGS = 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00020000
_X32_BIT = 0x40000000

_SHARED = {  # the numbers every architecture added since Linux 5.1 shares
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
}
ARCHITECTURES = {  # machine -> (AUDIT_ARCH_*, the denied calls' numbers, clone, clone3)
    "x86_64": (
        0xC000003E,
        {
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "bpf": 321,
            "userfaultfd": 323,
            "perf_event_open": 298,
            "unshare": 272,
            "setns": 308,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            **_SHARED,
        },
        56,
        435,
    ),
    "aarch64": (
        0xC00000B7,
        {
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "bpf": 280,
            "userfaultfd": 282,
            "perf_event_open": 241,
            "unshare": 97,
            "setns": 268,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            **_SHARED,
        },
        220,
        435,
    ),
}


def _op(code: int, k: int, jump_true: int = 0, jump_false: int = 0) -> bytes:
    return struct.pack("HBBI", code, jump_true, jump_false, k)


def build_filter(machine: str) -> bytes:
    """The BPF program (packed `struct sock_filter`s) for `machine`; KeyError for an architecture without a table."""
    arch, denied, clone, clone3 = ARCHITECTURES[machine]
    deny = _op(_RETURN, _ERRNO | errno.EPERM)
    program = [_op(_LOAD_WORD, 4), _op(_JUMP_IF_EQUAL, arch, 1, 0), deny, _op(_LOAD_WORD, 0)]
    if machine == "x86_64":
        program += [_op(_JUMP_IF_AT_LEAST, _X32_BIT, 0, 1), deny]
    for number in sorted(set(denied.values())):
        program += [_op(_JUMP_IF_EQUAL, number, 0, 1), deny]
    program += [_op(_JUMP_IF_EQUAL, clone3, 0, 1), _op(_RETURN, _ERRNO | errno.ENOSYS)]
    program += [
        _op(_JUMP_IF_EQUAL, clone, 0, 3),
        _op(_LOAD_WORD, 16),  # the low half of the first argument: clone's flags
        _op(_JUMP_IF_ANY_BIT, _NAMESPACE_FLAGS, 0, 1),
        deny,
        _op(_RETURN, _ALLOW),
    ]
    return b"".join(program)


def install() -> None:
    """Apply the filter to this thread and every process it starts; raises OSError (unsupported architecture, no
    seccomp in the kernel, or `no_new_privs` not set)."""
    machine = platform.machine()
    if machine not in ARCHITECTURES:
        raise OSError(errno.ENOSYS, f"no system call table for the {machine} architecture")
    program = build_filter(machine)
    filters = ctypes.create_string_buffer(program, len(program))

    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Program(len(program) // 8, ctypes.addressof(filters))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl(PR_SET_SECCOMP) failed: {os.strerror(code)}")
