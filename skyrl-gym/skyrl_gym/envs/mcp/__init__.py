"""The `mcp` environment: tool use over Model Context Protocol servers."""

from skyrl_gym.envs.mcp.env import MCPEnv
from skyrl_gym.envs.mcp.reward import MCPGroundTruth, normalize_answer, parse_ground_truth, score_episode

__all__ = ["MCPEnv", "MCPGroundTruth", "normalize_answer", "parse_ground_truth", "score_episode"]
