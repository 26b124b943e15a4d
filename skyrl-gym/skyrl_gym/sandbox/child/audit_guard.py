"""Install an in-interpreter audit hook that refuses process creation, network connections and writes outside the
sandbox directory; stdlib only.

Audit hooks are not a security boundary on their own (the kernel layers are); this guard turns the common escape
attempts into a clean `PermissionError` and catches what a missing kernel layer would let through.
"""

from __future__ import annotations

import os
import sys

_ALWAYS_BLOCKED = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.killpg",
        "subprocess.Popen",
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "signal.pthread_kill",
    }
)
# Events whose listed argument positions are paths that get modified.
_PATH_EVENTS: dict[str, tuple[int, ...]] = {
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.rename": (0, 1),
    "os.mkdir": (0,),
    "os.symlink": (1,),
    "os.link": (0, 1),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.truncate": (0,),
    "os.utime": (0,),
    "os.chflags": (0,),
    "os.lchflags": (0,),
    "os.setxattr": (0,),
    "os.removexattr": (0,),
    "shutil.rmtree": (0,),
}
_BLOCKED_IMPORTS = frozenset({"ctypes", "_ctypes"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_WRITABLE_DEVICES = frozenset({"/dev/null"})


def _refuse(*_args: object, **_kwargs: object) -> None:
    raise PermissionError("sandbox: starting processes is not allowed")


def install(sandbox_dir: str) -> None:
    """Add the guard to this interpreter; from now on the listed events raise PermissionError."""
    root = os.path.realpath(sandbox_dir)
    realpath, join, getcwd, fspath, fsdecode, getpid = (
        os.path.realpath,
        os.path.join,
        os.getcwd,
        os.fspath,
        os.fsdecode,
        os.getpid,
    )

    def inside(path: object) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor
        try:
            text = fsdecode(fspath(path))
            resolved = realpath(join(getcwd(), text))
        except Exception:
            return False
        return resolved == root or resolved.startswith(root + "/") or resolved in _WRITABLE_DEVICES

    def opens_for_write(mode: object, flags: object) -> bool:
        if isinstance(mode, str) and any(ch in mode for ch in "wax+"):
            return True
        return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            if len(args) >= 3 and opens_for_write(args[1], args[2]) and not inside(args[0]):
                raise PermissionError(f"sandbox: writing outside the sandbox directory is not allowed: {args[0]!r}")
        elif event in _ALWAYS_BLOCKED:
            raise PermissionError(f"sandbox: '{event}' is not allowed")
        elif event == "os.kill":
            if args and args[0] != getpid():
                raise PermissionError("sandbox: signalling other processes is not allowed")
        elif event in _PATH_EVENTS:
            for position in _PATH_EVENTS[event]:
                if position < len(args) and not inside(args[position]):
                    raise PermissionError(f"sandbox: '{event}' outside the sandbox directory is not allowed")
        elif event.startswith("ctypes."):
            raise PermissionError(f"sandbox: '{event}' is not allowed")
        elif event == "import" and args and args[0] in _BLOCKED_IMPORTS:
            raise PermissionError(f"sandbox: importing {args[0]} is not allowed")

    for name in ("ctypes", "_ctypes", "ctypes._endian"):
        sys.modules.pop(name, None)
    try:
        import _posixsubprocess

        _posixsubprocess.fork_exec = _refuse  # its C entry point raises no audit event of its own
    except ImportError:
        pass
    sys.addaudithook(hook)
