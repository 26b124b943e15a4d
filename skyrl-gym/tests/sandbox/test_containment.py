"""The sandbox stops hostile programs: fork bombs, writes and reads outside, network, floods, loops, memory hogs.

Where a defence has several layers, each layer is also tested alone (the others switched off), so a regression in
one layer cannot hide behind another.
"""

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from skyrl_gym.sandbox import SandboxLimits, run_python, sandbox_capabilities

pytestmark = pytest.mark.integration

BASE = SandboxLimits(
    timeout_s=10.0, memory_mb=256, max_processes=8
)  # generous: a loaded CI machine starts Python slowly
ALL_LAYERS = {}
ONLY_LANDLOCK = {"audit_guard": False, "network_namespace": False}
ONLY_AUDIT = {"landlock": False, "network_namespace": False}
ONLY_NETNS = {"landlock": False, "audit_guard": False}
KERNEL_ONLY = {"audit_guard": False}


def _require(*layers: str) -> None:
    capabilities = sandbox_capabilities()
    missing = [layer for layer in layers if not capabilities.get(layer)]
    if missing:
        pytest.skip(f"this machine lacks sandbox layers {missing}")


def _leftover_processes(marker: str) -> list[int]:
    """Processes whose command line mentions `marker` (the run's private directory is in the runner's argv)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{entry}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != b"Z":
            found.append(int(entry))
    return found


@pytest.fixture
def open_dir():
    """A world-writable directory outside the sandbox, so only the sandbox (not file permissions) can stop a write."""
    path = tempfile.mkdtemp(prefix="skyrl-outside-")
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# ----- fork bombs -------------------------------------------------------------------------------------------------
COUNT_FORKS = """
import os, time
children = 0
for _ in range(64):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    children += 1
print(children, flush=True)
time.sleep(30)
"""

FORK_BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""


def test_process_limit_caps_forking_and_everything_is_killed():
    limits = BASE.replace(timeout_s=4.0, max_processes=6, audit_guard=False)  # the program sleeps 30 s after printing
    result = run_python(COUNT_FORKS, limits=limits)
    assert result.timed_out
    children = int(result.stdout.split()[0])
    assert 0 < children < 6  # the program itself (and its supervisor) count against the limit too
    assert _leftover_processes(result.sandbox_dir) == []


@pytest.mark.parametrize("layers", [ALL_LAYERS, KERNEL_ONLY], ids=["all-layers", "kernel-only"])
def test_fork_bomb_is_contained_and_machine_stays_healthy(layers):
    started = time.monotonic()
    result = run_python(FORK_BOMB, limits=BASE.replace(timeout_s=1.0, max_processes=8, **layers))
    assert time.monotonic() - started < 4
    assert result.timed_out  # the bomb swallows its fork errors, so only the wall clock ends it
    assert _leftover_processes(result.sandbox_dir) == []
    assert run_python("print('still fine')", limits=BASE).stdout == "still fine\n"


@pytest.mark.parametrize("pid_namespace", [True, False], ids=["pid-namespace", "uid-sweep"])
def test_escaping_the_process_group_does_not_survive_the_run(pid_namespace):
    if not pid_namespace and os.geteuid() != 0:
        pytest.skip("without a PID namespace only a root parent can sweep the run's private uid")
    program = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\ntime.sleep(60)\n"
    limits = BASE.replace(timeout_s=1.0, audit_guard=False, pid_namespace=pid_namespace)
    result = run_python(program, limits=limits)
    assert result.layers.get("pid_namespace", False) == pid_namespace
    assert result.timed_out
    time.sleep(0.2)
    assert _leftover_processes(result.sandbox_dir) == []


def test_starting_processes_is_refused_by_the_audit_guard():
    result = run_python("import subprocess\nsubprocess.run(['echo', 'hi'])", limits=BASE)
    assert result.exit_code == 1 and "subprocess.Popen' is not allowed" in result.stderr
    result = run_python("import os\nos.system('echo hi')", limits=BASE)
    assert "os.system' is not allowed" in result.stderr and "hi" not in result.stdout


# ----- the filesystem ---------------------------------------------------------------------------------------------
WRITE_PROGRAMS = {
    "open": "open({target!r}, 'w').write('pwned')",
    "os.open": "import os\nfd = os.open({target!r}, os.O_WRONLY | os.O_CREAT)\nos.write(fd, b'pwned')",
    "symlink": "import os\nos.symlink({target!r}, 'link')\nopen('link', 'w').write('pwned')",
}


@pytest.mark.parametrize("how", sorted(WRITE_PROGRAMS))
@pytest.mark.parametrize("layers", [ALL_LAYERS, ONLY_LANDLOCK, ONLY_AUDIT], ids=["all", "landlock", "audit"])
def test_write_outside_the_sandbox_is_blocked(open_dir, how, layers):
    if layers is ONLY_LANDLOCK:
        _require("landlock_fs")
    target = os.path.join(open_dir, "pwned.txt")
    result = run_python(WRITE_PROGRAMS[how].format(target=target), limits=BASE.replace(**layers))
    assert not os.path.exists(target), result
    assert result.exit_code == 1 and "PermissionError" in result.stderr


@pytest.mark.parametrize("layers", [ALL_LAYERS, ONLY_LANDLOCK, ONLY_AUDIT], ids=["all", "landlock", "audit"])
def test_deleting_outside_the_sandbox_is_blocked(open_dir, layers):
    if layers is ONLY_LANDLOCK:
        _require("landlock_fs")
    victim = os.path.join(open_dir, "keep.txt")
    with open(victim, "w") as handle:
        handle.write("keep")
    os.chmod(victim, 0o666)
    result = run_python(f"import os\nos.remove({victim!r})", limits=BASE.replace(**layers))
    assert os.path.exists(victim) and result.exit_code == 1


def test_reading_outside_allowed_roots_is_blocked(open_dir):
    _require("landlock_fs")
    secret = os.path.join(open_dir, "secret.txt")
    with open(secret, "w") as handle:
        handle.write("top secret")
    os.chmod(secret, 0o644)
    result = run_python(f"print(open({secret!r}).read())", limits=BASE)
    assert "top secret" not in result.stdout and "PermissionError" in result.stderr
    allowed = run_python(f"print(open({secret!r}).read())", limits=BASE.replace(readable_paths=(open_dir,)))
    assert allowed.stdout == "top secret\n"


DRIVER = """
import json, os
from skyrl_gym.sandbox import run_python

