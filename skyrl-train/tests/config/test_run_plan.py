"""`RunPlan`: the fused-call decisions of a run, from its config alone."""

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.run_plan import RunPlan


def _plan(*overrides, **options):
    return RunPlan.from_config(SkyRLConfig.from_cli_overrides(list(overrides), validate=False), **options)


@pytest.mark.parametrize(
    ("device", "colocate_all", "sleeps"),
    [("cuda", True, True), ("cuda", False, False), ("cpu", True, False), ("cpu", False, False)],
)
def test_engines_sleep_only_when_colocated_on_gpus(device, colocate_all, sleeps):
    plan = _plan(f"trainer.device={device}", f"trainer.placement.colocate_all={str(colocate_all).lower()}")
    assert plan.engines_sleep is sleeps
    assert plan.sync_in_update is not sleeps  # sleeping engines must wake before they take weights


def test_the_weights_ride_in_the_update_only_in_sync_mode_without_an_endpoint():
    assert _plan("trainer.device=cpu").sync_in_update
    assert not _plan("trainer.device=cpu", "generator.http_endpoint.enabled=true").sync_in_update
    for mode in ("one_step_off", "fully_async"):
        plan = _plan("trainer.device=cpu", f"trainer.mode={mode}", "trainer.placement.colocate_all=false")
        assert not plan.sync_in_update and plan.pause_engines_to_sync


def test_the_install_is_deferred_only_without_verification_and_with_a_backend_that_can():
    assert _plan("trainer.device=cpu").defer_install
    assert not _plan("trainer.device=cpu", verify_weight_sync=True).defer_install
    assert not _plan("trainer.device=cpu", can_defer_install=False).defer_install
    assert not _plan("trainer.device=cpu", "generator.http_endpoint.enabled=true").defer_install


def test_old_logprobs_come_from_the_update_only_for_one_optimizer_step():
    plan = _plan("trainer.device=cpu")
    assert (plan.old_logprobs(1), plan.old_logprobs(2)) == ("update", "first_pass")
    assert _plan("trainer.update_epochs_per_batch=2").old_logprobs(1) == "first_pass"
    # async data is older than the weights, but the old (proximal) policy is the current one all the same
    assert _plan("trainer.mode=fully_async", "trainer.placement.colocate_all=false").old_logprobs(1) == "update"
    kl_in_reward = _plan("trainer.algorithm.use_kl_in_reward=true", "trainer.algorithm.use_kl_loss=false")
    assert kl_in_reward.old_logprobs(1) == "given" and kl_in_reward.old_logprobs_before_update


def test_the_reference_comes_from_its_workers_or_the_lora_base():
    assert _plan("trainer.algorithm.use_kl_loss=false").reference is None
    assert _plan("trainer.algorithm.use_kl_loss=true").reference == "ref_workers"
    lora = _plan("trainer.algorithm.use_kl_loss=true", "trainer.policy.model.lora.rank=8")
    assert lora.reference == "policy_base"


def test_dry_run_prints_every_decision():
    text = _plan("trainer.device=cpu").describe()
    assert text.startswith("run plan (trainer.mode=sync):")
    assert "inside the policy update's call; last chunk installed at the engines' next generate call" in text
    assert "engines sleep while the workers train: no" in text and "reference log-probs: the ref workers" in text
    async_text = _plan("trainer.mode=fully_async", "trainer.placement.colocate_all=false").describe()
    assert "a call of its own after the update, engines paused" in async_text
