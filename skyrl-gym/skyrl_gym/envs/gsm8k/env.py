"""`gsm8k`: a single-turn environment that scores the final number of a grade-school math solution.

env_config:
    mode: "strict" (default) reads the number after the last `#### ` ("#### 1,234" -> 1234); "flexible" reads the
        last number anywhere in the response.
    format_reward: reward for a well-formed but wrong answer (a number was found), default 0.0.

Reward: 1.0 when the extracted number equals `reward_spec.ground_truth` (a number, a numeric string, or a full
GSM8K solution ending in "#### 72"), `format_reward` when a number was found but is wrong, else 0.0. Metadata:
`pred` (the normalised extracted number or None), `found` and `correct`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Optional

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType, final_step
from skyrl_gym.rewards.numbers import EXTRACTION_MODES, extract_gsm8k_answer, numbers_match, parse_ground_truth_number


def read_mode(env_config: dict[str, Any], default: str = "strict") -> str:
    """The `mode` option of a GSM8K env_config, validated ("strict" or "flexible")."""
    mode = env_config.get("mode", default)
    if mode not in EXTRACTION_MODES:
        raise ValueError(f"env_config.mode must be one of {EXTRACTION_MODES}, got {mode!r}")
    return mode


class GSM8KBaseEnv(BaseTextEnv):
    """What the GSM8K envs share: the `mode` and `format_reward` options, and the ground-truth number read at `init`.

    Subclasses set `default_format_reward` and reset their episode state in `reset_episode`.
    """

    config_keys = ("mode", "format_reward")

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        self.mode = read_mode(self.env_config)
        self.format_reward = self.config_number("format_reward", self.default_format_reward())
        self._target: Optional[Fraction] = None
        self.reset_episode()

    def default_format_reward(self) -> float:
        """The `format_reward` used when env_config sets none."""
        return 0.0

    def reset_episode(self) -> None:
        """Clear the previous episode's verdicts (at construction and at every `init`)."""

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Start an episode; reads and validates `reward_spec.ground_truth` (ValueError if malformed)."""
        self._begin_episode()
        self._target = parse_ground_truth_number(self.ground_truth())
        self.reset_episode()
        return prompt, {}


class GSM8KEnv(GSM8KBaseEnv):
    """Single-turn GSM8K: the episode ends after one response, scored by its final number (see module docstring)."""

    default_max_turns = 1

    def reset_episode(self) -> None:
        """Forget the last prediction and verdict."""
        self._pred: Optional[str] = None
        self._correct = False

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        assert self._target is not None  # set by init, which BaseTextEnv.step requires first
        pred = extract_gsm8k_answer(action, self.mode)
        correct = numbers_match(pred, self._target)
        reward = 1.0 if correct else (self.format_reward if pred is not None else 0.0)
        self._pred, self._correct = pred, correct
        return final_step(reward, {"pred": pred, "found": pred is not None, "correct": correct})

    def get_metrics(self) -> dict[str, Any]:
        """Base metrics plus `correct` and `answer_found` for the episode."""
        return {**super().get_metrics(), "correct": self._correct, "answer_found": self._pred is not None}
