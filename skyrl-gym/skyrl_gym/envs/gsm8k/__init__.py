"""GSM8K grade-school math environments: single-turn `gsm8k` and the feedback-driven `gsm8k_multi_turn`."""

from skyrl_gym.envs.gsm8k.env import GSM8KEnv
from skyrl_gym.envs.gsm8k.multi_turn import GSM8KMultiTurnEnv

__all__ = ["GSM8KEnv", "GSM8KMultiTurnEnv"]
