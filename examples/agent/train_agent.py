"""Train the ReAct agent with RL through skyrl-train, on CPU, from the embedded agent model.

Steps: (1) build or reuse the embedded agent model (the tiny char model warm-started on tool-call traces, cached
under $SKYRL_CACHE); (2) write the tool-use arithmetic dataset (one `instance` per row); (3) GRPO with `BasePPOExp`
and the `skyrl_agent` rollout workflow: each trajectory is the ReAct agent acting on the run's own engines (a
`<tool_call>` turn, the calculator's answer as a tool message, an `<answer>` turn), trained token-in/token-out;
(4) report held-out task success before and after.

    python examples/agent/train_agent.py                          # 80 GRPO steps, about 8 minutes
    python examples/agent/train_agent.py trainer.max_training_steps=5
    python examples/agent/train_agent.py --dry-run                # print the resolved config, start nothing

The last line is always `agent: eval success before=<float> after=<float>`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import skyrl_agent.training  # noqa: F401  (registers the skyrl_agent workflow and env class in this driver)
from skyrl_agent import ToolArithmeticTask, load_agent_config
from skyrl_agent.training import write_dataset
from skyrl_agent.warm_start import (
    AgentWarmStartSettings,
    agent_model_dir,
    capped_settings,
    describe,
    get_agent_model,
)
from skyrl_train.config import SkyRLConfig
from skyrl_train.entrypoints import example_run

HERE = Path(__file__).resolve().parent
AGENT_CONFIG = HERE / "tool_arithmetic.yaml"
MODEL = AgentWarmStartSettings()
"""The embedded agent model (2-digit, one operation: the same task_args as tool_arithmetic.yaml)."""


def train_overrides(model_dir: str, data_dir: Path, out_dir: Path) -> list[str]:
    """The CPU config (every value can be overridden from the command line)."""
    return [
        # 1 FSDP2 rank on a CPU worker, 1 hf engine sharing its slot, float32 throughout
        *example_run.cpu_stack_overrides(
            model_dir, data_dir / "train.jsonl", data_dir / "test.jsonl", ranks=1, num_engines=1
        ),
        "data.max_prompt_length=64",
        "generator.workflow=skyrl_agent",
        f"generator.workflow_args.config={AGENT_CONFIG}",
        "trainer.policy.optimizer.lr=5e-4",
        "trainer.policy.optimizer.weight_decay=0.0",
        "trainer.policy.optimizer.num_warmup_steps=5",
        "trainer.algorithm.advantage_estimator=grpo",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.train_batch_size=16",
        "trainer.policy_mini_batch_size=16",
        "trainer.micro_train_batch_size_per_gpu=32",
        "trainer.micro_forward_batch_size_per_gpu=32",
        "trainer.epochs=100",
        "trainer.max_training_steps=80",
        "generator.n_samples_per_prompt=8",
        "generator.sampling_params.seed=0",
        *example_run.answer_length_overrides(96),  # per model turn
        "trainer.eval_interval=20",
        "trainer.eval_before_train=true",
        "trainer.ckpt_interval=0",
        *example_run.output_overrides(out_dir),
        "trainer.project_name=agent",
        "trainer.run_name=react_tool_arithmetic",
    ]


def main(argv: list[str] | None = None) -> tuple[float, float]:
    """Build, train, report; returns held-out success (before, after) (NaN, NaN for --dry-run)."""
    parser = example_run.ExampleParser(__doc__, out="outputs/agent", train_size=1024, test_size=64, max_test_size=None)
    parser.add_argument(
        "--warm-start-steps",
        type=int,
        default=MODEL.max_steps,
        help="cap on the agent model's warm-start steps (a quick, barely trained model for smoke runs; cached apart)",
    )
    args = parser.parse(argv)
    settings = capped_settings(args.warm_start_steps, MODEL)
    started = example_run.start_run()
    out_dir = args.out
    agent_cfg = load_agent_config(AGENT_CONFIG)
    if agent_cfg.task_args != {"digits": MODEL.digits, "operations": MODEL.operations}:
        parser.error(f"{AGENT_CONFIG.name}: task_args {agent_cfg.task_args} differ from the model's settings")
    if args.dry_run:
        overrides = train_overrides(str(agent_model_dir(settings)), out_dir / "data", out_dir) + args.overrides
        example_run.print_resolved_config(overrides)
        return float("nan"), float("nan")

    print("agent: [1/3] embedded agent model (built once, then cached)", flush=True)
    model_dir = get_agent_model(settings)
    built = describe(model_dir)
    print(f"  model: {model_dir} (warm-start held-out success {built['held_out_success']:.3f})", flush=True)

    print("agent: [2/3] tool-use arithmetic dataset", flush=True)
    task = ToolArithmeticTask(**agent_cfg.task_args)
    data_dir = out_dir / "data"
    write_dataset(task, args.train_size, seed=settings.seed, split="train", path=data_dir / "train.jsonl")
    write_dataset(task, args.test_size, seed=settings.seed, split="test", path=data_dir / "test.jsonl")

    cfg = SkyRLConfig.from_cli_overrides(train_overrides(str(model_dir), data_dir, out_dir) + args.overrides)
    print("agent: [3/3] GRPO with the skyrl_agent workflow on Ray (1 FSDP2 rank + 1 colocated hf engine)", flush=True)
    run = example_run.ExampleRun.train(cfg)
    before, after = run.eval_accuracy()
    run.print_summary(started)
    print(f"agent: eval success before={before:.4f} after={after:.4f}", flush=True)
    return before, after


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
    sys.exit(0)
