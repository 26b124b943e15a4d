"""Built-in tasks; `Task` is the base class of users' own."""

from skyrl_agent.tasks.arithmetic import ToolArithmeticTask
from skyrl_agent.tasks.base import Task
from skyrl_agent.tasks.math_python import MathPythonTask
from skyrl_agent.tasks.mini_swe import MiniSWETask
from skyrl_agent.tasks.openenv_task import OpenEnvTask
from skyrl_agent.tasks.search import SearchTask
from skyrl_agent.tasks.text2sql import Text2SQLTask

__all__ = ["MathPythonTask", "MiniSWETask", "OpenEnvTask", "SearchTask", "Task", "Text2SQLTask", "ToolArithmeticTask"]
