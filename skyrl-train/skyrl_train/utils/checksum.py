"""Order-sensitive tensor checksums, used to verify that an engine serves exactly the trained weights."""

from __future__ import annotations

import torch


def tensor_checksum(tensor: torch.Tensor) -> float:
    """A float64 checksum that changes when values change or move: sum of value * (1 + position / numel)."""
    flat = tensor.detach().to(device="cpu", dtype=torch.float64).flatten()
    if flat.numel() == 0:
        return 0.0
    weights = torch.linspace(1.0, 2.0, flat.numel(), dtype=torch.float64)
    return float((flat * weights).sum())
