"""The `search` environment: answer questions with the help of a retrieval server."""

from skyrl_gym.envs.search.env import SearchEnv

__all__ = ["SearchEnv"]
