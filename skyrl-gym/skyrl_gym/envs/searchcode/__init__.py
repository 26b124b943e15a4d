"""The `searchcode` environment: math questions answered with a search tool and a sandboxed Python tool."""

from skyrl_gym.envs.searchcode.env import SearchCodeEnv, parse_tool_tag

__all__ = ["SearchCodeEnv", "parse_tool_tag"]
