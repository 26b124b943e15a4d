"""The sandbox child's entry script: apply every defence layer to itself, then run the untrusted program.

Run as `python -I -B runner.py '<json config>'` with the sandbox directory as working directory. The order matters:
namespaces and mounts need the starting privileges; rlimits come after the user namespace (so RLIMIT_NPROC counts
only this sandbox's processes); privileges are dropped before Landlock; the seccomp filter follows Landlock (it needs
`no_new_privs`); the audit guard is installed last, just before the program runs. A JSON line per stage goes to the status descriptor so the parent can tell honestly which
layers were active. Stdlib only: the helpers are loaded by file path, never through the `skyrl_gym` package.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import resource
import signal
import sys
import sysconfig
import traceback
import types

MEMORY_ERROR_EXIT = 201
SETUP_FAILED_EXIT = 202
_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"_skyrl_sandbox_{name}", os.path.join(_HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _emit(fd: int, record: dict) -> None:
    data = (json.dumps(record) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def interpreter_paths() -> list[str]:
    """This interpreter's own folders: its standard library, its site-packages and its library folder (shared
    libraries an extension module may load, e.g. a conda `lib/`), as `sysconfig` names them. Not `sys.path`: a
    `.pth` file may add any folder to it (an editable install adds a source checkout)."""
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    paths = [sysconfig.get_path(name) for name in names] + [sysconfig.get_config_var("LIBDIR")]
    return sorted({os.path.realpath(path) for path in paths if path and os.path.isdir(path)})


def _enter_namespaces(kernel: types.ModuleType, config: dict, layers: dict, notes: dict) -> None:
    wanted = config["layers"]
    is_root = os.geteuid() == 0
    requested = {}
    if wanted.get("network_namespace"):
        requested["network_namespace"] = kernel.CLONE_NEWNET
    if wanted.get("pid_namespace"):
        requested["pid_namespace"] = kernel.CLONE_NEWPID
    if config.get("expose_python") and is_root:
        requested["mount_namespace"] = kernel.CLONE_NEWNS
    if not requested:
        return
    base = 0 if is_root else kernel.CLONE_NEWUSER  # without root, namespaces need a user namespace of their own
    combined = base
    for flag in requested.values():
        combined |= flag
    try:
        kernel.unshare(combined)
        layers.update(dict.fromkeys(requested, True))
        return
    except OSError as exc:
        first_error = _reason(exc)
    for name, flag in requested.items():  # fall back to whatever subset works
        try:
            kernel.unshare(base | flag)
            layers[name] = True
            base = 0  # the user namespace, if any, exists now
        except OSError as exc:
            layers[name] = False
            notes[name] = f"{_reason(exc)} (combined attempt: {first_error})"


def _expose_python(kernel: types.ModuleType, config: dict, layers: dict, notes: dict) -> None:
    if not layers.get("mount_namespace"):
        return
    try:
        exposed = kernel.expose_paths(interpreter_paths(), config["uid"], config["gid"], config["dir"])
        notes["mount_namespace"] = f"re-exposed {exposed}" if exposed else "nothing to re-expose"
    except OSError as exc:
        layers["mount_namespace"] = False
        notes["mount_namespace"] = _reason(exc)


def _set_rlimits(limits: dict, layers: dict, notes: dict) -> None:
    table = {
        "cpu": resource.RLIMIT_CPU,
        "as": resource.RLIMIT_AS,
        "nproc": resource.RLIMIT_NPROC,
        "fsize": resource.RLIMIT_FSIZE,
        "nofile": resource.RLIMIT_NOFILE,
        "core": resource.RLIMIT_CORE,
    }
    failed = []
    for key, which in table.items():
        if key not in limits:
            continue
        soft = int(limits[key])
        hard = soft  # for CPU: SIGKILL at the limit (a PID namespace's init would ignore SIGXCPU)
        try:
            current_hard = resource.getrlimit(which)[1]
            if current_hard != resource.RLIM_INFINITY:
                soft, hard = min(soft, current_hard), min(hard, current_hard)
            resource.setrlimit(which, (soft, hard))
        except (OSError, ValueError) as exc:
            failed.append(f"{key}: {_reason(exc)}")
    layers["rlimits"] = not failed
    if failed:
        notes["rlimits"] = "; ".join(failed)


def _drop_privileges(config: dict, layers: dict, notes: dict) -> None:
    uid, gid = config.get("uid"), config.get("gid")
    if os.geteuid() != 0:
        layers["unprivileged_uid"] = True  # never had root in the first place
        return
    if uid is None:
        layers["unprivileged_uid"] = False
        notes["unprivileged_uid"] = "running as root: privilege dropping was disabled"
        return
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        try:
            os.setuid(0)
            regained = True
        except PermissionError:
            regained = False
        layers["unprivileged_uid"] = not regained and os.getresuid() == (uid, uid, uid)
    except OSError as exc:
        layers["unprivileged_uid"] = False
        notes["unprivileged_uid"] = _reason(exc)


def _apply_landlock(landlock: types.ModuleType, kernel: types.ModuleType, config: dict, layers: dict, notes: dict):
    try:
        kernel.set_no_new_privs()
        layers["no_new_privs"] = True
    except OSError as exc:
        layers["no_new_privs"] = False
        notes["no_new_privs"] = _reason(exc)
    if not config["layers"].get("landlock"):
        return 0
    abi = landlock.abi_version()
    for name in ("landlock_fs", "landlock_net", "landlock_scope"):
        layers[name] = False
    if abi < 1:
        notes["landlock_fs"] = "Landlock is not available in this kernel"
        return 0
    readable = config.get("readable")
    readable = ["/"] if readable is None else readable + interpreter_paths()
    try:
        layers.update(landlock.restrict_self([config["dir"]], readable, abi))
        if abi < 4:
            notes["landlock_net"] = f"Landlock ABI {abi} < 4 cannot restrict TCP"
    except OSError as exc:
        notes["landlock_fs"] = _reason(exc)
    return abi


def _missing(required: list, layers: dict) -> list:
    """The required entries no active layer satisfies (`a|b`: either layer will do)."""
    return [entry for entry in required if not any(layers.get(name) for name in entry.split("|"))]


def _missing_error(missing: list, notes: dict) -> str:
    why = "; ".join(f"{name}: {notes[name]}" for entry in missing for name in entry.split("|") if notes.get(name))
    return (
        f"required sandbox layers unavailable: {missing}{f' ({why})' if why else ''}; the program was not run. On a "
        "machine without them, set allow_degraded=True in the sandbox limits to run with the layers it has"
    )


def _apply_seccomp(seccomp: types.ModuleType, config: dict, layers: dict, notes: dict) -> None:
    if not config["layers"].get("seccomp"):
        return
    layers["seccomp"] = False
    if not layers.get("no_new_privs"):
        notes["seccomp"] = "a seccomp filter needs no_new_privs, which could not be set"
        return
    try:
        seccomp.install()
        layers["seccomp"] = True
    except OSError as exc:
        notes["seccomp"] = _reason(exc)


def _supervise(child: int, status_fd: int) -> None:
    """Wait for the namespace's first process, report how it ended, and end the same way.

    SIGTERM from the parent (on timeout) makes the supervisor SIGKILL the program and still reap and report it.
    """
    os.close(0)
    _, status, usage = os.wait4(child, 0)
    record = {"stage": "exit", "cpu_s": usage.ru_utime + usage.ru_stime, "maxrss_kb": usage.ru_maxrss}
    if os.WIFSIGNALED(status):
        record["signal"] = os.WTERMSIG(status)
    else:
        record["exit_code"] = os.waitstatus_to_exitcode(status)
    with contextlib.suppress(OSError):
        _emit(status_fd, record)
    if "signal" in record:
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
            signal.signal(record["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), record["signal"])
        os._exit(128 + record["signal"])
    os._exit(record["exit_code"])


def _run_program(path: str, source: str) -> None:
    """Execute the program as `__main__`, printing tracebacks without this runner's frames."""
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    sys.argv = [path]
    try:
        code = compile(source, path, "exec")
    except (SyntaxError, ValueError) as exc:  # ValueError: the source holds null bytes
        traceback.print_exception(type(exc), exc, None)
        sys.exit(1)
    try:
        exec(code, module.__dict__)
    except SystemExit:
        raise
    except MemoryError as exc:
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(MEMORY_ERROR_EXIT)
    except BaseException as exc:
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
        sys.exit(1)


