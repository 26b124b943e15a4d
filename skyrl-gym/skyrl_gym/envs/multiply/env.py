"""`multiply`: SkyRL's example multi-turn environment, a multiplication answered in `\\boxed{...}` over several
attempts.

Each turn the boxed answer is compared, as text (surrounding whitespace ignored), with `reward_spec.ground_truth`
(SkyRL's dataset stores the product as a string, e.g. "1443"). A right answer ends the episode with reward 1.0.
Otherwise the env replies with a user message (the answer was wrong, or no boxed answer was found) and the turn earns
0.0, except the last allowed turn, which ends the episode with 0.5 for a boxed but wrong answer and 0.0 without one.
`max_turns` defaults to 5 (the generator's `extras["max_turns"]` wins). Metadata: `parsed_answer` (the boxed text or
None). The answer is the last `\\boxed{...}` of the turn (SkyRL reads the first; a turn rarely holds two).

env_config takes no keys besides `max_turns`.
"""

from __future__ import annotations

from typing import Any, Optional

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType
from skyrl_gym.rewards.answer_extraction import extract_boxed_answer

FORMAT_REMINDER = "Please give your answer in the form \\boxed{your_answer}."


class MultiplyEnv(BaseTextEnv):
    """Multiplication with retries and a half reward for a boxed wrong final answer (see the module docstring)."""

    config_keys = ()

    default_max_turns = 5

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        self._target = ""
        self._solved = False

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Start an episode; reads `reward_spec.ground_truth` (ValueError when the row has none)."""
        self._begin_episode()
        self._target = str(self.ground_truth()).strip()
        self._solved = False
        return prompt, {}

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        answer = extract_boxed_answer(action)
        metadata = {"parsed_answer": answer}
        if answer is not None and answer == self._target:
            self._solved = True
            return BaseTextEnvStepOutput(
                observations=[], reward=1.0, done=True, metadata=metadata, postprocessed_action=None
            )
        if self.is_last_turn:
            reward = 0.5 if answer is not None else 0.0
            return BaseTextEnvStepOutput(
                observations=[], reward=reward, done=True, metadata=metadata, postprocessed_action=None
            )
        feedback = FORMAT_REMINDER if answer is None else f"Your answer '{answer}' is incorrect. Please try again."
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": feedback}],
            reward=0.0,
            done=False,
            metadata=metadata,
            postprocessed_action=None,
        )

    def get_metrics(self) -> dict[str, Any]:
        """Base metrics plus `solved` for the episode."""
        return {**super().get_metrics(), "solved": self._solved}
