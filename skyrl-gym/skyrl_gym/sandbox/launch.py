"""`run_python`: run untrusted Python source in a fresh sandboxed subprocess and report what happened."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from skyrl_gym.sandbox import processes, workdir
from skyrl_gym.sandbox.limits import SandboxLimits
from skyrl_gym.sandbox.result import SandboxResult
from skyrl_gym.sandbox.streams import pump

RUNNER = str(Path(__file__).resolve().parent / "child" / "runner.py")
PROGRAM_NAME = "main.py"
MEMORY_ERROR_EXIT = 201  # keep in sync with child/runner.py
SETUP_FAILED_EXIT = 202
_SYSTEM_READABLE = (
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    "/etc",
    "/opt",
    "/dev/null",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
    "/sys/devices/system/cpu",
)
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")


def _runner_config(
    limits: SandboxLimits, work: str, status_fd: int, uid: Optional[int], gid: Optional[int], layers: Mapping
) -> dict[str, Any]:
    """The runner's JSON config. Readable are the system folders and `readable_paths`; the runner adds its own
    interpreter's folders (`child/runner.py:interpreter_paths`), never this process's `sys.path`: its first entry is
    the driver script's folder (or the cwd under `python -m`), which may hold anything."""
    readable = None
    if limits.restrict_reads:
        readable = list(_SYSTEM_READABLE) + list(limits.readable_paths)
    return {
        "dir": work,
        "program": PROGRAM_NAME,
        "status_fd": status_fd,
        "uid": uid,
        "gid": gid,
        "layers": dict(layers),
        "required": list(limits.requirements),
        "readable": readable,
        "expose_python": uid is not None,
        "rlimits": {
            "cpu": limits.effective_cpu_time_s,
            "as": int(limits.memory_mb * 1024 * 1024),
            "nproc": int(limits.max_processes),
            "fsize": int(limits.max_file_size_mb * 1024 * 1024),
            "nofile": int(limits.max_open_files),
            "core": 0,
        },
    }


def _parse_status(raw: bytes) -> dict[str, Any]:
    """Merge the runner's JSON status lines into one dict (later stages override earlier ones)."""
    merged: dict[str, Any] = {"layers": {}, "notes": {}}
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        stage = record.get("stage")
        if stage == "setup":
            merged["layers"].update(record.get("layers", {}))
            merged["notes"].update(record.get("notes", {}))
            merged["landlock_abi"] = record.get("landlock_abi", 0)
            merged["uid"] = record.get("uid")
        elif stage == "guard":
            merged["layers"]["audit_guard"] = bool(record.get("audit_guard"))
            if record.get("note"):
                merged["notes"]["audit_guard"] = record["note"]
        elif stage in ("exit", "error"):
            merged[stage] = record
    return merged


def _pid_namespace_was_active(raw_status: bytes) -> bool:
    return bool(_parse_status(bytes(raw_status))["layers"].get("pid_namespace"))


def _memory_exhausted(exit_code: Optional[int], sig: Optional[int], stderr: str) -> bool:
    if exit_code == MEMORY_ERROR_EXIT:
        return True
    tail = [line for line in stderr.strip().splitlines()[-3:] if line.strip()]
    if tail and tail[-1].startswith("MemoryError"):
        return True
    crashed = sig in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS)
    return crashed and any(marker in stderr[-4000:] for marker in _MEMORY_MARKERS)