def main() -> None:
    """Read the config, harden this process layer by layer, report, and run the program."""
    config = json.loads(sys.argv[1])
    status_fd = config["status_fd"]
    kernel, landlock, seccomp, audit_guard = _load("kernel"), _load("landlock"), _load("seccomp"), _load("audit_guard")
    program = os.path.join(config["dir"], config["program"])
    with open(program, encoding="utf-8") as handle:
        source = handle.read()
    layers: dict[str, bool] = {}
    notes: dict[str, str] = {}
    _enter_namespaces(kernel, config, layers, notes)
    _expose_python(kernel, config, layers, notes)
    _set_rlimits(config["rlimits"], layers, notes)
    _drop_privileges(config, layers, notes)
    abi = _apply_landlock(landlock, kernel, config, layers, notes)
    _apply_seccomp(seccomp, config, layers, notes)
    kernel_required = [entry for entry in config.get("required", []) if entry != "audit_guard"]
    missing = _missing(kernel_required, layers)
    _emit(status_fd, {"stage": "setup", "layers": layers, "notes": notes, "landlock_abi": abi, "uid": os.getuid()})
    if missing:
        _emit(status_fd, {"stage": "error", "error": _missing_error(missing, notes)})
        os._exit(SETUP_FAILED_EXIT)
    if layers.get("pid_namespace"):
        forked: list[int] = []
        signal.signal(signal.SIGTERM, lambda *_: forked and os.kill(forked[0], signal.SIGKILL))
        child = os.fork()  # the first process forked after unshare(CLONE_NEWPID) is the namespace's init
        if child:
            forked.append(child)
            _supervise(child, status_fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with contextlib.suppress(OSError):  # killing the supervisor then takes the namespace with it
            kernel.set_parent_death_signal(signal.SIGKILL)
    guard = {"audit_guard": False}
    if config["layers"].get("audit_guard"):
        try:
            audit_guard.install(config["dir"])
            guard["audit_guard"] = True
        except Exception as exc:  # report, never run unguarded silently
            guard["note"] = _reason(exc)
    _emit(status_fd, {"stage": "guard", **guard})
    if "audit_guard" in config.get("required", []) and not guard["audit_guard"]:
        _emit(
            status_fd, {"stage": "error", "error": _missing_error(["audit_guard"], {"audit_guard": guard.get("note")})}
        )
        os._exit(SETUP_FAILED_EXIT)
    os.close(status_fd)
    for name in list(sys.modules):
        if name.startswith("_skyrl_sandbox_"):
            del sys.modules[name]
    _run_program(config["program"], source)


if __name__ == "__main__":
    main()
