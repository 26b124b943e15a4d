"""skyrl_agent: the agent layer. `AgentRunner` runs a registered agent (ReAct, or your own `BaseAgent`) on a
registered task with its tools, through one of three backends (`skyrl_train` engines, an OpenAI-compatible server,
a Tinker sampling client) and one of three dispatchers; trajectories are token-in/token-out."""

from skyrl_agent.agents import AgentContext, BaseAgent, ReActAgent
from skyrl_agent.backends import AgentBackend, Generation, OpenAIBackend, SkyRLTrainBackend, TinkerBackend, TurnRequest
from skyrl_agent.config import AgentConfigError, AgentRunConfig, load_agent_config
from skyrl_agent.registry import register_agent, register_task, register_tool_group
from skyrl_agent.runner import AgentRunner, RunResult
from skyrl_agent.tasks import Task, ToolArithmeticTask
from skyrl_agent.trajectory import AgentTrajectory

__version__ = "0.1.0+repo"

__all__ = [
    "AgentBackend",
    "AgentConfigError",
    "AgentContext",
    "AgentRunConfig",
    "AgentRunner",
    "AgentTrajectory",
    "BaseAgent",
    "Generation",
    "OpenAIBackend",
    "ReActAgent",
    "RunResult",
    "SkyRLTrainBackend",
    "Task",
    "TinkerBackend",
    "ToolArithmeticTask",
    "TurnRequest",
    "load_agent_config",
    "register_agent",
    "register_task",
    "register_tool_group",
]
