"""Evaluate the ReAct agent on tool-use arithmetic against an OpenAI-compatible server.

With no `--base-url`, it serves the embedded agent model with our endpoint (`skyrl_train.serving`, the `hf` engine)
on 127.0.0.1 in this process and evaluates against it over HTTP; with `--base-url` (and `--model`) it evaluates
whatever that server serves: `python -m skyrl_train.entrypoints.serve`, `vllm serve`, a hosted API (`--mode chat`
for servers without a completions endpoint).

    python examples/agent/evaluate_agent.py --size 32
    python examples/agent/evaluate_agent.py --base-url http://127.0.0.1:8000/v1 --model skyrl/agent --tokenizer DIR

The last line is always `agent eval: success=<float> turns=<float> trajectories=<int>`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

from skyrl_agent import AgentRunner, OpenAIBackend, ToolArithmeticTask, load_agent_config
from skyrl_agent.warm_start import capped_settings, get_agent_model

HERE = Path(__file__).resolve().parent
SERVED = "skyrl/embedded-agent"


@contextlib.contextmanager
def local_endpoint(model_dir: str) -> Iterator[str]:
    """Our OpenAI-compatible endpoint over the model, on a free 127.0.0.1 port; yields its base URL."""
    import socket

    from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient
    from skyrl_train.models.loading import load_causal_lm, load_tokenizer
    from skyrl_train.serving import create_app
    from skyrl_train.serving.background import BackgroundServer

    tokenizer = load_tokenizer(model_dir)
    client = InferenceEngineClient([HFInferenceEngine(load_causal_lm(model_dir, dtype="float32"), tokenizer)])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = BackgroundServer(create_app(client, tokenizer, SERVED), "127.0.0.1", port).start()
    try:
        yield server.url
    finally:
        server.stop()


def main(argv: Optional[list[str]] = None) -> dict:
    """Evaluate; returns the run metrics."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(HERE / "tool_arithmetic.yaml"), help="the agent config")
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible server (default: serve our own)")
    parser.add_argument("--model", default=SERVED, help="the model name the server serves")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the embedded agent model's)")
    parser.add_argument("--mode", choices=["completions", "chat"], default="completions")
    parser.add_argument("--size", type=int, default=64, help="held-out instances")
    parser.add_argument("--show", type=int, default=2, help="trajectories to print")
    parser.add_argument(
        "--warm-start-steps", type=int, default=None, help="cap on the embedded agent model's warm start (smoke runs)"
    )
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    cfg = load_agent_config(args.config)
    cfg.generator.backend = "openai"
    settings = capped_settings(args.warm_start_steps)
    model_dir = None if args.base_url and args.tokenizer else str(get_agent_model(settings))
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or model_dir)
    rows = ToolArithmeticTask(**cfg.task_args).build_dataset(args.size, seed=0, split="test")
    with contextlib.ExitStack() as stack:
        base_url = args.base_url or stack.enter_context(local_endpoint(model_dir))
        backend = OpenAIBackend(base_url, args.model, tokenizer, mode=args.mode)
        result = AgentRunner(cfg, backend, tokenizer).run(rows, val_mode=True)
    for trajectory in result.trajectories[: args.show]:
        print(json.dumps(trajectory.summary()))
        print("  " + trajectory.response_text.replace("\n", "\n  "))
    metrics = result.metrics
    print(
        f"agent eval: success={metrics['agent/success_rate']:.4f} turns={metrics['agent/turns_mean']:.2f} "
        f"trajectories={len(result.trajectories)}",
        flush=True,
    )
    return metrics


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
    sys.exit(0)
