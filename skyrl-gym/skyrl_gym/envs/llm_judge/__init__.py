"""The `llm_as_a_judge` environment: a judge model behind an OpenAI-compatible API scores each response."""

from skyrl_gym.envs.llm_judge.env import LLMJudgeEnv

__all__ = ["LLMJudgeEnv"]
