"""NovaSky-AI/SkyRL's custom-policy-loss example at this module path, so its run script starts unchanged here.

    python -m examples.algorithm.custom_policy_loss.main_custom_policy_loss \
        trainer.algorithm.policy_loss_type=reinforce <overrides> [--dry-run]

Registers `reinforce` (plain policy gradient: -log_prob * advantage per token, no ratio, no clipping) with this
project's registry, then runs `main_base`; see docs/migrating-from-skyrl.md.
"""

from typing import Any, Optional

import torch

from skyrl_train.algorithms.policy_loss_config import as_policy_loss_config
from skyrl_train.algorithms.policy_losses import finalize_policy_loss
from skyrl_train.algorithms.registry import register_policy_loss
from skyrl_train.entrypoints.upstream_modules import run_upstream_module


@register_policy_loss("reinforce", overwrite=True)
def reinforce_loss(
    *,
    log_probs: torch.Tensor,
    old_log_probs: Optional[torch.Tensor],
    advantages: Optional[torch.Tensor],
    loss_mask: torch.Tensor,
    config: Any = None,
    rollout_log_probs: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """REINFORCE: per-token loss -log_prob * advantage, reduced by the configured loss reduction."""
    if advantages is None:
        raise ValueError("the reinforce loss needs advantages")
    per_token = -log_probs * advantages.detach().float()
    return finalize_policy_loss(
        per_token,
        loss_mask=loss_mask,
        config=as_policy_loss_config(config),
        old_log_probs=old_log_probs,
        rollout_log_probs=rollout_log_probs,
        metrics={},
    )


if __name__ == "__main__":
    run_upstream_module("examples.algorithm.custom_policy_loss.main_custom_policy_loss")
