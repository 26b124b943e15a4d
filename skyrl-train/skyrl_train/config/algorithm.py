"""The `trainer.algorithm` section: advantage estimator, policy loss, KL, clipping and their sub-sections.

Estimator, loss, reduction and KL-estimator names are plain strings: they are looked up in the algorithm registries
when used, so names users register at run time work too.
"""

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class KLControllerConfig:
    """Controller of the KL-in-reward coefficient (used when `use_kl_in_reward` is true). Its current value is saved
    in checkpoints and restored on resume."""

    type: Literal["fixed", "adaptive"] = "fixed"
    """`fixed` keeps `kl_coef` constant; `adaptive` moves it so the observed KL tracks `kl_target`."""

    kl_coef: float = 0.001
    """Initial (for `fixed`: constant) coefficient of the KL penalty subtracted from the reward."""

    kl_target: float = 0.1
    """KL the adaptive controller steers toward."""

    horizon: int = 10000
    """Adaptive controller time constant, in samples: after a batch of B trajectories whose mean per-sequence summed
    KL is `kl`, the coefficient is multiplied by `1 + clip(kl / kl_target - 1, -0.2, 0.2) * B / horizon`."""


@dataclass
class OffPolicyCorrectionConfig:
    """Corrections for the mismatch between the engine's rollout logprobs and the trainer's (truncated importance
    sampling and masks)."""

    tis_ratio_type: Literal["auto", "token", "sequence"] | None = "auto"
    """Truncated importance sampling on the trainer/rollout ratio: per `token`, per `sequence`, or null (off). `auto`:
    `token` in the async modes (`trainer.mode` one_step_off or fully_async, whose data is up to `max_staleness`
    versions old: uncorrected, it made the quickstart model unlearn), off in `sync`."""

    token_tis_ratio_clip_high: float = 2.0
    """Upper cap of the per-token importance ratio when `tis_ratio_type: token`."""

    sequence_tis_ratio_clip_high: float = 5.0
    """Upper cap of the per-sequence importance ratio when `tis_ratio_type: sequence`."""

    sequence_mask_metric: Literal["product", "geometric"] | None = None
    """Mask whole sequences whose ratio leaves a band: `product` of token ratios, `geometric` mean, or null (off)."""

    geo_mask_high: float = 1.01
    """Upper bound of the geometric-mean ratio band."""

    geo_mask_low: float = 0.99
    """Lower bound of the geometric-mean ratio band."""

    product_mask_high: float = 2.0
    """Upper bound of the product ratio band."""

    product_mask_low: float = 0.5
    """Lower bound of the product ratio band."""

    token_mask: bool = False
    """Mask single tokens whose trainer/rollout ratio leaves [`token_mask_low`, `token_mask_high`] (IcePop-style:
    with `tis_ratio_type: token` and `token_tis_ratio_clip_high` at the band's top, a token's weight is its ratio
    inside the band and 0 outside)."""

    token_mask_low: float = 0.5
    """Lower bound of the token ratio band."""

    token_mask_high: float = 5.0
    """Upper bound of the token ratio band."""


@dataclass
class DynamicSamplingConfig:
    """Dynamic sampling: drop prompt groups whose samples all got the same reward (they carry no GRPO signal)."""

    type: Literal["filter", "replace"] | None = None
    """`filter` (DAPO): drop prompt groups whose samples all got the same reward and generate further batches of
    `train_batch_size` prompts (drawn from the dataloader) until `train_batch_size` informative groups are kept;
    surplus groups of the last batch are dropped. `replace` (POLARIS): when more than `min_replace_ratio` of a batch's
    groups are informative, each uninformative group is replaced by a copy of an informative one (its own group id),
    else another batch is generated. null disables dynamic sampling. In `trainer.mode=fully_async` both apply to the
    finished groups the trainer takes (a left-out group's place goes to a new prompt). Metrics:
    `dynamic_sampling/{rounds, sampled_groups, kept_groups, replaced_groups}` and `trainer/sampled_groups_total`."""

    max_sample_batches: int = 30
    """Generation batches one training step may use (`filter` and `replace`); when they are used up without filling
    the batch the run stops with an error saying so. -1 never gives up."""

    min_replace_ratio: float = 0.3
    """With `replace`, the fraction of a batch's groups that must be informative (strictly more) for replacing."""


