"""The CPU quickstart: GRPO on the embedded tiny model and 2-digit addition, through the real stack.

Steps: (1) build or reuse the warm-started tiny model (cached under $SKYRL_CACHE); (2) write the addition dataset;
(3) train with `BasePPOExp`: Ray, 2 FSDP2 policy ranks over gloo, 2 hf engine actors colocated with them, shared-
memory weight sync after every step; (4) report held-out accuracy before and after, the checkpoint, the HF export
and the curve plot. Extra `key=value` arguments override the config (e.g. `trainer.max_training_steps=10`);
`--dry-run` prints the resolved config and exits (no model is built, no data written, Ray is not started).

The last line is always `quickstart: eval accuracy before=<float> after=<float>`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from skyrl_gym.envs.synthetic.generate import write_dataset
from skyrl_train.config import SkyRLConfig
from skyrl_train.entrypoints import example_run
from skyrl_train.recipes.embedded import embedded_model_dir, get_embedded_model, read_description
from skyrl_train.recipes.warm_start import WarmStartSettings
from skyrl_train.weight_sync.strategy import resolve_strategy_name

MODEL = WarmStartSettings(task="addition", difficulty=2, size=2, seed=0, train_examples=8192)
"""The embedded model: 2-digit addition, ~0.4 M parameters, warm-started until greedy accuracy first reaches 20 %."""


def describe_stack(cfg: SkyRLConfig) -> str:
    """E.g. `2 FSDP2 ranks + 2 colocated hf engines, shm weight sync`, from the config actually used."""
    placement, engine = cfg.trainer.placement, cfg.generator.inference_engine
    ranks = placement.policy_num_nodes * placement.policy_num_gpus_per_node
    where = "colocated" if placement.colocate_all else "separate"
    sync = resolve_strategy_name(engine.weight_sync_backend, placement.colocate_all, cfg.resolved_device())
    if sync == "cuda_ipc" and engine.weight_sync_backend == "auto" and engine.num_engines > 1:
        sync = "cuda_ipc (the engine on rank 0's GPU) + broadcast (the others)"  # weight_sync.locations
    return f"{ranks} FSDP2 ranks + {engine.num_engines} {where} {engine.backend} engines, {sync} weight sync"


def quickstart_overrides(model_dir: str, data_dir: Path, out_dir: Path) -> list[str]:
    """The CPU config of the quickstart (every value can be overridden from the command line)."""
    return [
        # 2 FSDP2 ranks on CPU workers, 2 hf engines sharing their slots, float32 throughout
        *example_run.cpu_stack_overrides(
            model_dir, data_dir / "train.parquet", data_dir / "test.parquet", ranks=2, num_engines=2
        ),
        "data.max_prompt_length=64",
        "environment.env_class=addition",
        "generator.batched=true",  # single-turn: one engine call for the whole batch
        "generator.inference_engine.weight_sync_backend=auto",
        "trainer.policy.optimizer.lr=2e-4",  # 5e-4 and up wreck the tiny model within ~40 steps
        "trainer.policy.optimizer.weight_decay=0.0",
        "trainer.policy.optimizer.scheduler=cosine",  # the low rate at the end steadies the final greedy answers
        "trainer.policy.optimizer.num_warmup_steps=10",
        "trainer.algorithm.advantage_estimator=grpo",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.train_batch_size=32",
        "trainer.policy_mini_batch_size=16",
        "trainer.micro_train_batch_size_per_gpu=64",  # a whole mini-batch shard per pass: fewer FSDP collectives
        "trainer.micro_forward_batch_size_per_gpu=64",
        "trainer.policy.fsdp.reshard_after_forward=false",  # keeping 1.6 MB gathered beats re-gathering for backward
        "trainer.policy.fsdp.shard_layers=false",  # one FSDP unit: a 2-layer model pays for per-layer hooks (~7 %)
        "trainer.epochs=100",
        "trainer.max_training_steps=600",  # 450 left seed 0 at +0.435 (docs/quickstart.md)
        "generator.n_samples_per_prompt=8",
        "generator.sampling_params.seed=0",  # reproducible rollouts (per step and row)
        # 0.7 rather than 1: from the weakest warm start measured, the three seeds gained +0.47/+0.535/+0.485 where
        # temperature 1 gave +0.475/+0.415/+0.455 (docs/quickstart.md, "Sampling temperature")
        "generator.sampling_params.temperature=0.7",
        *example_run.answer_length_overrides(8),
        "trainer.eval_interval=50",
        "trainer.eval_before_train=true",
        "trainer.ckpt_interval=150",
        "trainer.max_ckpts_to_keep=2",
        *example_run.output_overrides(out_dir),
        "trainer.project_name=quickstart",
        "trainer.run_name=grpo_addition",
    ]


def main() -> int:
    """Build, train, report."""
    parser = example_run.ExampleParser(
        __doc__, out="outputs/quickstart", train_size=8000, test_size=200, max_test_size=MODEL.eval_examples
    )
    parser.add_argument(
        "--verify-weight-sync",
        action="store_true",
        help="after every weight sync, compare each engine's weight checksums with the policy's (fails on a mismatch)",
    )
    args = parser.parse()
    started = example_run.start_run()
    out_dir = args.out
    if args.dry_run:  # the config the run would use, with the model's cache folder (which may not exist yet)
        example_run.print_resolved_config(
            quickstart_overrides(str(embedded_model_dir(MODEL)), out_dir / "data", out_dir) + args.overrides
        )
        return 0

    print("quickstart: [1/3] embedded model (built once, then cached)", flush=True)
    model_dir = get_embedded_model(MODEL)
    built = read_description(model_dir)
    parameters = built.get("model", {}).get("num_parameters", 0)
    print(f"  model: {model_dir} ({parameters / 1e6:.2f} M parameters)", flush=True)

    print("quickstart: [2/3] addition dataset", flush=True)
    data_dir = out_dir / "data"
    # seed and test size match the warm start's held-out split (its first problems), so no test problem was seen
    # during the supervised warm start
    write_dataset(
        data_dir,
        MODEL.task,
        train_size=args.train_size,
        test_size=args.test_size,
        difficulty=MODEL.difficulty,
        seed=MODEL.seed,
    )
    print(f"  data: {data_dir}", flush=True)

    cfg = SkyRLConfig.from_cli_overrides(quickstart_overrides(str(model_dir), data_dir, out_dir) + args.overrides)
    print(f"quickstart: [3/3] GRPO on Ray ({describe_stack(cfg)})", flush=True)
    run = example_run.ExampleRun.train(cfg, verify_weight_sync=args.verify_weight_sync)
    before, after = run.eval_accuracy()
    checkpoints = run.experiment.trainer.checkpoints
    run.print_summary(started, curves=False)
    print(f"  checkpoint: {checkpoints.saved_paths[-1] if checkpoints.saved_paths else 'none'}")
    print(f"  HF export: {checkpoints.exported_paths[-1] if checkpoints.exported_paths else 'none'}")
    print(f"  curves: {run.experiment.plot_path}")
    print(f"quickstart: eval accuracy before={before:.4f} after={after:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
