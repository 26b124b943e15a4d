"""SandboxLimits validation and config parsing, and SandboxResult's derived fields (no subprocesses)."""

import logging
import signal

import pytest

from skyrl_gym.sandbox import SandboxLimits, SandboxResult, capabilities
from skyrl_gym.sandbox.launch import _memory_exhausted, _parse_status
from skyrl_gym.sandbox.workdir import minimal_env


@pytest.mark.parametrize(
    "field, value",
    [
        ("timeout_s", 0),
        ("timeout_s", -1.0),
        ("timeout_s", float("inf")),
        ("memory_mb", 0),
        ("max_output_bytes", -5),
        ("max_processes", True),
        ("cpu_time_s", 0),
        ("max_open_files", 3),
        ("sandbox_uid", 0),
    ],
)
def test_bad_limit_values_raise_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SandboxLimits(**{field: value})


def test_unknown_required_layer_is_rejected():
    with pytest.raises(ValueError, match="required_layers.*'selinux'"):
        SandboxLimits(required_layers=("selinux",))


def test_cpu_limit_defaults_to_timeout_plus_one_second():
    assert SandboxLimits(timeout_s=2.5).effective_cpu_time_s == 4
    assert SandboxLimits(timeout_s=6, cpu_time_s=1.2).effective_cpu_time_s == 2


def test_from_mapping_accepts_fields_and_rejects_unknown_keys():
    limits = SandboxLimits.from_mapping({"timeout_s": 3, "readable_paths": ["/data"]})
    assert limits.timeout_s == 3 and limits.readable_paths == ("/data",)
    with pytest.raises(ValueError, match=r"my config: unknown keys \['timeout'\]"):
        SandboxLimits.from_mapping({"timeout": 3}, where="my config")


def test_minimal_env_inherits_nothing(monkeypatch):
    monkeypatch.setenv("SKYRL_TEST_SECRET", "hunter2")
    env = minimal_env("/tmp/x", {"EXTRA": "1"})
    assert "SKYRL_TEST_SECRET" not in env and env["HOME"] == "/tmp/x" and env["EXTRA"] == "1"


def test_status_lines_merge_layers_and_skip_garbage():
    raw = (
        b'{"stage": "setup", "layers": {"rlimits": true, "landlock_fs": false}, "notes": {"landlock_fs": "no"}, '
        b'"landlock_abi": 0, "uid": 7}\nnot json\n{"stage": "guard", "audit_guard": true}\n'
        b'{"stage": "exit", "exit_code": 3, "cpu_s": 0.5}\n'
    )
    status = _parse_status(raw)
    assert status["layers"] == {"rlimits": True, "landlock_fs": False, "audit_guard": True}
    assert status["notes"] == {"landlock_fs": "no"} and status["uid"] == 7
    assert status["exit"]["exit_code"] == 3


def test_memory_detection_rules():
    assert _memory_exhausted(201, None, "")
    assert _memory_exhausted(1, None, "Traceback...\nMemoryError\n")
    assert _memory_exhausted(None, signal.SIGABRT, "terminate called after throwing an instance of 'std::bad_alloc'")
    assert not _memory_exhausted(1, None, "Traceback...\nValueError: MemoryError is not this\n")
    assert not _memory_exhausted(0, None, "")


def test_result_properties():
    result = SandboxResult(
        exit_code=None,
        signal=int(signal.SIGKILL),
        stdout="",
        stderr="",
        timed_out=True,
        memory_exceeded=False,
        output_truncated=False,
        wall_time_s=1.0,
        layers={"rlimits": True, "landlock_fs": False, "audit_guard": True},
    )
    assert result.signal_name == "SIGKILL"
    assert not result.ok
    assert result.active_layers == ["audit_guard", "rlimits"]
    assert result.describe_exit() == "time limit exceeded"


def test_unavailable_layer_is_warned_about_once(caplog):
    capabilities._warned.discard("test_layer")
    with caplog.at_level(logging.WARNING, logger="skyrl_gym.sandbox"):
        capabilities.warn_once("test_layer", "not in this kernel")
        capabilities.warn_once("test_layer", "not in this kernel")
    messages = [r.getMessage() for r in caplog.records if "test_layer" in r.getMessage()]
    assert messages == ["sandbox layer 'test_layer' is unavailable on this machine and was skipped: not in this kernel"]


def test_required_layers_default_to_the_containment_layers_that_are_switched_on():
    always = ("rlimits", "unprivileged_uid", "no_new_privs")  # they work on any Linux
    assert SandboxLimits().requirements == (*always, "audit_guard", "landlock_fs", "network_namespace|landlock_net")
    assert SandboxLimits(landlock=False, audit_guard=False).requirements == (*always, "network_namespace")
    assert SandboxLimits(landlock=False, network_namespace=False).requirements[-1] == "audit_guard"
    assert SandboxLimits(allow_degraded=True).requirements == ()
    explicit = SandboxLimits(required_layers=["pid_namespace"], allow_degraded=True)
    assert explicit.requirements == ("pid_namespace",)
    with pytest.raises(ValueError, match=r"required_layers has unknown layers \['selinux'\]"):
        SandboxLimits(required_layers=("landlock_fs|selinux",))
    with pytest.raises(ValueError, match="allow_degraded must be true or false"):
        SandboxLimits(allow_degraded="yes")


def test_a_missing_required_layer_is_requested_anyway_and_others_are_dropped_with_a_warning(monkeypatch, caplog):
    probed = {layer: True for layer in ("network_namespace", "pid_namespace", "landlock_fs", "audit_guard")}
    probed.update(landlock_fs=False, pid_namespace=False)
    monkeypatch.setattr(capabilities, "sandbox_capabilities", lambda refresh=False: dict(probed))
    monkeypatch.setattr(capabilities, "capability_notes", lambda: {"landlock_fs": "kernel 5.10"})
    monkeypatch.setattr(capabilities, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="skyrl_gym.sandbox"):
        strict = capabilities.layers_to_request(SandboxLimits())
        degraded = capabilities.layers_to_request(SandboxLimits(allow_degraded=True))
    assert strict["landlock"] is True and strict["pid_namespace"] is False  # the runner then refuses to start
    assert degraded["landlock"] is False
    assert "sandbox layer 'landlock_fs' is unavailable on this machine and was skipped: kernel 5.10" in caplog.text