@dataclass
class OverlongBufferConfig:
    """DAPO soft overlong punishment: a penalty ramping up over the last `length` tokens before the length limit."""

    enabled: bool = False
    """Add DAPO's soft overlong penalty to each trajectory's reward (before dynamic sampling sees the rewards):
    0 up to `max_generate_length - length` generated tokens, then falling linearly to `-penalty_factor` at
    `max_generate_length`. Single-turn only (`generator.max_turns: 1`)."""

    length: int = 4096
    """Width of the penalty ramp, in tokens, ending at `generator.sampling_params.max_generate_length`."""

    penalty_factor: float = 1.0
    """Penalty at the limit; it grows linearly from 0 at the start of the buffer."""


@dataclass
class CISPOConfig:
    """CISPO: clipped importance-sampling weights with a stop-gradient (`policy_loss_type: cispo`)."""

    eps_clip_low: float = 1.0
    """The IS weight is clipped below at `1 - eps_clip_low`."""

    eps_clip_high: float = 4.0
    """The IS weight is clipped above at `1 + eps_clip_high`."""

    anchor: Literal["old", "rollout"] = "old"
    """Denominator of the IS ratio: the trainer's `old` logprobs or the engine's `rollout` logprobs."""


@dataclass
class SAPOConfig:
    """SAPO: a sigmoid soft gate on the ratio instead of a hard clip (`policy_loss_type: sapo`)."""

    tau_pos: float = 1.0
    """Gate temperature for tokens with positive advantage."""

    tau_neg: float = 1.05
    """Gate temperature for tokens with negative advantage."""


@dataclass
class ClipCovConfig:
    """Clip-Cov: detach the gradient of tokens with the highest advantage/logprob covariance
    (`policy_loss_type: clip_cov`)."""

    clip_ratio: float = 0.0002
    """Fraction (0-1) of valid tokens whose gradient is detached, highest covariance first."""

    clip_cov_lb: float = 1.0
    """Lower covariance bound for a token to be selected."""

    clip_cov_ub: float = 5.0
    """Upper covariance bound for a token to be selected."""


@dataclass
class KLCovConfig:
    """KL-Cov: a KL penalty on the tokens with the highest covariance (`policy_loss_type: kl_cov`)."""

    kl_cov_frac: float = 0.002
    """Fraction (0-1) of valid tokens, highest covariance first, that get the KL penalty."""

    kl_cov_coef: float = 1.0
    """Coefficient of the `|log ratio|` penalty on the selected tokens."""


