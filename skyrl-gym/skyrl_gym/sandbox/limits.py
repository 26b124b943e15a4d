"""`SandboxLimits`: the resource limits and defence layers of one sandboxed run, validated on construction."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

# Layer names as they appear in `SandboxResult.layers`.
KERNEL_LAYERS = (
    "rlimits",
    "unprivileged_uid",
    "network_namespace",
    "pid_namespace",
    "mount_namespace",
    "no_new_privs",
    "landlock_fs",
    "landlock_net",
    "landlock_scope",
    "seccomp",
)
ALL_LAYERS = KERNEL_LAYERS + ("audit_guard",)

DEFAULT_REQUIRED_LAYERS = (
    "rlimits",
    "unprivileged_uid",
    "no_new_privs",
    "audit_guard",
    "landlock_fs",
    "network_namespace|landlock_net",
)
"""What a run requires unless `allow_degraded` is set (a switched-off layer is not required). The first four work on
any Linux. `landlock_fs` (kernel >= 5.13 with Landlock enabled) is the only layer that keeps the program from
reading the trainer's files and writing outside its folder; `network_namespace` (user namespaces) or `landlock_net`
(kernel >= 6.7) keeps it off the network, where a local Ray or engine port would run its requests outside the
sandbox. `a|b` means either one. `pid_namespace`, `mount_namespace`, `landlock_scope` and `seccomp` are applied when
available."""

_SWITCHED_BY = {  # layer -> the switch that turns it off (a layer no switch turns off is always attempted)
    "network_namespace": "network_namespace",
    "pid_namespace": "pid_namespace",
    "landlock_fs": "landlock",
    "landlock_net": "landlock",
    "landlock_scope": "landlock",
    "audit_guard": "audit_guard",
    "unprivileged_uid": "drop_privileges",
    "seccomp": "seccomp",
}


@dataclass(frozen=True)
class SandboxLimits:
    """Limits and defence switches for `run_python`.

    Every defence layer is on by default; the switches exist so tests can prove each layer on its own. A run fails
    closed: when a layer it requires (`required_layers`, by default `DEFAULT_REQUIRED_LAYERS`) is missing on this
    machine, the program is not started and the result carries an error naming the layer. The other layers are
    applied when the machine supports them (one warning per missing layer).
    """

    timeout_s: float = 6.0
    """Wall-clock limit; on expiry the whole process group is killed."""
    cpu_time_s: Optional[float] = None
    """RLIMIT_CPU in seconds; None means ceil(timeout_s) + 1."""
    memory_mb: int = 1024
    """RLIMIT_AS (address space) of each sandboxed process, in MiB."""
    max_output_bytes: int = 1 << 20
    """Cap on stdout + stderr together; the run is killed and marked truncated once it is exceeded."""
    max_processes: int = 16
    """RLIMIT_NPROC (processes and threads of the sandbox user) against fork bombs."""
    max_file_size_mb: int = 64
    """RLIMIT_FSIZE: the largest file the program may write, in MiB."""
    max_open_files: int = 256
    """RLIMIT_NOFILE."""
    restrict_reads: bool = True
    """With Landlock, allow reading only the Python installation, system directories and `readable_paths`."""
    readable_paths: tuple[str, ...] = ()
    """Extra directories the program may read when `restrict_reads` is on."""
    drop_privileges: bool = True
    """When started as root, run the program as an unprivileged uid/gid."""
    sandbox_uid: Optional[int] = None
    """The uid (and gid) to run as when dropping root. None (recommended) picks a fresh uid per run from a high
    range, so RLIMIT_NPROC counts only this run and leftovers can be swept by uid; a fixed uid (e.g. 65534) is
    shared by concurrent runs, which then share one process budget and are not swept."""
    network_namespace: bool = True
    """Run in a new, empty network namespace (loopback down, no routes)."""
    pid_namespace: bool = True
    """Run in a new PID namespace, so every descendant dies with the program."""
    landlock: bool = True
    """Apply a Landlock policy (filesystem writes, TCP, signals) when the kernel supports it."""
    seccomp: bool = True
    """Deny system calls that widen the kernel's attack surface (io_uring, bpf, userfaultfd, ptrace, new namespaces,
    mounts, keyrings, modules) with a seccomp filter (`child/seccomp.py`; x86_64 and aarch64)."""
    audit_guard: bool = True
    """Install the in-interpreter audit hook before the program runs."""
    required_layers: Optional[tuple[str, ...]] = None
    """Layers that must be active, else the program is not run and the result carries an error (`a|b`: either one).
    None means `DEFAULT_REQUIRED_LAYERS` minus the layers switched off here (or nothing with `allow_degraded`)."""
    allow_degraded: bool = False
    """On a machine that lacks default-required layers (old kernel, no user namespaces): run with the layers it has,
    after one warning per missing layer, instead of failing every call. An explicit `required_layers` still holds."""
    python_executable: Optional[str] = None
    """Interpreter to run; None means the current one (`sys.executable`)."""
    base_dir: Optional[str] = None
    """Where the private working directories are created; None means the system temp dir."""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    """Variables added to the minimal environment the program sees."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "max_output_bytes", "max_processes", "max_file_size_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive number, got {value!r}")
        if not math.isfinite(self.timeout_s):
            raise ValueError(f"SandboxLimits.timeout_s must be finite, got {self.timeout_s!r}")
        if self.cpu_time_s is not None and (isinstance(self.cpu_time_s, bool) or not self.cpu_time_s > 0):
            raise ValueError(f"SandboxLimits.cpu_time_s must be a positive number or None, got {self.cpu_time_s!r}")
        if not isinstance(self.max_open_files, int) or self.max_open_files < 16:
            raise ValueError(f"SandboxLimits.max_open_files must be an integer >= 16, got {self.max_open_files!r}")
        if self.sandbox_uid is not None and (
            not isinstance(self.sandbox_uid, int) or not 0 < self.sandbox_uid < 2**32 - 1
        ):
            raise ValueError(f"SandboxLimits.sandbox_uid must be a non-root uid, got {self.sandbox_uid!r}")
        if self.required_layers is not None:
            named = {layer for entry in self.required_layers for layer in str(entry).split("|")}
            unknown = sorted(named - set(ALL_LAYERS))
            if unknown:
                raise ValueError(
                    f"SandboxLimits.required_layers has unknown layers {unknown}; known: {list(ALL_LAYERS)}"
                )
            object.__setattr__(self, "required_layers", tuple(self.required_layers))
        if not isinstance(self.allow_degraded, bool):
            raise ValueError(f"SandboxLimits.allow_degraded must be true or false, got {self.allow_degraded!r}")
        object.__setattr__(self, "readable_paths", tuple(self.readable_paths))
        object.__setattr__(self, "extra_env", dict(self.extra_env))

    @property
    def requirements(self) -> tuple[str, ...]:
        """The layers this run requires (`a|b` entries: either one), after defaults and switches."""
        if self.required_layers is not None:
            return self.required_layers
        if self.allow_degraded:
            return ()
        kept = []
        for entry in DEFAULT_REQUIRED_LAYERS:
            switched_on = [layer for layer in entry.split("|") if self._switched_on(layer)]
            if switched_on:
                kept.append("|".join(switched_on))
        return tuple(kept)

    def _switched_on(self, layer: str) -> bool:
        switch = _SWITCHED_BY.get(layer)
        return switch is None or bool(getattr(self, switch))

    @property
    def effective_cpu_time_s(self) -> int:
        """The RLIMIT_CPU value actually applied, in whole seconds."""
        if self.cpu_time_s is not None:
            return max(1, math.ceil(self.cpu_time_s))
        return math.ceil(self.timeout_s) + 1

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The names accepted by `from_mapping`."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str = "sandbox config") -> SandboxLimits:
        """Build limits from a config mapping, rejecting unknown keys with a message naming them."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise ValueError(f"{where}: unknown keys {unknown}; known: {list(cls.field_names())}")
        converted = dict(values)
        for key in ("readable_paths", "required_layers"):
            if key in converted and converted[key] is not None:
                converted[key] = tuple(converted[key])
        return cls(**converted)

    def replace(self, **changes: Any) -> SandboxLimits:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)
