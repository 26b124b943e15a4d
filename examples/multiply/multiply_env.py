"""SkyRL's `multiply` example environment: multiply two numbers, answer in `\\boxed{...}`, retry after feedback.

`main_multiply` (SkyRL's module paths `examples.multiply.main_multiply` and `examples.train.multiply.main_multiply`)
registers it as `multiply` before the run starts; `multiply_dataset.py` writes its rows. Rows give the product as
`reward_spec.ground_truth` (a string or an integer).
"""

from __future__ import annotations

import re
from typing import Any, Optional

import skyrl_gym
from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput

ENV_ID = "multiply"
_BOXED = re.compile(r"\\boxed\{([^}]+)\}")
FORMAT_HINT = "Please provide your answer in the format \\boxed{your_answer}."


class MultiplyEnv(BaseTextEnv):
    """Reward 1.0 for the exact product in `\\boxed{}`, which ends the episode. A wrong or missing boxed answer gets
    reward 0 and a feedback message while turns remain; on the last turn the episode ends with 0.5 for a boxed wrong
    answer and 0.0 without one (SkyRL's partial credit for the format). Turns: `max_turns` from the generator, else
    `env_config.max_turns`, else 5 (SkyRL's default)."""

    default_max_turns = 5
    config_keys = ()

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        truth = self.ground_truth()
        if isinstance(truth, bool) or not isinstance(truth, (str, int)) or not str(truth).strip():
            raise ValueError(f"multiply: reward_spec.ground_truth must be the product (a string or int), got {truth!r}")
        self.answer = str(truth).strip()

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        match = _BOXED.search(action)
        parsed = None if match is None else match.group(1).strip()
        metadata = {"parsed_answer": parsed}
        if parsed == self.answer:
            return BaseTextEnvStepOutput(observations=[], reward=1.0, done=True, metadata=metadata)
        if self.is_last_turn:
            reward = 0.0 if parsed is None else 0.5
            return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata=metadata)
        feedback = FORMAT_HINT if parsed is None else f"Your answer '{parsed}' is incorrect. Please try again."
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": feedback}], reward=0.0, done=False, metadata=metadata
        )


def register_env() -> None:
    """Register `multiply` with skyrl-gym (safe to call more than once)."""
    if ENV_ID not in skyrl_gym.registry:
        skyrl_gym.register(ENV_ID, MultiplyEnv)
