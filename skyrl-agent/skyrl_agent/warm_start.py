"""The embedded agent model: the project's tiny char-level model warm-started on ReAct traces of `tool_arithmetic`.

The traces are made by the real ReAct agent with a scripted solver (call `calc` on the question, answer with its
result), so the model learns exactly the token layout it will see when it acts: the compact tool listing, a
`<tool_call>` turn, the tool message, an `<answer>` turn. Training stops once greedy task success on held-out
instances enters a target band (high enough that RL has successes to learn from, low enough to leave it room), and
the model is cached by its settings like the quickstart's embedded model.

    python -m skyrl_agent.warm_start          # build (or find) it and print its folder and success rate
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Optional

import torch

from skyrl_agent.backends import SkyRLTrainBackend
from skyrl_agent.runner import AgentRunner
from skyrl_agent.tasks.arithmetic import ToolArithmeticTask
from skyrl_agent.testing import ScriptedBackend
from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer
from skyrl_train.recipes.embedded import build_cached, cache_root
from skyrl_train.recipes.warm_start import collate, train_step

CODE_VERSION = 1
"""Bump when the traces or the training change, so cached models are rebuilt."""
DESCRIPTION_FILE = "skyrl_agent_model.json"

COMPACT_TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\ntools:"
    "{% for tool in tools %} {{ tool.function.name }}({{ tool.function.parameters.properties | list | join(',') }})"
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML whose tool listing is one line (`tools: calc(expression)`): a small model's context cannot spare the JSON
schemas. Calls are still `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`."""


