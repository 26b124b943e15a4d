"""Built-in tasks; `Task` is the base class of users' own."""

from skyrl_agent.tasks.arithmetic import ToolArithmeticTask
from skyrl_agent.tasks.base import Task
from skyrl_agent.tasks.mini_swe import MiniSWETask

__all__ = ["MiniSWETask", "Task", "ToolArithmeticTask"]
