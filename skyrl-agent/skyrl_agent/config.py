"""The agent run's configuration: typed dataclasses read from YAML or a dict, unknown keys refused by their dotted name.

agent_cls: react                 # a registered agent (`@register_agent`)
task: tool_arithmetic            # a registered task (`@register_task`), with its own tools
tools: []                        # more registered tool groups shown to the model (`@register_tool_group`)
task_args: {}                    # keyword arguments of the task's constructor
agent: {thinking: keep, tool_timeout_s: 10, max_tool_calls_per_turn: 4}
generator: {backend: skyrl_train, backend_args: {}, max_iterations: 4, max_prompt_length: 1024,
            sampling_params: {max_tokens: 64, temperature: 1.0}, num_trajectories: 1}
dispatcher: {type: async_pipeline, max_parallel_agents: 16, max_eval_parallel_agents: 32, max_parallel_tools: 4}
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from skyrl_train.inference.types import SamplingParams

BACKENDS = ("skyrl_train", "openai", "tinker")
DISPATCHERS = ("batch", "async_batch", "async_pipeline")
THINKING = ("keep", "strip")


class AgentConfigError(ValueError):
    """A bad agent configuration; the message names the key and what was expected."""


@dataclass
class AgentBehaviour:
    """How an agent treats its turns."""

    thinking: str = "keep"
    """`keep`: later turns see earlier `<think>...</think>` blocks as generated (one token-in/token-out sequence).
    `strip`: each turn's prompt is re-rendered from the history without them; every turn is then its own training
    sample (prompt = that turn's context)."""
    tool_timeout_s: float = 10.0
    """A tool call that runs longer ends with an error observation (`tool timed out after ...`)."""
    max_tool_calls_per_turn: int = 4
    """Calls beyond this in one model turn are not run; the observation says so."""


@dataclass
class GeneratorSection:
    """How trajectories are generated."""

    backend: str = "skyrl_train"
    """`skyrl_train` (the trainer's engines), `openai` (an OpenAI-compatible server) or `tinker` (a SamplingClient)."""
    backend_args: dict[str, Any] = field(default_factory=dict)
    """Arguments of the backend built by `AgentRunner.from_config` (`openai`: base_url, model, api_key, mode;
    `tinker`: base_url, model_path, api_key). Ignored when a backend object is passed in."""
    max_iterations: int = 4
    """Model turns per trajectory at most; a trajectory still calling tools after them stops with `max_iterations`."""
    max_prompt_length: int = 1024
    """Tokens of context (prompt, turns and observations) at most; more stops the trajectory with `context_overflow`."""
    sampling_params: dict[str, Any] = field(default_factory=lambda: {"max_tokens": 64, "temperature": 1.0})
    """Per model turn (skyrl_train `SamplingParams` keys; `max_tokens` is capped by what the context has left)."""
    eval_sampling_params: dict[str, Any] = field(default_factory=lambda: {"temperature": 0.0})
    """Overrides of `sampling_params` when `run(..., val_mode=True)`."""
    num_trajectories: int = 1
    """Trajectories per instance (a GRPO group when training); `val_mode` runs one."""


@dataclass
class DispatcherSection:
    """How trajectories are scheduled."""

    type: str = "async_pipeline"
    """`batch` (all agents' turns in lock step), `async_batch` (each agent on its own, at most `max_parallel_agents`
    at once) or `async_pipeline` (generation, tools and evaluation as separate stages with their own limits)."""
    max_parallel_agents: int = 16
    """Trajectories in flight at once (pipeline: waiting on the model at once)."""
    max_eval_parallel_agents: int = 32
    """The same bound for `val_mode` runs."""
    max_parallel_tools: int = 4
    """`async_pipeline`: tool calls and evaluations running at once."""
    progress: bool = True
    """Show a progress bar of finished trajectories."""


@dataclass
class AgentRunConfig:
    """An agent run: which agent, on which task, with which tools, generated and dispatched how."""

    agent_cls: str = "react"
    task: str = "tool_arithmetic"
    task_args: dict[str, Any] = field(default_factory=dict)
    tools: list[str] = field(default_factory=list)
    agent: AgentBehaviour = field(default_factory=AgentBehaviour)
    generator: GeneratorSection = field(default_factory=GeneratorSection)
    dispatcher: DispatcherSection = field(default_factory=DispatcherSection)

    def sampling_params(self, val_mode: bool = False) -> SamplingParams:
        """The per-turn sampling params (with the eval overrides in `val_mode`)."""
        values = dict(self.generator.sampling_params)
        if val_mode:
            values.update(self.generator.eval_sampling_params)
        return SamplingParams.from_dict(values)

    def validate(self) -> AgentRunConfig:
        """Check every value; raise `AgentConfigError` naming the first bad key."""
        _choice("generator.backend", self.generator.backend, BACKENDS)
        _choice("dispatcher.type", self.dispatcher.type, DISPATCHERS)
        _choice("agent.thinking", self.agent.thinking, THINKING)
        for key, value in (
            ("generator.max_iterations", self.generator.max_iterations),
            ("generator.max_prompt_length", self.generator.max_prompt_length),
            ("generator.num_trajectories", self.generator.num_trajectories),
            ("dispatcher.max_parallel_agents", self.dispatcher.max_parallel_agents),
            ("dispatcher.max_eval_parallel_agents", self.dispatcher.max_eval_parallel_agents),
            ("dispatcher.max_parallel_tools", self.dispatcher.max_parallel_tools),
            ("agent.max_tool_calls_per_turn", self.agent.max_tool_calls_per_turn),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise AgentConfigError(f"{key} must be a positive integer, got {value!r}")
        if not self.agent.tool_timeout_s > 0:
            raise AgentConfigError(f"agent.tool_timeout_s must be > 0, got {self.agent.tool_timeout_s!r}")
        for key, values in (
            ("generator.sampling_params", self.generator.sampling_params),
            (
                "generator.eval_sampling_params",
                {**self.generator.sampling_params, **self.generator.eval_sampling_params},
            ),
        ):
            try:
                params = SamplingParams.from_dict(dict(values))
            except (TypeError, ValueError) as exc:
                raise AgentConfigError(f"{key}: {exc}") from exc
            if params.n != 1:
                raise AgentConfigError(f"{key}.n must be 1 (use generator.num_trajectories), got {params.n}")
        from skyrl_agent.registry import AGENTS, TASKS, TOOL_GROUPS, load_builtins
        from skyrl_train.utils.registry import UnknownNameError

        load_builtins()
        for key, registry, name in [("agent_cls", AGENTS, self.agent_cls), ("task", TASKS, self.task)] + [
            (f"tools[{i}]", TOOL_GROUPS, name) for i, name in enumerate(self.tools)
        ]:
            try:
                registry.get(name)
            except UnknownNameError as exc:
                raise AgentConfigError(f"{key}: {exc}") from None
        return self


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise AgentConfigError(f"{key} must be one of {list(allowed)}, got {value!r}")


def _build(cls: type, values: Any, prefix: str) -> Any:
    """A dataclass from a mapping, nested sections included; an unknown key is refused by its dotted name."""
    if not isinstance(values, dict):
        raise AgentConfigError(f"{prefix or 'the config'} must be a mapping, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            raise AgentConfigError(
                f"unknown key {dotted!r}; known keys{' of ' + prefix if prefix else ''}: {sorted(fields)}"
            )
        default = fields[key].default_factory() if fields[key].default_factory is not dataclasses.MISSING else None
        kwargs[key] = _build(type(default), value, dotted) if dataclasses.is_dataclass(default) else value
    return cls(**kwargs)


def load_agent_config(source: Union[str, Path, dict[str, Any], AgentRunConfig]) -> AgentRunConfig:
    """An `AgentRunConfig` from a YAML file path, a dict or a config (checked with `validate`)."""
    if isinstance(source, AgentRunConfig):
        return source.validate()
    if isinstance(source, (str, Path)):
        import yaml

        path = Path(source)
        if not path.is_file():
            raise AgentConfigError(f"agent config file {str(path)!r} does not exist")
        source = yaml.safe_load(path.read_text()) or {}
    return _build(AgentRunConfig, source, "").validate()
