"""The evaluation example: the ReAct agent against our OpenAI-compatible endpoint on 127.0.0.1 (real HTTP, the
`openai` client), from a briefly warm-started agent model."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
from evaluate_agent import main  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_agent_is_evaluated_through_our_endpoint(agent_cache, capsys):
    metrics = main(["--size", "6", "--show", "1", "--warm-start-steps", "40"])
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].startswith("agent eval: success=") and "trajectories=6" in out
    assert 0.0 <= metrics["agent/success_rate"] <= 1.0 and metrics["agent/turns_mean"] >= 1.0
    assert '"instance_id": "test-0-0"' in out  # the shown trajectory's summary
