"""Tinker's loss functions on `skyrl_train.algorithms`: one loss code path for both products.

Every Tinker loss is a plain sum over tokens (the caller scales `weights` / `advantages` to normalise), so each maps
to a registered skyrl_train policy loss reduced with `token_sum`:

| Tinker loss           | skyrl_train loss      | inputs                                  | loss_fn_config (default)                    |
|-----------------------|-----------------------|-----------------------------------------|---------------------------------------------|
| `cross_entropy`       | `cross_entropy`       | target_tokens, weights                  | none                                        |
| `importance_sampling` | `importance_sampling` | target_tokens, logprobs, advantages     | none                                        |
| `ppo`                 | `regular` (clipped)   | target_tokens, logprobs, advantages     | clip_low_threshold 0.8, clip_high_threshold 1.2 |
| `cispo`               | `cispo`               | target_tokens, logprobs, advantages     | clip_low_threshold 0.0, clip_high_threshold 4.0 |

`logprobs` are the sampler's logprobs (the behaviour policy); the ratio is exp(current - sampler). Metrics are named
`name:reduction`; shards of one batch computed apart (on Ray ranks) merge into the whole batch's metrics by those
reductions (`skyrl_tx.ray_compute.merge_shard_metrics`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from skyrl_train.algorithms.policy_loss_config import PolicyLossConfig
from skyrl_train.algorithms.policy_losses import compute_policy_loss


@dataclass(frozen=True)
class LossSpec:
    """How one Tinker loss maps onto skyrl_train: the registered loss, its inputs and its config defaults."""

    skyrl_name: str
    inputs: tuple[str, ...]
    defaults: dict[str, float]


RL_INPUTS = ("target_tokens", "logprobs", "advantages")
LOSSES: dict[str, LossSpec] = {
    "cross_entropy": LossSpec("cross_entropy", ("target_tokens", "weights"), {}),
    "importance_sampling": LossSpec("importance_sampling", RL_INPUTS, {}),
    "ppo": LossSpec("regular", RL_INPUTS, {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}),
    "cispo": LossSpec("cispo", RL_INPUTS, {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}),
}
"""The Tinker losses this server computes."""

_METRIC_REDUCTIONS = {"ratio_min": "min", "ratio_max": "max"}


class LossInputError(ValueError):
    """A loss name, config key or input the server cannot use (reported as a user error naming it)."""


def loss_spec(name: str, config: dict[str, Any]) -> tuple[LossSpec, dict[str, float]]:
    """The spec of loss `name` and its resolved config; unknown names and keys are refused, naming what is known."""
    spec = LOSSES.get(name)
    if spec is None:
        raise LossInputError(f"loss_fn {name!r} is not supported; supported losses: {sorted(LOSSES)}")
    unknown = sorted(set(config) - set(spec.defaults))
    if unknown:
        known = sorted(spec.defaults) or "none"
        raise LossInputError(f"loss_fn_config keys {unknown} do not apply to loss {name!r}; its keys: {known}")
    resolved = {**spec.defaults, **{key: float(value) for key, value in config.items()}}
    return spec, resolved


def _policy_config(name: str, config: dict[str, float]) -> PolicyLossConfig:
    if name == "ppo":
        low, high = config["clip_low_threshold"], config["clip_high_threshold"]
        return PolicyLossConfig(eps_clip_low=1.0 - low, eps_clip_high=high - 1.0, loss_reduction="token_sum")
    if name == "cispo":
        low, high = config["clip_low_threshold"], config["clip_high_threshold"]
        return PolicyLossConfig(
            cispo_eps_clip_low=1.0 - low, cispo_eps_clip_high=high - 1.0, loss_reduction="token_sum"
        )
    return PolicyLossConfig(loss_reduction="token_sum")


def tinker_loss(
    name: str, config: dict[str, float], logprobs: torch.Tensor, inputs: dict[str, torch.Tensor], valid: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """The summed loss of Tinker loss `name` over a padded batch and its metrics as `name:reduction` keys.

    `logprobs` [B, T] are the current model's logprobs of `target_tokens`; `inputs` hold the other per-token inputs
    [B, T]; `valid` [B, T] is 1 on real (non-padding) positions.
    """
    spec = LOSSES[name]
    if name == "cross_entropy":
        loss, metrics = compute_policy_loss(
            spec.skyrl_name, log_probs=logprobs, loss_mask=inputs["weights"] * valid, config=_policy_config(name, {})
        )
    else:
        loss, metrics = compute_policy_loss(
            spec.skyrl_name,
            log_probs=logprobs,
            old_log_probs=inputs["logprobs"],
            advantages=inputs["advantages"],
            loss_mask=valid,
            config=_policy_config(name, config),
        )
    named = {"loss:sum": float(loss.detach())}
    for key, value in metrics.items():
        if key == "nll":
            continue
        named[f"{key}:{_METRIC_REDUCTIONS.get(key, 'mean')}"] = float(value)
    return loss, named


def mean_metric_count(name: str, inputs: dict[str, np.ndarray], length: int) -> int:
    """How many of a datum's `length` tokens the `:mean` metrics of loss `name` average over: the nonzero entries of
    the loss mask `tinker_loss` passes (`weights` for cross_entropy, every token for the RL losses), as
    `masked_mean` counts them. Means over parts of a batch recombine exactly when weighted by these counts."""
    if name == "cross_entropy":
        return int(np.count_nonzero(inputs["weights"]))
    return length
