"""`math` and `aime`: single-turn competition-math environments scored by the final boxed (or `Answer:`) answer.

The final answer is the last `\\boxed{...}` / `\\fbox{...}` of the response (nested braces allowed), else the text
of its last `Answer:` line; end-of-turn markers such as `<|im_end|>`, `<|endoftext|>` and `<|eot_id|>` at the end
of the response are ignored. Equivalence is real: `\\frac12 == 0.5 == 1/2`, `\\dfrac`, `\\left( \\right)`,
`\\text{}`, degrees, percent, sets/tuples/intervals and symbolic expressions (math-verify, then sympy), see
`skyrl_gym.rewards.math_equivalence`.

`math` env_config:
    timeout_s: wall-clock limit of one symbolic comparison, default 5.0 s (a timeout counts as wrong).
    correct_reward / incorrect_reward: default 1.0 / 0.0.
Reward `correct_reward` when correct, else `incorrect_reward` (also when no answer is found).
`reward_spec.ground_truth` is an answer string (a `\\boxed{}` in it is unwrapped), a number, or a list of accepted
answers (any one counts; each is compared under its own `timeout_s`).

`aime` (the AIME / DAPO convention): `reward_spec.ground_truth` must be an integer 0-999 (int or string such as
"033"). env_config `correct_reward` (default 1.0) and `incorrect_reward` (default -1.0, also given when no answer
is found), plus `timeout_s`.

Metadata of both: `pred` (the extracted answer or None) and `acc` (True when correct).
"""

from __future__ import annotations

from typing import Any, Optional

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType, final_step
from skyrl_gym.rewards.math_equivalence import (
    DEFAULT_TIMEOUT_S,
    grade_math_response,
    parse_aime_ground_truth,
    parse_math_ground_truth,
)


class MathEnv(BaseTextEnv):
    """Single-turn math: reward 1.0 when the final answer is equivalent to the ground truth, else 0.0."""

    config_keys = ("timeout_s", "correct_reward", "incorrect_reward")

    default_max_turns = 1
    default_correct_reward = 1.0
    default_incorrect_reward = 0.0

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        self.timeout_s = self.config_number("timeout_s", DEFAULT_TIMEOUT_S)
        if self.timeout_s <= 0:
            raise ValueError(f"env_config.timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        self.correct_reward = self.config_number("correct_reward", self.default_correct_reward)
        self.incorrect_reward = self.config_number("incorrect_reward", self.default_incorrect_reward)
        self._answers: list[str] = []
        self._acc = False
        self._found = False

    def _read_ground_truth(self) -> list[str]:
        """The accepted answers from `reward_spec.ground_truth` (ValueError naming the field if malformed)."""
        return parse_math_ground_truth(self.ground_truth())

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Start an episode; reads and validates `reward_spec.ground_truth`."""
        self._begin_episode()
        self._answers = self._read_ground_truth()
        self._acc = False
        self._found = False
        return prompt, {}

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        grade = grade_math_response(action, self._answers, self.timeout_s)
        self._acc, self._found = grade.correct, grade.pred is not None
        reward = self.correct_reward if grade.correct else self.incorrect_reward
        return final_step(reward, {"pred": grade.pred, "acc": grade.correct})

    def get_metrics(self) -> dict[str, Any]:
        """Base metrics plus `acc` and `answer_found` for the episode."""
        return {**super().get_metrics(), "acc": self._acc, "answer_found": self._found}


class AIMEEnv(MathEnv):
    """AIME / DAPO convention: integer answers 0-999, reward `correct_reward` 1.0 / `incorrect_reward` -1.0."""

    default_incorrect_reward = -1.0

    def _read_ground_truth(self) -> list[str]:
        """The AIME answer as text ("33" for "033"); ValueError unless it is an integer 0-999."""
        return [str(parse_aime_ground_truth(self.ground_truth()))]
