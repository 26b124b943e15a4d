"""`total_training_steps`: the step count the progress bar and LR schedule use equals what the loop will run."""

from types import SimpleNamespace

from skyrl_train.trainer import total_training_steps


def _cfg(epochs, max_steps):
    return SimpleNamespace(trainer=SimpleNamespace(epochs=epochs, max_training_steps=max_steps))


def test_epochs_times_batches_without_a_cap():
    assert total_training_steps(_cfg(3, None), [0] * 7) == 21


def test_cap_shortens_but_never_extends_the_run():
    assert total_training_steps(_cfg(3, 10), [0] * 7) == 10
    # 200 requested, but 2 epochs of 7 batches end the loop after 14 steps
    assert total_training_steps(_cfg(2, 200), [0] * 7) == 14


def _batch_cfg(train, policy_mini, critic_mini, epochs):
    return SimpleNamespace(
        trainer=SimpleNamespace(
            train_batch_size=train,
            policy_mini_batch_size=policy_mini,
            critic_mini_batch_size=critic_mini,
            update_epochs_per_batch=epochs,
        )
    )


def test_optimizer_steps_per_training_step_counts_mini_batches_and_ppo_epochs():
    from skyrl_train.trainer import optimizer_steps_per_training_step

    cfg = _batch_cfg(32, 16, 8, 1)
    assert optimizer_steps_per_training_step(cfg, "policy") == 2  # 32 prompts in mini-batches of 16
    assert optimizer_steps_per_training_step(cfg, "critic") == 4
    assert optimizer_steps_per_training_step(_batch_cfg(32, 12, 32, 3), "policy") == 9  # ceil(32/12)=3, x3 epochs
    assert optimizer_steps_per_training_step(_batch_cfg(32, 12, 32, 3), "critic") == 3
