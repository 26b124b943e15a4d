"""The collective backend of a device type (gloo on CPU, NCCL on CUDA), shared by the workers and weight sync."""

from __future__ import annotations

import torch

BACKEND_BY_DEVICE_TYPE = {"cpu": "gloo", "cuda": "nccl"}
"""Collective backend used for each device type: the same torch.distributed calls run on both."""


def backend_for(device: torch.device) -> str:
    """`gloo` for CPU, `nccl` for CUDA."""
    if device.type not in BACKEND_BY_DEVICE_TYPE:
        raise ValueError(
            f"no collective backend for device type {device.type!r}; expected {list(BACKEND_BY_DEVICE_TYPE)}"
        )
    return BACKEND_BY_DEVICE_TYPE[device.type]


def default_group_backend(device: torch.device, cpu_tensors: bool = False) -> str:
    """The workers' default process group backend: `backend_for(device)`, plus gloo for CPU tensors on CUDA when
    `cpu_tensors` (FSDP2's CPU offload keeps gradients on CPU, and clipping all-reduces their norms: NCCL has no CPU
    tensors, so an NCCL-only group fails at the first optimizer step with "No backend type associated with device
    type cpu")."""
    backend = backend_for(device)
    if device.type == "cuda" and cpu_tensors:
        return f"cpu:{BACKEND_BY_DEVICE_TYPE['cpu']},cuda:{backend}"
    return backend
