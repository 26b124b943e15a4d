"""Tests for the environment every Ray actor gets (the rest of placement is exercised by the Ray trainer tests)."""

from skyrl_train.placement import actor_env_vars


def test_actors_default_to_no_openmp_spinning_and_user_values_win(monkeypatch):
    monkeypatch.delenv("KMP_BLOCKTIME", raising=False)
    env = actor_env_vars()
    assert env["KMP_BLOCKTIME"] == "0" and env["TOKENIZERS_PARALLELISM"] == "false"
    monkeypatch.setenv("KMP_BLOCKTIME", "50")
    assert actor_env_vars()["KMP_BLOCKTIME"] == "50"
