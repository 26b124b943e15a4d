"""NovaSky-AI/SkyRL's custom-advantage-estimator example at this module path, so its run script starts unchanged here.

    python -m examples.algorithm.custom_advantage_estimator.main_custom_adv_est \
        trainer.algorithm.advantage_estimator=simple_baseline <overrides> [--dry-run]

Registers `simple_baseline` (each sample's outcome score minus the batch's mean score, on every response token)
with this project's registry, then runs `main_base`; see docs/migrating-from-skyrl.md.
"""

from typing import Any

import torch

from skyrl_train.algorithms.registry import register_advantage_estimator
from skyrl_train.algorithms.rewards import sequence_scores
from skyrl_train.entrypoints.upstream_modules import run_upstream_module


@register_advantage_estimator("simple_baseline", overwrite=True)
@torch.no_grad()
def simple_baseline(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, **_unused: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantage = outcome score - mean outcome score of the batch, broadcast over the response tokens."""
    scores = sequence_scores(token_level_rewards, response_mask)
    advantages = (scores - scores.mean()).unsqueeze(-1) * response_mask
    return advantages, advantages.clone()


if __name__ == "__main__":
    run_upstream_module("examples.algorithm.custom_advantage_estimator.main_custom_adv_est")
