"""Actor thread counts: the configured count wins, else the actor's CPU share rounded down, at least 1."""

from skyrl_train.utils.threads import actor_threads


def test_thread_counts_default_to_the_cpu_share_and_follow_their_keys():
    assert actor_threads(None, 1.0) == 1
    assert actor_threads(None, 0.5) == 1  # colocated: a bundle's CPU split between policy and engines
    assert actor_threads(None, 2.5) == 2
    assert actor_threads(3, 0.5) == 3  # a configured count wins, even above the CPU share
