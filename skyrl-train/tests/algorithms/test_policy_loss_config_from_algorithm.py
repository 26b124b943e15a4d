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
