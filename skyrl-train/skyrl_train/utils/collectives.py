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
