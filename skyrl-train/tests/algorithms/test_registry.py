"""Algorithm registries: built-ins, unknown names, user registration, and shipping user entries to a spawned process."""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch

from skyrl_train.algorithms import (
    ADVANTAGE_ESTIMATORS,
    POLICY_LOSSES,
    compute_advantages,
    export_user_registrations,
    import_user_registrations,
    register_advantage_estimator,
    register_policy_loss,
)
from skyrl_train.utils.registry import UnknownNameError

SPAWN_NAME = "test_registry_triple_reward"


def test_unknown_name_lists_close_matches_and_registered_names():
    with pytest.raises(UnknownNameError) as info:
        POLICY_LOSSES.get("regualr")
    message = str(info.value)
    assert message.startswith("unknown policy loss 'regualr'. Did you mean 'regular'?")
    assert "Registered: ['cispo', 'clip_cov', 'cross_entropy'," in message
    assert '@register_policy_loss("name")' in message
    assert isinstance(info.value, KeyError)


def test_builtins_are_registered_and_not_exported():
    assert ADVANTAGE_ESTIMATORS.names() == [
        "gae",
        "grpo",
        "maxrl",
        "no_op",
        "reinforce++",
        "reinforce++_baseline",
        "remax",
        "rloo",
    ]
    assert POLICY_LOSSES.names() == [
        "cispo",
        "clip_cov",
        "cross_entropy",
        "dual_clip",
        "gspo",
        "importance_sampling",
        "kl_cov",
        "regular",
        "sapo",
    ]
    assert POLICY_LOSSES.user_names() == []


def test_user_policy_loss_is_registered_by_decorator_and_callable_by_name():
    @register_policy_loss("test_registry_half_sum")
    def half_sum(*, log_probs, loss_mask, **_):
        return (log_probs * loss_mask).sum() / 2, {}

    try:
        assert "test_registry_half_sum" in POLICY_LOSSES.user_names()
        loss, _ = POLICY_LOSSES.get("test_registry_half_sum")(
            log_probs=torch.tensor([[2.0, 4.0]]), loss_mask=torch.ones(1, 2)
        )
        assert loss.item() == 3.0
    finally:
        POLICY_LOSSES.unregister("test_registry_half_sum")
    assert "test_registry_half_sum" not in POLICY_LOSSES


@pytest.fixture
def triple_reward_estimator():
    @register_advantage_estimator(SPAWN_NAME)
    def triple_reward(*, token_level_rewards, response_mask, **_):
        advantages = 3.0 * token_level_rewards * response_mask
        return advantages, advantages

    yield triple_reward
    ADVANTAGE_ESTIMATORS.unregister(SPAWN_NAME)


@pytest.mark.integration
def test_user_estimator_reaches_a_spawned_process_by_export_and_import(triple_reward_estimator):
    rewards = torch.tensor([[0.0, 1.0], [2.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    blob = export_user_registrations()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        # Before the import the fresh process knows only the built-ins.
        with pytest.raises(UnknownNameError, match=SPAWN_NAME):
            pool.submit(compute_advantages, SPAWN_NAME, token_level_rewards=rewards, response_mask=mask).result()
        imported = pool.submit(import_user_registrations, blob).result()
        assert imported["advantage estimator"] == [SPAWN_NAME]
        advantages, returns = pool.submit(
            compute_advantages, SPAWN_NAME, token_level_rewards=rewards, response_mask=mask
        ).result()
    # 3 * reward on valid tokens: [[0, 3], [6, 0]]
    assert torch.equal(advantages, torch.tensor([[0.0, 3.0], [6.0, 0.0]]))
    assert torch.equal(returns, advantages)
