"""`gsm8k_multi_turn`: GSM8K with several attempts, a feedback message after each wrong one and turn-level rewards.

env_config:
    mode: "strict" (default, the number after `#### `) or "flexible" (the last number), as in `gsm8k`.
    format_reward: reward for a turn whose answer is well formed but wrong; default `0.2 / max_turns`, so the
        format credit of a whole unsolved episode stays at most 0.2, well below one correct answer.
    max_turns: attempts allowed (default 5; `extras["max_turns"]` from the generator wins).

Each turn: a correct answer ends the episode with reward 1.0. Otherwise the turn earns `format_reward` (answer
found but wrong) or 0.0 (no answer found) and the env replies with a user message saying which it was and how many
turns are left; after the last allowed turn the episode ends (metadata `truncated`). Metrics add `solved` and
`turns_used`.
"""

from __future__ import annotations

from typing import Any, Optional

from skyrl_gym.envs.base_text_env import BaseTextEnvStepOutput, final_step, reply_step
from skyrl_gym.envs.gsm8k.env import GSM8KBaseEnv
from skyrl_gym.rewards.numbers import extract_gsm8k_answer, numbers_match


class GSM8KMultiTurnEnv(GSM8KBaseEnv):
    """Multi-turn GSM8K with feedback messages and turn-level rewards (see module docstring)."""

    default_max_turns = 5

    def default_format_reward(self) -> float:
        """`0.2 / max_turns`: the format credit of a whole unsolved episode stays at most 0.2."""
        return 0.2 / self.max_turns

    def reset_episode(self) -> None:
        """Not solved yet."""
        self._solved = False

    def _feedback(self, pred: Optional[str]) -> str:
        """The user message after a wrong turn: what was wrong and how many turns are left."""
        turns_left = self.max_turns - self.turns
        left = f"You have {turns_left} turn{'s' if turns_left != 1 else ''} left."
        if pred is None:
            wanted = "on its own line as '#### <number>'" if self.mode == "strict" else "as a number"
            return f"I could not find a final answer in your response. Please give the final answer {wanted}. {left}"
        return f"Your answer {pred} is incorrect. Please check your reasoning and try again. {left}"

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        assert self._target is not None  # set by init, which BaseTextEnv.step requires first
        pred = extract_gsm8k_answer(action, self.mode)
        metadata = {"pred": pred, "found": pred is not None, "correct": False, "turn": self.turns}
        if numbers_match(pred, self._target):
            self._solved = True
            metadata["correct"] = True
            return final_step(1.0, metadata)
        reward = self.format_reward if pred is not None else 0.0
        # On the last turn the base class ends the episode and drops this message.
        return reply_step(self._feedback(pred), metadata, reward)

    def get_metrics(self) -> dict[str, Any]:
        """Base metrics plus `solved` and `turns_used` for the episode."""
        return {**super().get_metrics(), "solved": self._solved, "turns_used": self.turns}
