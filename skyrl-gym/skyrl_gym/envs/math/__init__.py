"""Competition-math environments `math` (1/0 reward) and `aime` (integer answers, +1/-1 reward)."""

from skyrl_gym.envs.math.env import AIMEEnv, MathEnv

__all__ = ["MathEnv", "AIMEEnv"]
