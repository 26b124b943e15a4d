"""skyrl_agent: agent harnesses and tasks for multi-turn, long-horizon agents, plugged into skyrl_train."""

__version__ = "0.1.0"
