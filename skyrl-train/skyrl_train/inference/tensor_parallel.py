"""Where a tensor-parallel vllm engine's pieces go: whether its ranks run as Ray workers of vLLM's Ray executor, and
which bundles of its placement group the actor and each rank take. Placement (`skyrl_train.placement`) reserves the
bundles; the engine actors (`ray_engine`) place themselves and tell vLLM by these rules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional


def runs_vllm_ray_workers(backend: str, tensor_parallel_size: int, device: str) -> bool:
    """Whether an engine runs its tensor-parallel ranks as Ray workers of vLLM's Ray executor (vllm, size > 1, CUDA)."""
    return backend == "vllm" and tensor_parallel_size > 1 and device.split(":")[0] == "cuda"


@dataclass(frozen=True)
class TensorParallelLayout:
    """Where the pieces of one tensor-parallel vllm engine go in its placement group: its actor's bundle and GPU
    share, and the bundles (one per tensor-parallel rank, rank order) and GPU share of the Ray workers vLLM starts."""

    actor_bundle: int
    actor_gpus: float
    worker_bundles: tuple[int, ...]
    worker_gpus: float


def vllm_tensor_parallel_layout(
    index: int, tensor_parallel_size: int, bundles: Optional[Sequence[int]], gpu_share: float
) -> TensorParallelLayout:
    """Engine `index`'s layout: `tp` bundles from position `index * tp` of `bundles` (the slot's bundles in rank
    order, grouped by node; None: bundle k is the k-th), each giving the engine `gpu_share` of its GPU (colocated:
    1 / the roles sharing it; separate: 1). The actor and rank 0's worker share the first bundle's share half and half
    (the actor receives the weights on that GPU and hands them to vLLM); every worker asks for the same half, so each
    rank's GPU keeps the other half of the engine's share unused."""
    if tensor_parallel_size < 2:
        raise ValueError(f"a tensor-parallel layout needs tensor_parallel_size >= 2, got {tensor_parallel_size}")
    if not 0 < gpu_share <= 1:
        raise ValueError(f"an engine's GPU share of a bundle must be in (0, 1], got {gpu_share}")
    start, stop = index * tensor_parallel_size, (index + 1) * tensor_parallel_size
    if bundles is None:
        bundles = range(stop)
    if len(bundles) < stop:
        raise ValueError(
            f"engine {index} with tensor_parallel_size={tensor_parallel_size} needs bundles {start}..{stop - 1} of its"
            f" placement group's {len(bundles)}"
        )
    worker_bundles = tuple(bundles[start:stop])
    half = gpu_share / 2
    return TensorParallelLayout(worker_bundles[0], half, worker_bundles, half)
