"""The `multiply` environment: SkyRL's multiplication example, several attempts with feedback."""

from skyrl_gym.envs.multiply.env import MultiplyEnv

__all__ = ["MultiplyEnv"]
