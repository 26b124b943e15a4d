"""The `text2sql` environment: answer questions by querying a read-only SQLite database."""

from skyrl_gym.envs.text2sql.env import Text2SQLEnv

__all__ = ["Text2SQLEnv"]
