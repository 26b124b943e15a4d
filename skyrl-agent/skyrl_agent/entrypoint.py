"""Train any agent config with skyrl-train: write its task's dataset, then run `BasePPOExp` with the `skyrl_agent`
workflow.

    python -m skyrl_agent.entrypoint --agent-config agent.yaml --out outputs/run trainer.policy.model.path=... [key=value ...]
    python -m skyrl_agent.entrypoint --agent-config agent.yaml --dry-run trainer.policy.model.path=/m

Everything after the options is a skyrl-train config override (Hydra style); the entrypoint adds only the dataset
paths and `generator.workflow=skyrl_agent generator.workflow_args.config=<agent config>`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Optional

import skyrl_agent.training  # noqa: F401  (registers the workflow and the env class)
from skyrl_agent.config import load_agent_config
from skyrl_agent.registry import TASKS, load_builtins
from skyrl_agent.training import check_training_config, write_dataset


def agent_overrides(agent_config: Path, data_dir: Path) -> list[str]:
    """The overrides that point a training run at the agent and its data."""
    return [
        f"data.train_data=['{data_dir / 'train.jsonl'}']",
        f"data.val_data=['{data_dir / 'test.jsonl'}']",
        "generator.workflow=skyrl_agent",
        f"generator.workflow_args.config={agent_config}",
    ]


def main(argv: Optional[list[str]] = None) -> int:
    """Parse, write the data, train (or print the config)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent-config", required=True, help="the agent YAML")
    parser.add_argument("--out", default="outputs/agent", help="where the dataset goes")
    parser.add_argument("--train-size", type=int, default=1024)
    parser.add_argument("--test-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dry-run", action="store_true", help="print the resolved config and exit")
    parser.add_argument("overrides", nargs="*", help="skyrl-train config overrides, key=value")
    args = parser.parse_intermixed_args(argv)
    from skyrl_train.config import SkyRLConfig
    from skyrl_train.config.cli import render_resolved_config
    from skyrl_train.config.registered_names import check_registered_names
    from skyrl_train.entrypoints.main_base import BasePPOExp

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    config_path = Path(args.agent_config).resolve()
    agent_cfg = load_agent_config(config_path)
    check_training_config(agent_cfg)
    data_dir = Path(args.out).resolve() / "data"
    cfg = SkyRLConfig.from_cli_overrides(agent_overrides(config_path, data_dir) + args.overrides)
    check_registered_names(cfg)
    if args.dry_run:
        print(render_resolved_config(cfg), end="")
        return 0
    load_builtins()
    task = TASKS.get(agent_cfg.task)(**agent_cfg.task_args)
    write_dataset(task, args.train_size, seed=args.seed, split="train", path=data_dir / "train.jsonl")
    write_dataset(task, args.test_size, seed=args.seed, split="test", path=data_dir / "test.jsonl")
    result = BasePPOExp(cfg).run()
    print(f"skyrl_agent: {result.global_step} steps; final eval {result.final_eval}", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
