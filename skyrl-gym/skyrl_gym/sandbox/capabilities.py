"""Probe once which defence layers this machine supports, cache the answer, and warn once per missing layer that a
run does not require (a required one is requested anyway, and the runner refuses to start the program without it)."""

from __future__ import annotations

import logging
import os
import threading
from typing import Optional

from skyrl_gym.sandbox.limits import SandboxLimits

logger = logging.getLogger("skyrl_gym.sandbox")

_SWITCHES = {  # SandboxLimits switch (also the runner's request key) -> the layer it shows up as in results
    "network_namespace": "network_namespace",
    "pid_namespace": "pid_namespace",
    "landlock": "landlock_fs",
    "seccomp": "seccomp",
    "audit_guard": "audit_guard",
}
_lock = threading.Lock()
_probed: Optional[dict[str, bool]] = None
_notes: dict[str, str] = {}
_warned: set[str] = set()


def sandbox_capabilities(refresh: bool = False) -> dict[str, bool]:
    """Which layers a sandboxed run gets on this machine, found by one probe run with every layer requested.

    The probe runs once per process (thread-safe) and is cached; `refresh=True` probes again.
    """
    global _probed
    with _lock:
        if _probed is None or refresh:
            from skyrl_gym.sandbox.launch import run_python

            probe = SandboxLimits(timeout_s=10.0, allow_degraded=True)  # a probe reports, it requires nothing
            result = run_python("pass", limits=probe, _layers=dict.fromkeys(_SWITCHES, True))
            _probed = dict(result.layers)
            _notes.clear()
            _notes.update(result.layer_notes)
            if result.error:
                _notes["probe"] = result.error
        return dict(_probed)


def capability_notes() -> dict[str, str]:
    """Why probed layers are unavailable (empty until `sandbox_capabilities` ran)."""
    with _lock:
        return dict(_notes)


def warn_once(layer: str, reason: str) -> None:
    """Log a warning the first time a requested layer turns out to be unavailable."""
    with _lock:
        if layer in _warned:
            return
        _warned.add(layer)
    logger.warning("sandbox layer '%s' is unavailable on this machine and was skipped: %s", layer, reason)


def layers_to_request(limits: SandboxLimits) -> dict[str, bool]:
    """The runner's layer switches for `limits`: what the caller asked for and the machine supports."""
    available = sandbox_capabilities()
    notes = capability_notes()
    required = {entry for entry in limits.requirements if "|" not in entry}  # a layer one of two may go missing
    request: dict[str, bool] = {}
    for switch, layer in _SWITCHES.items():
        wanted = bool(getattr(limits, switch))
        if wanted and not available.get(layer, False) and layer not in required:
            warn_once(layer, notes.get(layer, "not available"))
            wanted = False  # checked once: do not retry a layer the machine lacks on every run
        request[switch] = wanted
    if os.geteuid() == 0 and limits.drop_privileges and not available.get("unprivileged_uid", False):
        warn_once("unprivileged_uid", notes.get("unprivileged_uid", "could not switch to an unprivileged uid"))
    return request