@dataclass(frozen=True)
class AgentWarmStartSettings:
    """What the embedded agent model is trained on and how long."""

    size: int = 2
    seed: int = 0
    digits: int = 2
    operations: int = 1
    train_examples: int = 2048
    batch_size: int = 32
    lr: float = 3e-3
    max_steps: int = 1200
    eval_every: int = 25
    eval_examples: int = 64
    target_low: float = 0.15
    target_high: float = 0.45

    def cache_key(self) -> str:
        """A short hash of the settings and `CODE_VERSION`."""
        payload = json.dumps({"code_version": CODE_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def capped_settings(
    max_steps: Optional[int], settings: Optional[AgentWarmStartSettings] = None
) -> AgentWarmStartSettings:
    """`settings` (default: the defaults) with warm start capped at `max_steps` (None: unchanged); a capped build
    measures success once, at its last step (smoke runs want the model, not the curve)."""
    settings = settings or AgentWarmStartSettings()
    if max_steps is None or max_steps >= settings.max_steps:
        return settings
    return replace(settings, max_steps=max_steps, eval_every=max_steps)


def agent_tokenizer() -> Any:
    """The char tokenizer with the compact tool template."""
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = COMPACT_TOOLS_TEMPLATE
    return tokenizer


def solver(request: Any) -> str:
    """The scripted expert: call `calc` on the question, then answer with the tool's output."""
    last = request.messages[-1]
    if last["role"] == "user":
        return '<tool_call>{"name": "calc", "arguments": {"expression": "' + last["content"] + '"}}</tool_call>'
    return f"<answer>{last['content']}</answer>"


AGENT_CONFIG: dict[str, Any] = {
    "agent_cls": "react",
    "task": "tool_arithmetic",
    "generator": {"max_iterations": 3, "max_prompt_length": 512, "sampling_params": {"max_tokens": 96}},
    "dispatcher": {"type": "async_pipeline", "progress": False, "max_eval_parallel_agents": 64},
}
"""The agent config the model is trained and measured with (`task_args` come from the settings)."""


def agent_config(settings: AgentWarmStartSettings) -> dict[str, Any]:
    """`AGENT_CONFIG` with the task size of `settings`."""
    return {**AGENT_CONFIG, "task_args": {"digits": settings.digits, "operations": settings.operations}}


def expert_traces(settings: AgentWarmStartSettings, tokenizer: Any) -> list[tuple[list[int], list[int]]]:
    """(token ids, loss mask over them) of the scripted expert's trajectories on the training instances."""
    task = ToolArithmeticTask(settings.digits, settings.operations)
    rows = task.build_dataset(settings.train_examples, seed=settings.seed, split="warm_start")
    runner = AgentRunner(agent_config(settings), ScriptedBackend(tokenizer, solver), tokenizer)
    traces = []
    for trajectory in runner.run(rows, val_mode=True).trajectories:
        assert trajectory.reward == 1.0, trajectory.summary()  # the expert is always right
        ids = trajectory.prompt_ids + trajectory.response_ids
        traces.append((ids, [0] * len(trajectory.prompt_ids) + trajectory.loss_mask))
    return traces


def greedy_success(model: Any, tokenizer: Any, rows: list[dict[str, Any]], settings: AgentWarmStartSettings) -> float:
    """Held-out task success of the model acting greedily as the ReAct agent (real engine, real tools)."""
    was_training = model.training
    try:
        client = InferenceEngineClient([HFInferenceEngine(model, tokenizer, max_batch_size=64)])
        runner = AgentRunner(agent_config(settings), SkyRLTrainBackend(client, tokenizer), tokenizer)
        result = asyncio.run(runner.arun(rows, val_mode=True))
        return result.metrics["agent/success_rate"]
    finally:
        model.train(was_training)


def build_agent_model(settings: AgentWarmStartSettings, directory: Path, progress: bool = True) -> dict[str, Any]:
    """Train and save the model (and tokenizer, and a description with its success history) into `directory`."""
    started = time.perf_counter()
    tokenizer = agent_tokenizer()
    traces = expert_traces(settings, tokenizer)
    task = ToolArithmeticTask(settings.digits, settings.operations)
    held_out = task.build_dataset(settings.eval_examples, seed=settings.seed, split="warm_start_eval")
    model = build_tiny_model(
        TinyModelSpec(size=settings.size, vocab_size=128, max_position_embeddings=512),
        seed=settings.seed,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.1)
    rng = random.Random(settings.seed)
    history: list[dict[str, float]] = []
    success, step = 0.0, 0
    model.train()
    for step in range(1, settings.max_steps + 1):
        loss = train_step(model, optimizer, collate(rng.sample(traces, settings.batch_size), tokenizer.pad_token_id))
        if step % settings.eval_every == 0:
            success = greedy_success(model, tokenizer, held_out, settings)
            history.append({"step": step, "loss": round(loss, 4), "success": success})
            if progress:
                print(f"[agent warm start] step {step} loss {loss:.3f} held-out success {success:.3f}", file=sys.stderr)
            if success >= settings.target_low:
                break
    model.eval()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    save_tokenizer(tokenizer, directory)
    description = {
        "code_version": CODE_VERSION,
        "settings": asdict(settings),
        "steps": step,
        "held_out_success": success,
        "in_target_band": settings.target_low <= success <= settings.target_high,
        "history": history,
        "seconds": round(time.perf_counter() - started, 1),
        "agent_config": agent_config(settings),
    }
    (directory / DESCRIPTION_FILE).write_text(json.dumps(description, indent=2) + "\n")
    return description


def agent_model_dir(settings: AgentWarmStartSettings) -> Path:
    """Where the model for `settings` is (or would be) cached."""
    return cache_root() / "embedded" / f"agent-{settings.cache_key()}"


def get_agent_model(settings: Optional[AgentWarmStartSettings] = None, progress: bool = True) -> Path:
    """The embedded agent model's folder, built on first use (one builder at a time; a half-built one is never
    used)."""
    settings = settings or AgentWarmStartSettings()
    return build_cached(
        agent_model_dir(settings),
        lambda folder: (folder / DESCRIPTION_FILE).is_file(),
        lambda folder: build_agent_model(settings, folder, progress=progress),
    )


def describe(directory: Path) -> dict[str, Any]:
    """The description saved next to a built agent model."""
    return json.loads((Path(directory) / DESCRIPTION_FILE).read_text())


if __name__ == "__main__":
    path = get_agent_model()
    info = describe(path)
    print(f"{path}\nheld-out success {info['held_out_success']:.3f} after {info['steps']} steps ({info['seconds']} s)")