secret = os.path.join(os.path.dirname(os.path.abspath(__file__)), "secret.txt")
result = run_python(f"print(open({secret!r}).read())")
print(json.dumps({"stdout": result.stdout, "stderr": result.stderr, "error": result.error}))
"""


def test_the_driver_scripts_folder_and_cwd_stay_unreadable(open_dir):
    # security review #13: the parent's sys.path (whose first entry is the driver script's folder) was readable
    _require("landlock_fs")
    with open(os.path.join(open_dir, "secret.txt"), "w") as handle:
        handle.write("top secret")
    with open(os.path.join(open_dir, "driver.py"), "w") as handle:
        handle.write(DRIVER)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    completed = subprocess.run(
        [sys.executable, os.path.join(open_dir, "driver.py")], cwd=open_dir, env=env, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["error"] is None and "top secret" not in report["stdout"]
    assert "PermissionError" in report["stderr"]


SYSCALLS = """
import ctypes, threading
libc = ctypes.CDLL(None, use_errno=True)
for name, number, args in {calls!r}:
    result = libc.syscall(number, *args)
    print(name, result, ctypes.get_errno())
worker = threading.Thread(target=lambda: print("a thread ran"))
worker.start()
worker.join()
"""


def test_the_seccomp_filter_denies_kernel_interfaces_and_keeps_threads():
    # security review #23: no seccomp filter. ctypes stands in for a program past the audit guard, which is off here
    from skyrl_gym.sandbox.child.seccomp import ARCHITECTURES

    _require("seccomp")
    numbers = ARCHITECTURES[platform.machine()][1]
    calls = [
        ("unshare", numbers["unshare"], (0x10000000,)),  # a new user namespace
        ("io_uring_setup", numbers["io_uring_setup"], (1, 0)),
        ("bpf", numbers["bpf"], (0, 0, 0)),
    ]
    program = SYSCALLS.format(calls=calls)
    unfiltered = run_python(program, limits=BASE.replace(audit_guard=False, seccomp=False)).stdout.splitlines()
    if all(line.endswith(" -1 1") for line in unfiltered[:3]):
        pytest.skip(f"this machine refuses these calls with EPERM already: {unfiltered}")
    filtered = run_python(program, limits=BASE.replace(audit_guard=False))
    assert filtered.layers["seccomp"] is True
    assert filtered.stdout.splitlines() == ["unshare -1 1", "io_uring_setup -1 1", "bpf -1 1", "a thread ran"]  # EPERM


# ----- the network ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "layers", [ALL_LAYERS, ONLY_NETNS, ONLY_LANDLOCK, ONLY_AUDIT], ids=["all", "netns", "landlock", "audit"]
)
def test_network_connection_never_reaches_a_local_server(layers):
    if layers is ONLY_NETNS:
        _require("network_namespace")
    if layers is ONLY_LANDLOCK:
        _require("landlock_net")
        layers = {**layers, "network_namespace": False}
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        program = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hello')\n"
            "    print('connected')\n"
            "except OSError as exc:\n"
            "    print('blocked', type(exc).__name__)\n"
        )
        result = run_python(program, limits=BASE.replace(**layers))
        assert result.stdout.startswith("blocked"), result
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()


# ----- output, time and memory ------------------------------------------------------------------------------------
def test_output_flood_is_cut_at_the_cap_and_killed():
    cap = 64 * 1024
    started = time.monotonic()
    result = run_python("while True:\n    print('x' * 1000)", limits=BASE.replace(max_output_bytes=cap, timeout_s=5))
    assert result.output_truncated and not result.ok
    assert len(result.stdout.encode()) + len(result.stderr.encode()) <= cap
    assert len(result.stdout) > cap // 2  # it did capture output up to the cap
    assert time.monotonic() - started < 3  # killed at the cap, not at the timeout


def test_infinite_loop_is_killed_by_the_wall_clock():
    started = time.monotonic()
    result = run_python("while True:\n    pass", limits=BASE.replace(timeout_s=1.0))
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 3


def test_sleeping_program_is_killed_by_the_wall_clock():
    result = run_python("import time\ntime.sleep(60)", limits=BASE.replace(timeout_s=0.5))
    assert result.timed_out and result.wall_time_s < 2.5


def test_cpu_time_limit_stops_a_busy_program_before_the_wall_clock():
    result = run_python("while True:\n    pass", limits=BASE.replace(timeout_s=10.0, cpu_time_s=1))
    assert result.timed_out
    assert result.wall_time_s < 6 and result.cpu_time_s is not None and result.cpu_time_s >= 0.9


@pytest.mark.parametrize(
    "program",
    ["x = bytearray(4 * 1024 ** 3)", "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 ** 2))"],
    ids=["one-huge-block", "gradual"],
)
def test_memory_exhaustion_fails_and_is_reported(program):
    started = time.monotonic()
    result = run_python(program, limits=BASE.replace(memory_mb=256, timeout_s=5))
    assert result.memory_exceeded and not result.ok
    assert "MemoryError" in result.stderr
    assert time.monotonic() - started < 3
