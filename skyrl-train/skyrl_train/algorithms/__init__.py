"""The algorithm library: pure, vectorised torch functions for advantages, losses, reductions, KL and corrections.

Tensors are batch-first [batch, response_len]; `response_mask` / `loss_mask` are 1 on tokens that count. Importing
this package registers every built-in estimator, loss, reduction and KL estimator in the registries of
`skyrl_train.algorithms.registry`; users add their own with the `register_*` decorators.

| module | job |
|---|---|
| registry | the four algorithm registries (each a `skyrl_train.utils.registry.Registry`), decorators, user-entry export |
| masked, groups, rewards | masked statistics; per-group statistics; token-level rewards and returns-to-go |
| advantages | gae, grpo, rloo, maxrl, reinforce++, reinforce++_baseline, remax, no_op |
| policy_losses | regular, dual_clip, gspo, cispo, sapo, importance_sampling, cross_entropy |
| covariance_losses | clip_cov, kl_cov |
| policy_loss_config | `PolicyLossConfig`, the knobs the policy losses read |
| value_loss | clipped critic loss |
| reductions | token_mean, sequence_mean, seq_mean_token_sum_norm, token_sum |
| kl | k1/k2/k3/abs estimators, KL loss and KL-in-reward, fixed/adaptive controllers, distillation rewards |
| entropy | entropy from logits, entropy bonus |
| off_policy | truncated IS (token/sequence), sequence and token (IcePop-style) masks against rollout log-probs |
| dapo | zero-variance groups, dynamic sampling buffer, overlong filter and soft punishment |
"""

from skyrl_train.algorithms.advantages import (
    AdvantageEstimator,
    compute_advantages,
    gae_advantages,
    grpo_advantages,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
    remax_advantages,
    rloo_advantages,
)
from skyrl_train.algorithms.covariance_losses import (
    clip_cov_policy_loss,
    kl_cov_policy_loss,
    select_top_tokens,
    token_covariance,
)
from skyrl_train.algorithms.dapo import (
    soft_overlong_punishment,
    zero_variance_group_mask,
)
from skyrl_train.algorithms.entropy import entropy_bonus, entropy_from_logits
from skyrl_train.algorithms.groups import GroupIndex, GroupStats, group_ids, group_stats
from skyrl_train.algorithms.kl import (
    AdaptiveKLController,
    FixedKLController,
    distillation_rewards,
    kl_estimate,
    kl_in_reward,
    kl_penalty_loss,
    make_kl_controller,
)
from skyrl_train.algorithms.masked import (
    LOG_RATIO_CLAMP,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    safe_exp,
    zero_masked,
)
from skyrl_train.algorithms.off_policy import (
    OffPolicyConfig,
    geometric_sequence_mask,
    mismatch_metrics,
    off_policy_correction,
    product_sequence_mask,
    sequence_tis_weights,
    token_band_mask,
    token_tis_weights,
)
from skyrl_train.algorithms.policy_loss_config import PolicyLossConfig, as_policy_loss_config
from skyrl_train.algorithms.policy_losses import (
    cispo_policy_loss,
    compute_policy_loss,
    cross_entropy_loss,
    dual_clip_policy_loss,
    finalize_policy_loss,
    gspo_policy_loss,
    importance_sampling_policy_loss,
    regular_policy_loss,
    sapo_policy_loss,
)
from skyrl_train.algorithms.reductions import reduce_loss
from skyrl_train.algorithms.registry import (
    ADVANTAGE_ESTIMATORS,
    ALL_REGISTRIES,
    KL_ESTIMATORS,
    LOSS_REDUCTIONS,
    POLICY_LOSSES,
    export_user_registrations,
    import_user_registrations,
    register_advantage_estimator,
    register_kl_estimator,
    register_loss_reduction,
    register_policy_loss,
)
from skyrl_train.algorithms.rewards import discounted_returns, scalar_rewards_to_token_level, sequence_scores
from skyrl_train.algorithms.value_loss import value_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ALL_REGISTRIES",
    "KL_ESTIMATORS",
    "LOG_RATIO_CLAMP",
    "LOSS_REDUCTIONS",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "AdvantageEstimator",
    "FixedKLController",
    "GroupIndex",
    "GroupStats",
    "OffPolicyConfig",
    "PolicyLossConfig",
    "as_policy_loss_config",
    "cispo_policy_loss",
    "clip_cov_policy_loss",
    "compute_advantages",
    "compute_policy_loss",
    "cross_entropy_loss",
    "discounted_returns",
    "distillation_rewards",
    "dual_clip_policy_loss",
    "entropy_bonus",
    "entropy_from_logits",
    "export_user_registrations",
    "finalize_policy_loss",
    "gae_advantages",
    "geometric_sequence_mask",
    "group_ids",
    "group_stats",
    "grpo_advantages",
    "gspo_policy_loss",
    "import_user_registrations",
    "importance_sampling_policy_loss",
    "kl_cov_policy_loss",
    "kl_estimate",
    "kl_in_reward",
    "kl_penalty_loss",
    "make_kl_controller",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "mismatch_metrics",
    "off_policy_correction",
    "product_sequence_mask",
    "reduce_loss",
    "register_advantage_estimator",
    "register_kl_estimator",
    "register_loss_reduction",
    "register_policy_loss",
    "regular_policy_loss",
    "reinforce_plus_plus_advantages",
    "reinforce_plus_plus_baseline_advantages",
    "remax_advantages",
    "rloo_advantages",
    "safe_exp",
    "sapo_policy_loss",
    "scalar_rewards_to_token_level",
    "select_top_tokens",
    "sequence_scores",
    "sequence_tis_weights",
    "token_band_mask",
    "soft_overlong_punishment",
    "token_covariance",
    "token_tis_weights",
    "value_loss",
    "zero_masked",
    "zero_variance_group_mask",
]
