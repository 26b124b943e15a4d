"""PolicyLossConfig.from_algorithm_config flattens the run config's nested algorithm section onto loss fields."""

from skyrl_train.algorithms import PolicyLossConfig
from skyrl_train.config import SkyRLConfig


def test_nested_config_knobs_reach_the_flat_loss_fields():
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "trainer.algorithm.eps_clip_high=0.28",
            "trainer.algorithm.cispo.eps_clip_high=3.5",
            "trainer.algorithm.cispo.anchor=rollout",
            "trainer.algorithm.clip_cov.clip_ratio=0.01",
            "trainer.algorithm.kl_cov.kl_cov_coef=2.0",
            "trainer.algorithm.sapo.tau_neg=1.2",
            "trainer.algorithm.off_policy_correction.tis_ratio_type=token",
        ]
    )
    loss = PolicyLossConfig.from_algorithm_config(cfg.trainer.algorithm)
    assert (loss.eps_clip_low, loss.eps_clip_high) == (0.2, 0.28)
    assert (loss.cispo_eps_clip_high, loss.cispo_anchor) == (3.5, "rollout")
    assert (loss.clip_cov_ratio, loss.kl_cov_coef, loss.tau_neg) == (0.01, 2.0, 1.2)
    assert loss.off_policy.tis_ratio_type == "token" and loss.off_policy.enabled


def test_every_loss_key_of_the_algorithm_section_reaches_its_loss_field():
    settings = {
        "eps_clip_low": ("eps_clip_low", 0.15),
        "eps_clip_high": ("eps_clip_high", 0.3),
        "clip_ratio_c": ("clip_ratio_c", 2.5),
        "max_seq_len": ("max_seq_len", 333),
        "sapo.tau_pos": ("tau_pos", 0.9),
        "sapo.tau_neg": ("tau_neg", 1.3),
        "cispo.eps_clip_low": ("cispo_eps_clip_low", 0.5),
        "cispo.eps_clip_high": ("cispo_eps_clip_high", 3.0),
        "cispo.anchor": ("cispo_anchor", "rollout"),
        "clip_cov.clip_ratio": ("clip_cov_ratio", 0.01),
        "clip_cov.clip_cov_lb": ("clip_cov_lb", 0.5),
        "clip_cov.clip_cov_ub": ("clip_cov_ub", 6.0),
        "kl_cov.kl_cov_frac": ("kl_cov_frac", 0.05),
        "kl_cov.kl_cov_coef": ("kl_cov_coef", 2.0),
        "off_policy_correction.tis_ratio_type": ("off_policy.tis_ratio_type", "sequence"),
        "off_policy_correction.token_tis_ratio_clip_high": ("off_policy.token_tis_ratio_clip_high", 3.0),
        "off_policy_correction.sequence_tis_ratio_clip_high": ("off_policy.sequence_tis_ratio_clip_high", 6.0),
        "off_policy_correction.sequence_mask_metric": ("off_policy.sequence_mask_metric", "geometric"),
        "off_policy_correction.geo_mask_high": ("off_policy.geo_mask_high", 1.05),
        "off_policy_correction.geo_mask_low": ("off_policy.geo_mask_low", 0.95),
        "off_policy_correction.product_mask_high": ("off_policy.product_mask_high", 3.0),
        "off_policy_correction.product_mask_low": ("off_policy.product_mask_low", 0.25),
    }
    overrides = [f"trainer.algorithm.{key}={value}" for key, (_, value) in settings.items()]
    loss = PolicyLossConfig.from_algorithm_config(SkyRLConfig.from_cli_overrides(overrides).trainer.algorithm)
    default = PolicyLossConfig.from_algorithm_config(SkyRLConfig().trainer.algorithm)
    for key, (field_path, value) in settings.items():
        got, before = loss, default
        for name in field_path.split("."):
            got, before = getattr(got, name), getattr(before, name)
        assert got == value and before != value, key


def test_auto_importance_sampling_corrects_stale_data_only():
    # tis_ratio_type: auto (the default) weighs tokens by the capped trainer/rollout ratio when the batch was sampled
    # by older weights (the async trainers), and leaves on-policy data alone
    algorithm = SkyRLConfig().trainer.algorithm
    assert algorithm.off_policy_correction.tis_ratio_type == "auto"
    assert PolicyLossConfig.from_algorithm_config(algorithm).off_policy.tis_ratio_type is None
    stale = PolicyLossConfig.from_algorithm_config(algorithm, stale_data=True).off_policy
    assert stale.tis_ratio_type == "token" and stale.enabled
    off = SkyRLConfig.from_cli_overrides(["trainer.algorithm.off_policy_correction.tis_ratio_type=null"])
    assert not PolicyLossConfig.from_algorithm_config(off.trainer.algorithm, stale_data=True).off_policy.enabled
    chosen = SkyRLConfig.from_cli_overrides(["trainer.algorithm.off_policy_correction.tis_ratio_type=sequence"])
    assert PolicyLossConfig.from_algorithm_config(chosen.trainer.algorithm).off_policy.tis_ratio_type == "sequence"
