"""Built-in agents; `BaseAgent` is the base class of users' own."""

from skyrl_agent.agents.base import AgentContext, BaseAgent
from skyrl_agent.agents.codeact import CodeActAgent
from skyrl_agent.agents.react import ReActAgent

__all__ = ["AgentContext", "BaseAgent", "CodeActAgent", "ReActAgent"]
