"""The `InferenceEngine` interface every backend (hf, vllm, sglang, remote) implements."""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, Optional

import torch

from skyrl_train.inference.types import InferenceEngineInput, InferenceEngineOutput


class InferenceEngine(abc.ABC):
    """An async text-generation engine whose weights the trainer can replace.

    Lifecycle: `generate` any number of times; `sleep` frees memory while training runs and `wake_up` restores it;
    `pause` holds new requests (in-flight ones finish) and `resume` releases them; `update_weights` installs new
    weights and bumps `weight_version`, which every output reports.
    """

    @abc.abstractmethod
    async def generate(self, request: InferenceEngineInput) -> InferenceEngineOutput:
        """Generate `sampling_params.n` completions for each prompt."""

    @property
    @abc.abstractmethod
    def weight_version(self) -> int:
        """The version of the weights being served (0 = as loaded)."""

    @abc.abstractmethod
    async def sleep(self, level: int = 1) -> None:
        """Free memory: level 1 offloads weights and drops caches; level 2 discards weights (a sync must follow)."""

    @abc.abstractmethod
    async def wake_up(self) -> None:
        """Undo `sleep`."""

    @abc.abstractmethod
    async def pause(self) -> None:
        """Stop admitting new generate calls until `resume`; returns once in-flight calls finished."""

    @abc.abstractmethod
    async def resume(self) -> None:
        """Admit generate calls again."""

    async def init_weight_update(self, **kwargs: Any) -> None:
        """Prepare to receive weights (e.g. join a process group); engines that need nothing keep the default."""
        return None

    @abc.abstractmethod
    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Install new weights (all or a subset, by parameter name) and serve them as `version`."""

    @abc.abstractmethod
    async def reset_prefix_cache(self) -> None:
        """Drop cached prefixes computed with older weights."""

    async def take_cache_counts(self) -> dict[str, int]:
        """Counts of the engine's own prefix cache since the last call (`hits`, `misses`, `reused_tokens`,
        `prefilled_tokens`); `{}` for engines that report none."""
        return {}

    async def weights_checksum(self, names: Optional[list[str]] = None) -> dict[str, float]:
        """A per-parameter checksum of the served weights, for verifying a sync; engines may not support it."""
        raise NotImplementedError(f"{type(self).__name__} cannot report weight checksums")

    async def teardown(self) -> None:
        """Release everything; the engine is unusable afterwards."""
        return None