def run_python(
    source: str,
    stdin: str = "",
    limits: Optional[SandboxLimits] = None,
    files: Optional[Mapping[str, str]] = None,
    *,
    _layers: Optional[Mapping[str, bool]] = None,
) -> SandboxResult:
    """Run `source` as a Python program in the sandbox, feeding it `stdin`; never raises for the program's faults.

    `files` are extra text files (plain names) placed next to the program in its private working directory. The
    directory is removed afterwards. See `SandboxLimits` for the limits and layers, and `SandboxResult.layers` for
    which layers were really active.
    """
    limits = limits or SandboxLimits()
    if _layers is None:
        from skyrl_gym.sandbox.capabilities import layers_to_request

        _layers = layers_to_request(limits)
    uid, gid = workdir.choose_identity(limits.drop_privileges, limits.sandbox_uid)
    work = workdir.create_workdir(limits.base_dir, uid, gid)
    status_r = status_w = -1
    proc: Optional[subprocess.Popen] = None
    pidfd: Optional[int] = None
    started = time.monotonic()
    try:
        workdir.write_file(work, PROGRAM_NAME, source, uid, gid)
        for name, text in (files or {}).items():
            workdir.write_file(work, name, text, uid, gid)
        status_r, status_w = os.pipe()
        config = _runner_config(limits, work, status_w, uid, gid, _layers)
        python = limits.python_executable or sys.executable
        command = [python, "-I", "-B", "-X", "utf8", RUNNER, json.dumps(config)]
        started = time.monotonic()
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=work,
            env=workdir.minimal_env(work, limits.extra_env),
            start_new_session=True,
            close_fds=True,
            pass_fds=(status_w,),
        )
        os.close(status_w)
        status_w = -1
        try:
            pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            pidfd = None
        pid = proc.pid
        # pump closes the stdin descriptor it is given; give it its own duplicate and close the file object now,
        # so the same descriptor number is never closed twice (by then another thread may own that number).
        stdin_fd = os.dup(proc.stdin.fileno())
        proc.stdin.close()

        outcome = pump(
            stdin_fd=stdin_fd,
            stdin_data=stdin.encode("utf-8"),
            stdout_fd=proc.stdout.fileno(),
            stderr_fd=proc.stderr.fileno(),
            status_fd=status_r,
            deadline=started + limits.timeout_s,
            max_output_bytes=limits.max_output_bytes,
            exited=lambda: processes.has_exited(pid),
            exit_fd=pidfd,
            on_exit=lambda: processes.kill_group(pid),
        )
        supervised = _pid_namespace_was_active(outcome.status)
        processes.stop(pid, pidfd, supervised=supervised and not outcome.exited)
        if not outcome.exited:
            outcome.status += processes.read_available(status_r)  # the supervisor's final report
        if uid is not None and limits.sandbox_uid is None and not supervised:
            processes.kill_uid(uid)  # processes that left the group (setsid) and had no PID namespace to die with
        exit_code, sig, cpu = processes.reap(pid)
        wall = time.monotonic() - started
        proc.returncode = exit_code if exit_code is not None else -(sig or 0)
        return _build_result(outcome, exit_code, sig, cpu, wall, limits, uid, work)
    finally:
        if proc is not None:
            if proc.returncode is None:
                processes.kill_group(proc.pid)
                processes.reap(proc.pid)
                proc.returncode = -signal.SIGKILL
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.close()
        for fd in (status_r, status_w, pidfd):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        workdir.remove_workdir(work)


def _build_result(outcome, exit_code, sig, cpu, wall, limits: SandboxLimits, uid, work: str) -> SandboxResult:
    status = _parse_status(bytes(outcome.status))
    final = status.get("exit")
    if final:  # the program's own end and CPU time, reported by its PID-namespace supervisor
        exit_code, sig = final.get("exit_code"), final.get("signal")
        cpu = final.get("cpu_s", cpu)
    elif status["layers"].get("pid_namespace"):
        cpu = None  # the program itself was never reaped by us, so its CPU time is unknown
    stdout = bytes(outcome.stdout).decode("utf-8", "replace")
    stderr = bytes(outcome.stderr).decode("utf-8", "replace")
    killed_by_us = outcome.timed_out or outcome.output_truncated
    cpu_limit_hit = sig == signal.SIGXCPU or (  # RLIMIT_CPU's SIGKILL (CPU accounting may read a little low)
        sig == signal.SIGKILL and not killed_by_us and cpu is not None and cpu >= 0.9 * limits.effective_cpu_time_s
    )
    error = None
    if "error" in status:
        error = status["error"].get("error")
    elif not status["layers"] and not outcome.timed_out and not outcome.output_truncated:
        error = f"the sandbox runner failed before reporting (exit {exit_code}, signal {sig}): {stderr[-500:]}"
    return SandboxResult(
        exit_code=exit_code,
        signal=sig,
        stdout=stdout,
        stderr=stderr,
        timed_out=outcome.timed_out or cpu_limit_hit,
        memory_exceeded=_memory_exhausted(exit_code, sig, stderr),
        output_truncated=outcome.output_truncated,
        wall_time_s=wall,
        cpu_time_s=cpu,
        layers=dict(status["layers"]),
        layer_notes=dict(status["notes"]),
        landlock_abi=int(status.get("landlock_abi") or 0),
        uid=status.get("uid", uid),
        sandbox_dir=work,
        error=error,
    )
