"""Checks of the Megatron strategy's optimizer settings (`trainer.<role>.megatron.optimizer_*`, SkyRL's
`megatron_config.optimizer_config_kwargs.*`): errors for settings that cannot work, warnings for ones megatron-core
ignores as given (SkyRL's scripts set the offload fraction with the offload off, so that one runs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skyrl_train.config.root import SkyRLConfig


def check_megatron_optimizer(cfg: SkyRLConfig) -> Iterator[str]:
    """Errors: an offload fraction outside [0, 1], offload on with nothing to offload, and optimizer settings on the
    reference model (it has no optimizer) or under another strategy (nothing else reads them)."""
    for role in ("policy", "ref"):
        megatron, prefix = getattr(cfg.trainer, role).megatron, f"trainer.{role}.megatron"
        offload, fraction = megatron.optimizer_cpu_offload, megatron.optimizer_offload_fraction
        switched_on = offload or megatron.use_precision_aware_optimizer or megatron.overlap_cpu_optimizer_d2h_h2d
        if not 0.0 <= fraction <= 1.0:
            yield f"{prefix}.optimizer_offload_fraction={fraction}: expected a share between 0 and 1"
        elif offload and fraction == 0.0:
            yield (
                f"{prefix}.optimizer_cpu_offload=true with optimizer_offload_fraction=0 offloads nothing: set the share"
                " of the optimizer state to keep on the CPU, e.g. optimizer_offload_fraction=1.0"
            )
        if switched_on and cfg.trainer.strategy != "megatron":
            yield (
                f"{prefix}: optimizer_cpu_offload, overlap_cpu_optimizer_d2h_h2d and use_precision_aware_optimizer are"
                f" megatron-core optimizer settings, read only with trainer.strategy=megatron (this run:"
                f" {cfg.trainer.strategy})"
            )
        elif switched_on and role == "ref":
            yield f"{prefix}: the reference model has no optimizer; its optimizer settings would do nothing"


def warn_inert_megatron_optimizer(cfg: SkyRLConfig) -> Iterator[str]:
    """Warnings: an offload fraction or overlap set while `optimizer_cpu_offload` is off, which megatron-core
    ignores."""
    if cfg.trainer.strategy != "megatron":
        return
    for role in ("policy", "ref"):
        megatron, prefix = getattr(cfg.trainer, role).megatron, f"trainer.{role}.megatron"
        if megatron.optimizer_cpu_offload:
            continue
        if megatron.optimizer_offload_fraction > 0.0:
            yield (
                f"{prefix}.optimizer_offload_fraction={megatron.optimizer_offload_fraction} does nothing while"
                f" {prefix}.optimizer_cpu_offload is false: the whole optimizer state stays on the GPU"
            )
        if megatron.overlap_cpu_optimizer_d2h_h2d:
            yield (
                f"{prefix}.overlap_cpu_optimizer_d2h_h2d=true does nothing while {prefix}.optimizer_cpu_offload is"
                " false: there is no CPU optimizer step to overlap"
            )
