"""run_python on ordinary programs: I/O, exit codes, environment, working directory and the layer report."""

import json
import os
import threading

import pytest

from skyrl_gym.sandbox import SandboxLimits, run_python, sandbox_capabilities

pytestmark = pytest.mark.integration

FAST = SandboxLimits(timeout_s=5.0)


def test_stdin_is_fed_and_stdout_captured():
    result = run_python("import sys\nfor line in sys.stdin: print(line.strip()[::-1])", stdin="abc\nxyz\n", limits=FAST)
    assert result.ok, result
    assert result.stdout == "cba\nzyx\n"
    assert result.exit_code == 0 and result.signal is None and not result.timed_out


def test_large_stdin_round_trips():
    data = "x" * 3_000_000
    result = run_python("import sys\nprint(len(sys.stdin.read()))", stdin=data, limits=FAST)
    assert result.stdout.strip() == str(len(data))


def test_exit_code_and_runtime_error_traceback():
    assert run_python("import sys; sys.exit(3)", limits=FAST).exit_code == 3
    result = run_python("def f():\n    raise ValueError('boom')\nf()\n", limits=FAST)
    assert result.exit_code == 1 and not result.ok
    assert result.stderr.rstrip().endswith("ValueError: boom")
    assert 'File "main.py", line 2, in f' in result.stderr
    assert "runner.py" not in result.stderr  # the runner's own frames are not shown


def test_syntax_error_is_reported_as_a_failed_run():
    result = run_python("def f(:\n    pass\n", limits=FAST)
    assert result.exit_code == 1 and "SyntaxError" in result.stderr


def test_child_does_not_see_parent_environment(monkeypatch):
    monkeypatch.setenv("SKYRL_SANDBOX_TEST_SECRET", "hunter2")
    result = run_python("import json, os\nprint(json.dumps(dict(os.environ)))", limits=FAST)
    env = json.loads(result.stdout)
    assert "SKYRL_SANDBOX_TEST_SECRET" not in env and "hunter2" not in result.stdout
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "OMP_NUM_THREADS"} | {
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "LC_CTYPE",
    }


def test_isolated_mode_flags_are_set():
    result = run_python("import sys\nprint(sys.flags.isolated, sys.flags.dont_write_bytecode)", limits=FAST)
    assert result.stdout.split() == ["1", "1"]


def test_private_workdir_is_usable_and_removed_afterwards():
    program = (
        "import json, os, tempfile\n"
        "open('out.txt', 'w').write('hi')\n"
        "os.makedirs('locked/a/b/c')\n"
        "open('locked/a/b/c/f', 'w').write('x')\n"
        "for d in ('locked/a/b/c', 'locked/a/b', 'locked/a', 'locked'):\n"
        "    os.chmod(d, 0)\n"
        "with tempfile.NamedTemporaryFile() as t:\n"
        "    t.write(b'ok')\n"
        "print(json.dumps([os.getcwd(), sorted(os.listdir('.')), tempfile.gettempdir(), open('data.txt').read()]))\n"
    )
    result = run_python(program, limits=FAST, files={"data.txt": "given"})
    assert result.ok, result.stderr
    cwd, listing, tmp, data = json.loads(result.stdout)
    assert cwd == tmp == result.sandbox_dir
    assert listing == ["data.txt", "locked", "main.py", "out.txt"] and data == "given"
    assert not os.path.exists(result.sandbox_dir)


def test_every_supported_layer_is_active_and_reported():
    capabilities = sandbox_capabilities()
    result = run_python("print('ok')", limits=FAST)
    assert result.ok
    for layer, available in capabilities.items():
        if available:
            assert result.layers.get(layer) is True, (layer, result.layers, result.layer_notes)
    assert result.layers.get("rlimits") and result.layers.get("audit_guard") and result.layers.get("unprivileged_uid")


def test_switched_off_layers_are_not_claimed():
    limits = FAST.replace(network_namespace=False, landlock=False, audit_guard=False)
    result = run_python("print('ok')", limits=limits)
    assert result.ok
    assert not result.layers.get("network_namespace") and not result.layers.get("landlock_fs")
    assert result.layers.get("audit_guard") is False


@pytest.mark.skipif(os.geteuid() != 0, reason="privilege dropping only happens when started as root")
def test_root_drops_to_a_fresh_unprivileged_uid():
    result = run_python("import os\nprint(os.getuid(), os.getgid(), os.getgroups())", limits=FAST)
    uid, gid, groups = result.stdout.split(" ", 2)
    assert int(uid) != 0 and int(gid) != 0 and int(uid) == result.uid
    assert groups.strip() in ("[]", f"[{gid}]")
    assert run_python("print(1)", limits=FAST).uid != result.uid  # per-run uids


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to turn privilege dropping off")
def test_missing_required_layer_stops_the_run_before_the_program():
    limits = FAST.replace(drop_privileges=False, required_layers=("unprivileged_uid",))
    result = run_python("print('the program ran')", limits=limits)
    assert result.error and "unprivileged_uid" in result.error
    assert "the program ran" not in result.stdout and not result.ok


def test_a_default_required_layer_that_is_not_applied_stops_the_run():
    # the run below asks the runner for no Landlock, as on a machine without it: the default requirements hold
    no_landlock = {"network_namespace": True, "pid_namespace": True, "landlock": False, "audit_guard": True}
    result = run_python("print('the program ran')", limits=FAST, _layers=no_landlock)
    assert not result.ok and "the program ran" not in result.stdout
    assert result.error.startswith("required sandbox layers unavailable: ['landlock_fs']; the program was not run")
    assert "set allow_degraded=True" in result.error
    degraded = run_python("print('the program ran')", limits=FAST.replace(allow_degraded=True), _layers=no_landlock)
    assert degraded.ok and degraded.stdout == "the program ran\n" and not degraded.layers.get("landlock_fs")


def test_concurrent_runs_from_threads_do_not_interfere():
    results = {}

    def work(n: int) -> None:
        results[n] = run_python(f"import time; time.sleep(0.2); print({n} * 2)", limits=FAST)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {n: r.stdout.strip() for n, r in results.items()} == {n: str(n * 2) for n in range(4)}


@pytest.mark.integration
def test_many_concurrent_runs_with_stdin_never_close_each_others_descriptors():
    # Regression: the stdin pipe was closed twice by number; under threads the second close hit another run's fd.
    results = {}

    def work(n: int) -> None:
        source = f"import sys; print(len(sys.stdin.read()) + {n})"
        results[n] = run_python(source, stdin="x" * (n * 1000), limits=FAST).stdout.strip()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n: str(n * 1001) for n in range(12)}