@dataclass
class AlgorithmConfig:
    """The RL algorithm: how advantages are estimated and which loss the policy minimises."""

    advantage_estimator: str = "grpo"
    """Advantage estimator by registry name: `grpo`, `gae` (needs a critic), `rloo`, `maxrl` (SkyRL's MaxRL:
    group-centred rewards divided by the group mean), `reinforce++`, `reinforce++_baseline`, `remax`, `no_op` (the
    token rewards as they are, e.g. for on-policy distillation), or your own."""

    policy_loss_type: str = "regular"
    """Policy loss by registry name: `regular` (clipped PPO), `dual_clip`, `gspo`, `cispo`, `sapo`, `clip_cov`,
    `kl_cov`, `importance_sampling`, `cross_entropy`, or your own."""

    loss_reduction: str = "token_mean"
    """How per-token losses are reduced: `token_mean`, `sequence_mean`, `seq_mean_token_sum_norm` (Dr. GRPO, needs
    `max_seq_len`), `token_sum`, or your own."""

    use_kl_loss: bool = True
    """Add `kl_loss_coef * KL(policy || ref)` to the policy loss (needs the reference model)."""

    use_kl_in_reward: bool = False
    """Subtract a KL penalty from the reward instead: on each generated token, `kl_ctrl`'s coefficient times the
    `kl_estimator_type` estimate of KL(policy || ref) from the old and reference logprobs, before advantages are
    computed. Exclusive with `use_kl_loss`."""

    on_policy_distillation: bool = False
    """On-policy distillation (SkyRL's example, after Thinking Machines' recipe): the reference model
    (`trainer.ref.model.path`, which must be set and share the policy's tokenizer) is a teacher, and each generated
    token's reward is log p_teacher - log p_policy, the policy's log-prob taken before the update: the negative k1
    estimate of KL(policy || teacher) on the policy's own samples. It replaces the environment's rewards, which are
    still logged (`reward/*`); the gaps are logged as `distillation/*`. Pair it with `advantage_estimator: no_op`
    (the token rewards are the advantages) and `policy_loss_type: importance_sampling`, as SkyRL does. Exclusive
    with `use_kl_in_reward`."""

    kl_loss_coef: float = 0.001
    """Coefficient of the KL loss term."""

    kl_estimator_type: str = "k3"
    """KL estimator: `k1` (log ratio), `k2` (half squared log ratio), `k3` (unbiased, non-negative), `abs`."""

    kl_ctrl: KLControllerConfig = field(default_factory=KLControllerConfig)
    """Controller of the KL-in-reward coefficient."""

    use_entropy_loss: bool = False
    """Add an entropy bonus (`-entropy_loss_coef * entropy`) to the policy loss."""

    entropy_loss_coef: float = 0.01
    """Coefficient of the entropy bonus."""

    eps_clip_low: float = 0.2
    """PPO ratio clip below at `1 - eps_clip_low`."""

    eps_clip_high: float = 0.2
    """PPO ratio clip above at `1 + eps_clip_high` (DAPO's clip-higher uses a larger value, e.g. 0.28)."""

    clip_ratio_c: float = 3.0
    """Dual-clip lower bound for negative advantages (`policy_loss_type: dual_clip`); must be above 1."""

    value_clip: float = 0.2
    """Critic value clip range around the old values."""

    gamma: float = 1.0
    """Discount factor (`gae`, `reinforce++`, `reinforce++_baseline`, `remax`)."""

    lambd: float = 1.0
    """GAE lambda."""

    grpo_norm_by_std: bool = True
    """GRPO divides group-centred rewards by the group's std; false gives Dr. GRPO's mean-only centring."""

    grpo_std_epsilon: float = 1e-6
    """Added to the group's std before GRPO divides by it (keeps near-uniform groups from blowing up)."""

    advantage_batch_normalize: bool = False
    """After the estimator, z-score the advantages over every trained token of the batch (`loss_mask`): subtract
    their mean and divide by their standard deviation."""

    max_seq_len: int | None = None
    """Fixed normaliser (in tokens) of the `seq_mean_token_sum_norm` reduction: the longest response the
    generator can produce (all turns), usually `generator.sampling_params.max_generate_length` for single-turn."""

    off_policy_correction: OffPolicyCorrectionConfig = field(default_factory=OffPolicyCorrectionConfig)
    """Importance-sampling corrections for rollout/trainer mismatch."""

    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    """Dropping or replacing prompt groups without reward variance."""

    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    """DAPO soft punishment of responses close to the length limit."""

    cispo: CISPOConfig = field(default_factory=CISPOConfig)
    """Settings of the `cispo` loss."""

    sapo: SAPOConfig = field(default_factory=SAPOConfig)
    """Settings of the `sapo` loss."""

    clip_cov: ClipCovConfig = field(default_factory=ClipCovConfig)
    """Settings of the `clip_cov` loss."""

    kl_cov: KLCovConfig = field(default_factory=KLCovConfig)
    """Settings of the `kl_cov` loss."""
