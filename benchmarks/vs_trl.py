"""Benchmark: TRL's `GRPOTrainer` and our real stack, back to back, on the same task, model and settings, per seed.

Two shapes (`--shape`, defined in `shapes.py`):

- `short`: the quickstart's embedded warm-started 0.4 M-parameter model on 2-digit addition, 32 prompts x 8
  samples per step, at most 8 new tokens, lr 2e-4;
- `long`: a 21 M-parameter model warm-started locally (`skyrl_train.recipes.warm_start`, cached like the
  quickstart's) on `Convert <3-6 digits> to binary` with the halving shown (answers of 95-316 tokens), 4 prompts
  x 4 samples per step, at most 330 new tokens.

Both sides use the same settings: temperature 1.0, constant lr (no warm-up), AdamW without weight decay, grad-norm
clip 1.0, PPO clip 0.2, no KL term, token-mean loss, group-std-normalised advantages, one optimizer step per batch,
the same compute precision, and train `--steps` steps per seed from the same warm start (`--seeds`, each seed sets
both sides' sampling, data order and initialisation seeds). The precision is ours to pick (`auto`: float32, or
bfloat16 for a model of 5 M parameters or more on a CPU with native bfloat16); `--trl-precision match` (the default)
gives TRL the same one (`bf16=True`: its autocast mixed precision, float32 master weights), `float32` / `bfloat16`
set TRL's by hand:

- `trl`: `trl.GRPOTrainer` in one process on the CPU (torch's default intra-op threads), generation with
  `transformers`' `generate`, saved with `save_model` at the end.
- `ours`: `BasePPOExp` with default keys except the model, data, batch shape, these algorithm settings, the
  quickstart's placement (2 FSDP2 ranks + 2 colocated `hf` engines) and bookkeeping (`shapes.ours_overrides`):
  every speed setting is `auto`. `--ours-overrides key=value ...` changes its config.

Each side runs in a fresh process. Wall time per step is the time between the ends of consecutive steps (the first
from its start), averaged after `--warmup-steps`; completions/s is the step's completions over that, generated
tokens/s the kept steps' generated tokens over their seconds. Peak resident memory (`VmHWM`) of every process is
read at the end: TRL's one process; our driver, policy ranks and engines (`memory/*` metrics) and Ray's own
processes. Resident sizes count shared pages (torch's libraries, shared memory) in every process that maps them, so
the proportional set size (`Pss`, each shared page split among its users) of every process at the last step is
recorded beside them. The same greedy evaluation (`greedy_accuracy` of the warm start) scores the initial model and both final
models on the same held-out problems. Per seed and across seeds (mean and standard error), the table, the ratios
ours/TRL and the acceptance check go to stdout and to `--out` (`vs_trl.json` / `vs_trl_long.json`, with a plot of
the reward curves and memory).

TRL is not a dependency of this repo: the script creates (or reuses) a benchmark venv, `--venv` (default
`.venv-bench` at the repo root), installs torch 2.13.0 first (a CPU wheel; another torch request may fetch a
multi-GB CUDA build), then TRL and this repo's skyrl-gym and skyrl-train in editable mode, and re-runs itself there.

    python benchmarks/vs_trl.py [--shape short|long] [--seeds 0 1 2] [--steps N] [--ours-overrides k=v ...]
                                [--trl-precision match|float32|bfloat16]
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
DEFAULT_VENV = REPO / ".venv-bench"
TORCH_REQUIREMENT = "torch==2.13.0"
TRL_REQUIREMENT = "trl==1.16.0"
"""The TRL release measured here (it supports transformers 5.x, which skyrl-train pins below 5.20)."""

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kept_work import check_resumable, run_settings, work_folder  # noqa: E402
from process_memory import process_tree, read_pss_mb  # noqa: E402
from shapes import SHAPES, Shape  # noqa: E402 - the benchmarks folder is not a package
from vs_trl_report import plot, print_seed, print_summary, ratios, seed_summary, step_intervals, summarize  # noqa: E402


# ----- shared by both sides (no TRL needed) ----------------------------------------------------------------------
def completion_text(completion: Any) -> str:
    """The text of one TRL completion: a string, or a conversation whose last message holds the answer."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"completion must be a string or a list of chat messages, got {type(completion).__name__}")


def env_rewards(completions: Sequence[Any], ground_truths: Sequence[Any], env_class: str) -> list[float]:
    """The reward of each completion from skyrl-gym's `env_class` env (one episode per completion), as our trainer
    computes it: the env is built with the row's `reward_spec`, initialised and stepped with the response."""
    import skyrl_gym

    if len(completions) != len(ground_truths):
        raise ValueError(f"{len(completions)} completions but {len(ground_truths)} ground truths")
    rewards = []
    for completion, truth in zip(completions, ground_truths):
        extras = {"reward_spec": {"method": "rule", "ground_truth": truth}}
        env = skyrl_gym.make(env_class, env_config={}, extras=extras)
        try:
            env.init([{"role": "user", "content": ""}])
            rewards.append(float(env.step(completion_text(completion))["reward"]))
        finally:
            env.close()
    return rewards


def heldout_rows(data_dir: Path) -> list[dict[str, Any]]:
    """The held-out rows of the dataset written by `write_data`."""
    import pandas

    return pandas.read_parquet(data_dir / "test.parquet").to_dict("records")


def greedy_eval(
    model_dir: str | Path, tokenizer_dir: str | Path, rows: list[dict[str, Any]], max_new_tokens: int
) -> float:
    """Held-out greedy accuracy of the weights in `model_dir`, with the tokenizer of `tokenizer_dir`: the same code
    (the warm start's `greedy_accuracy`: `hf` engine, env scoring) for every model compared here."""
    from skyrl_train.models.loading import load_causal_lm, load_tokenizer
    from skyrl_train.recipes.warm_start import greedy_accuracy

    model = load_causal_lm(str(model_dir), dtype="float32", device="cpu").eval()
    tokenizer = load_tokenizer(str(tokenizer_dir), padding_side="left")
    return greedy_accuracy(model, tokenizer, rows, max_new_tokens=max_new_tokens)


# ----- the benchmark venv ------------------------------------------------------------------------------------------
def _pip(python: Path, *args: str) -> None:
    command = [str(python), "-m", "pip", "--disable-pip-version-check", "install", "-q", *args]
    print(f"vs_trl: {' '.join(command[3:])}", flush=True)
    subprocess.run(command, check=True)


def _imports(python: Path, code: str) -> bool:
    return subprocess.run([str(python), "-c", code], capture_output=True).returncode == 0


def ensure_venv(venv: Path) -> Path:
    """Create or reuse `venv` with torch 2.13.0 (installed first), TRL and this repo's packages; its python."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"vs_trl: creating the benchmark venv {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    torch_version = TORCH_REQUIREMENT.split("==")[1]
    if not _imports(python, f"import torch, sys; sys.exit(torch.__version__.split('+')[0] != '{torch_version}')"):
        _pip(python, TORCH_REQUIREMENT, "numpy")
    trl_version = TRL_REQUIREMENT.split("==")[1]
    wanted = f"import trl, sys, skyrl_gym, skyrl_train; sys.exit(trl.__version__ != '{trl_version}')"
    if not _imports(python, wanted) or not _editable_here(python):
        _pip(python, "-e", str(REPO / "skyrl-gym"), "-e", str(REPO / "skyrl-train"), TRL_REQUIREMENT)
    return python


def _editable_here(python: Path) -> bool:
    """True when the venv's skyrl_train is this checkout's."""
    probe = subprocess.run(
        [str(python), "-c", "import skyrl_train; print(skyrl_train.__file__)"], capture_output=True, text=True
    )
    return probe.returncode == 0 and Path(probe.stdout.strip()).resolve().is_relative_to(REPO)


def check_venv(python: Path) -> None:
    """Refuse to go on (`--skip-install`) when the venv lacks TRL or this repo's packages."""
    if not python.exists() or not _imports(python, "import trl, skyrl_gym, skyrl_train"):
        raise SystemExit(
            f"vs_trl: --skip-install, but {python} cannot import trl, skyrl_gym and skyrl_train; "
            "run once without --skip-install to create the benchmark venv"
        )


# ----- the two sides (each in its own process) ---------------------------------------------------------------------
def run_trl(
    shape: Shape, model_dir: Path, data_dir: Path, work: Path, steps: int, seed: int, dtype: str = "float32"
) -> dict[str, Any]:
    """Train with `trl.GRPOTrainer` for `steps` steps, computing in `dtype` (`bfloat16`: TRL's `bf16=True`); per-step
    times, rewards, generated tokens and resident memory, and TRL's own profiling of its phases."""
    import pandas
    import torch
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer, __version__

    from skyrl_train.utils.memory import MIB, read_rss

    train = pandas.read_parquet(data_dir / "train.parquet")
    dataset = Dataset.from_list(
        [
            {"prompt": list(prompt), "ground_truth": str(spec["ground_truth"])}
            for prompt, spec in zip(train["prompt"], train["reward_spec"])
        ]
    )

    def task_reward(completions: list[Any], ground_truth: list[str], **_: Any) -> list[float]:
        return env_rewards(completions, ground_truth, shape.model.task)

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.starts: list[float] = []
            self.ends: list[float] = []
            self.logs: list[dict[str, float]] = []
            self.rss_mb: list[float] = []

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.starts.append(time.perf_counter())

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.ends.append(time.perf_counter())
            self.rss_mb.append(read_rss()["rss"] / MIB)
            if state.global_step % 25 == 0 or state.global_step == steps:
                print(f"vs_trl[trl]: step {state.global_step}/{steps}", flush=True)

        def on_log(self, args: Any, state: Any, control: Any, logs: Optional[dict] = None, **kwargs: Any) -> None:
            if logs and "reward" in logs:
                self.logs.append(dict(logs))

    config = GRPOConfig(
        output_dir=str(work / "trl"),
        use_cpu=True,
        bf16=dtype == "bfloat16",
        fp16=False,
        gradient_checkpointing=False,
        max_steps=steps,
        per_device_train_batch_size=shape.completions_per_step,
        gradient_accumulation_steps=1,
        steps_per_generation=1,  # one generation batch per optimizer step
        num_iterations=1,  # on-policy: one optimizer step per batch, no old-logprob forward
        num_generations=shape.samples_per_prompt,
        max_completion_length=shape.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",  # token mean over the batch, as our `token_mean`
        scale_rewards="group",  # divide by the group's std, as our `grpo_norm_by_std`
        learning_rate=shape.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        seed=seed,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    phases: dict[str, list[float]] = {"generate": [], "generate_and_score": []}

    def timed(phase: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        """`call(*args, **kwargs)`, its wall-clock time appended to `phases[phase]` (also when it raises)."""
        began = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            phases[phase].append(time.perf_counter() - began)

    class TimedGRPOTrainer(GRPOTrainer):
        """`GRPOTrainer` that times its generation call and its whole generate-and-score phase once per step."""

        def _generate_single_turn(self, *args: Any, **kwargs: Any) -> Any:
            return timed("generate", super()._generate_single_turn, *args, **kwargs)

        def _generate_and_score_completions(self, *args: Any, **kwargs: Any) -> Any:
            return timed("generate_and_score", super()._generate_and_score_completions, *args, **kwargs)

    clock = Clock()
    # The embedded tokenizer is a plain `tokenizers` char tokenizer; AutoTokenizer (TRL's default loader) would
    # re-create it as Qwen2Tokenizer, which drops spaces and newlines, so it is passed in as saved.
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(model_dir), local_files_only=True)
    started = time.perf_counter()
    trainer = TimedGRPOTrainer(
        model=str(model_dir),
        reward_funcs=task_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    setup_seconds = time.perf_counter() - started
    trainer.train()
    peak, pss = read_rss()["peak_rss"] / MIB, read_pss_mb()
    final_dir = work / "trl" / "final"
    trainer.save_model(str(final_dir))
    intervals = step_intervals(clock.starts, clock.ends)
    phases["score (reward, advantages)"] = [
        whole - generate for whole, generate in zip(phases.pop("generate_and_score"), phases["generate"])
    ]
    phases["train (forward, backward, optimizer)"] = [
        step - generate - score
        for step, generate, score in zip(intervals, phases["generate"], phases["score (reward, advantages)"])
    ]
    return {
        "name": "trl",
        "stack": f"trl {__version__} GRPOTrainer, 1 process, transformers generate",
        "dtype": dtype,
        "threads": {"trainer process (torch intra-op)": torch.get_num_threads()},
        "setup_seconds": setup_seconds,
        "step_seconds": intervals,
        "rewards": [float(logs["reward"]) for logs in clock.logs],
        "generated_tokens": [
            float(logs["completions/mean_length"]) * shape.completions_per_step for logs in clock.logs
        ],
        "phase_seconds": phases,
        "peak_rss_mb": {"trainer": peak, "total": peak},
        "pss_mb_at_end": {"trainer": pss, "total": pss},
        "rss_mb_per_step": clock.rss_mb,
        "final_model": str(final_dir),
    }


def run_ours(
    shape: Shape, model_dir: Path, data_dir: Path, work: Path, steps: int, seed: int, extra: list[str]
) -> dict[str, Any]:
    """Train with `BasePPOExp` for `steps` steps; per-step times, rewards, generated tokens, phase timings, the
    actors' thread counts, the auto settings chosen and every process's peak resident memory."""
    import ray
    import torch
    from shapes import ours_overrides

    from skyrl_train.config import SkyRLConfig
    from skyrl_train.entrypoints.main_base import BasePPOExp
    from skyrl_train.trainer import RayPPOTrainer
    from skyrl_train.utils.memory import MIB, read_rss

    starts: list[float] = []
    ends: list[float] = []
    threads: dict[str, list[int]] = {}
    ray_processes: dict[str, float] = {}
    pss: dict[str, float] = {}

    def thread_count(handle: Any) -> Any:
        return handle.__ray_call__.remote(lambda _actor: torch.get_num_threads())

    class ClockedTrainer(RayPPOTrainer):
        async def step(self) -> Optional[dict[str, float]]:
            if not threads:  # before the first step: what each actor runs with
                threads["policy ranks"] = ray.get([thread_count(actor) for actor in self.policy.group.actors])
                threads["engines"] = ray.get([thread_count(engine.handle) for engine in experiment.engines])
            starts.append(time.perf_counter())
            metrics = await super().step()
            if metrics is None:
                return None
            ends.append(time.perf_counter())
            if self.global_step % 25 == 0 or self.global_step == steps:
                print(f"vs_trl[ours]: step {self.global_step}/{steps}", flush=True)
            if self.global_step == steps:  # Ray's own processes (not actors) while everything still runs
                tracked = {process.pid: process.name for process in self.memory.processes}
                tracked[os.getpid()] = "driver"
                for pid in [os.getpid(), *process_tree(os.getpid())]:
                    reading = read_rss(pid) if pid not in tracked else None
                    if reading is not None:
                        ray_processes[str(pid)] = reading["peak_rss"] / MIB
                    share = read_pss_mb(pid)
                    if share is not None:
                        name = tracked.get(pid, "ray system processes")
                        pss[name] = pss.get(name, 0.0) + share
            return metrics

    class ClockedExp(BasePPOExp):
        def get_trainer(self, **parts: Any) -> RayPPOTrainer:
            return ClockedTrainer(self.cfg, **parts)

    overrides = ours_overrides(shape, model_dir, data_dir, work / "ours", steps, seed)
    cfg = SkyRLConfig.from_cli_overrides(overrides + extra)
    started = time.perf_counter()
    experiment = ClockedExp(cfg)
    result = experiment.run()
    exported = experiment.trainer.checkpoints.exported_paths
    if not exported:
        raise RuntimeError("our trainer exported no Hugging Face model at the end of the run")
    history = result.history

    def series(key: str) -> list[float]:
        return [value for _, value in sorted(history.get(key, []))]

    phase_seconds = {
        key.split("/", 1)[1]: series(key) for key in history if key.startswith("timing/") and key != "timing/step"
    }
    intervals = step_intervals(starts, ends)
    phase_seconds["rest (sleep / wake-up, between steps)"] = [
        interval - sum(values[index] for values in phase_seconds.values() if index < len(values))
        for index, interval in enumerate(intervals)
    ]
    prefix = "memory/peak_rss_mb/"
    peaks = {
        key[len(prefix) :]: series(key)[-1] for key in history if key.startswith(prefix) and key != prefix + "total"
    }
    peaks["ray system processes"] = sum(ray_processes.values())
    peaks["total"] = sum(peaks.values())
    return {
        "name": "ours",
        "stack": describe_stack(experiment.cfg),
        "threads": threads,
        "auto_settings": {choice.key: choice.value for choice in experiment.auto_choices if choice.used},
        "setup_seconds": (starts[0] if starts else time.perf_counter()) - started,
        "step_seconds": intervals,
        "rewards": series("reward/mean"),
        "generated_tokens": series("generate/generated_tokens"),
        "phase_seconds": phase_seconds,
        "peak_rss_mb": peaks,
        "pss_mb_at_end": {**pss, "total": sum(pss.values())},
        "rss_mb_total_per_step": series("memory/rss_mb/total"),
        "final_model": exported[-1],
    }


def describe_stack(cfg: Any) -> str:
    """E.g. `2 FSDP2 ranks + 2 colocated hf engines, shm weight sync`, from the config actually used."""
    from skyrl_train.weight_sync.strategy import resolve_strategy_name

    placement, engine = cfg.trainer.placement, cfg.generator.inference_engine
    ranks = placement.policy_num_nodes * placement.policy_num_gpus_per_node
    where = "colocated" if placement.colocate_all else "separate"
    sync = resolve_strategy_name(engine.weight_sync_backend, placement.colocate_all, cfg.resolved_device())
    return f"{ranks} FSDP2 ranks + {engine.num_engines} {where} {engine.backend} engines, {sync} weight sync"


def run_phase(args: argparse.Namespace) -> int:
    """`--phase NAME`: train one side in this process and write `<work-dir>/<name>-<seed>.json`."""
    logging.basicConfig(level=logging.WARNING)
    shape, workdir, seed = SHAPES[args.shape], Path(args.work_dir), args.seeds[0]
    model_dir, data_dir = Path((workdir / "model_dir").read_text()), workdir / "data"
    work = workdir / f"seed{seed}"
    if args.phase == "trl":
        record = run_trl(shape, model_dir, data_dir, work, args.steps, seed, args.trl_dtype)
    else:
        record = run_ours(shape, model_dir, data_dir, work, args.steps, seed, args.ours_overrides)
    (workdir / f"{args.phase}-{seed}.json").write_text(json.dumps(record, indent=1))
    return 0


# ----- orchestration -------------------------------------------------------------------------------------------------
def machine() -> str:
    """CPUs, architecture, Python and torch versions of this machine."""
    import torch

    return f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}"


def our_compute_dtype(shape: Shape, model_dir: Path, data_dir: Path, extra: list[str]) -> str:
    """The policy's compute dtype our side will use on this machine: its config resolved as a run resolves it."""
    from shapes import ours_overrides

    from skyrl_train.config import SkyRLConfig
    from skyrl_train.config.auto_settings import resolve_auto_settings

    cfg = SkyRLConfig.from_cli_overrides(ours_overrides(shape, model_dir, data_dir, data_dir, 1, 0) + extra)
    resolved, _ = resolve_auto_settings(cfg)
    return str(resolved.trainer.policy.fsdp.mixed_precision.param_dtype)


def run_seed(
    args: argparse.Namespace, shape: Shape, work: Path, seed: int, model_dir: Path, rows: list, before: float
) -> dict:
    """Both sides of one seed, each in a fresh process, then their held-out accuracy and the ratios."""
    runs: dict[str, dict[str, Any]] = {}
    for name in ("trl", "ours"):
        side_file = work / f"{name}-{seed}.json"
        if side_file.exists():  # a side writes its file when its last step is done: a kept folder resumes after it
            print(f"vs_trl: seed {seed}, {name} already trained in {work}: reused", flush=True)
            run = json.loads(side_file.read_text())
        else:
            print(f"vs_trl: seed {seed}, training {name} for {args.steps} steps", flush=True)
            command = [sys.executable, str(Path(__file__).resolve()), "--skip-install", "--phase", name]
            command += ["--shape", shape.name, "--work-dir", str(work), "--steps", str(args.steps)]
            command += ["--seeds", str(seed)]
            if args.ours_overrides:
                command += ["--ours-overrides", *args.ours_overrides]
            if name == "trl":
                command += ["--trl-dtype", args.trl_dtype]
            began, load_before = time.perf_counter(), os.getloadavg()[0]
            subprocess.run(command, check=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
            run = json.loads(side_file.read_text())
            run["process_seconds"] = time.perf_counter() - began
            # a 1-minute load average well above the side's own threads means other work shared the machine
            run["load_average_1min"] = {"before": load_before, "after": os.getloadavg()[0]}
        if "accuracy_after" not in run:
            run["accuracy_after"] = greedy_eval(run["final_model"], model_dir, rows, shape.max_new_tokens)
            side_file.write_text(json.dumps(run, indent=1))
        kept = {key: value for key, value in run.items() if key != "final_model"}  # a path, maybe temporary
        runs[name] = summarize(kept, args.warmup_steps, shape.completions_per_step)
    seed_record = {"seed": seed, "accuracy_before": before, "runs": runs, "ratios": ratios(runs["ours"], runs["trl"])}
    print_seed(seed_record, shape.completions_per_step)
    return seed_record


def orchestrate(args: argparse.Namespace) -> int:
    """Build (or reuse) the model and the data, run every seed's two sides, evaluate, print and write the results."""
    from skyrl_gym.envs.synthetic.generate import write_dataset
    from skyrl_train.recipes.embedded import get_embedded_model

    logging.basicConfig(level=logging.WARNING)
    shape = SHAPES[args.shape]
    steps = args.steps
    print(f"vs_trl: shape {shape.name}; building or reusing its warm-started model", flush=True)
    model_dir = get_embedded_model(shape.model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with work_folder(args.work_dir) as work:
        check_resumable(work, run_settings(args, model_dir))
        (work / "model_dir").write_text(str(model_dir))
        settings = shape.model
        # the test split is the warm start's held-out split (or its first problems): never trained on
        write_dataset(
            work / "data",
            settings.task,
            train_size=shape.train_problems,
            test_size=shape.eval_problems,
            difficulty=settings.difficulty,
            seed=settings.seed,
        )
        rows = heldout_rows(work / "data")
        ours_dtype = our_compute_dtype(shape, model_dir, work / "data", args.ours_overrides)
        args.trl_dtype = ours_dtype if args.trl_precision == "match" else args.trl_precision
        print(f"vs_trl: ours computes in {ours_dtype} (auto on this machine), TRL in {args.trl_dtype}", flush=True)
        print(f"vs_trl: model {model_dir}; evaluating the initial model on {len(rows)} held-out problems", flush=True)
        accuracy_before = greedy_eval(model_dir, model_dir, rows, shape.max_new_tokens)
        seeds = [run_seed(args, shape, work, seed, model_dir, rows, accuracy_before) for seed in args.seeds]
    summary = seed_summary(seeds, shape.name)
    print_summary(summary)
    name = "vs_trl" if shape.name == "short" else f"vs_trl_{shape.name}"
    record = {
        "benchmark": name,
        "shape": shape.name,
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "settings": {
            "steps": steps,
            "seeds": args.seeds,
            "model": shape.model.to_dict(),
            "prompts_per_step": shape.prompts_per_step,
            "samples_per_prompt": shape.samples_per_prompt,
            "max_new_tokens": shape.max_new_tokens,
            "learning_rate": shape.learning_rate,
            "warmup_steps_excluded": args.warmup_steps,
            "held_out_problems": shape.eval_problems,
            "ours_overrides": args.ours_overrides,
            "trl": TRL_REQUIREMENT,
            "ours_dtype": ours_dtype,
            "trl_dtype": args.trl_dtype,
        },
        "accuracy_before": accuracy_before,
        "seeds": seeds,
        "summary": summary,
    }
    (out / f"{name}.json").write_text(json.dumps(record, indent=1))
    plot(seeds, out / f"{name}.png", f"GRPO, {shape.name} shape: TRL GRPOTrainer vs ours ({len(seeds)} seeds)")
    print(f"results: {out / (name + '.json')}, plot: {out / (name + '.png')}")
    return 0


def main() -> int:
    """Set up the benchmark venv, re-run there, then run the benchmark (or one `--phase` of it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="short", help="the comparison's shape")
    parser.add_argument("--steps", type=int, help="training steps of each side (default: the shape's, 300)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds, each run on both sides")
    parser.add_argument("--warmup-steps", type=int, default=3, help="first steps left out of s/step")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"), help="directory for JSON and PNG")
    parser.add_argument("--ours-overrides", nargs="+", default=[], metavar="KEY=VALUE", help="our config overrides")
    parser.add_argument(
        "--trl-precision",
        choices=["match", "float32", "bfloat16"],
        default="match",
        help="TRL's compute dtype: match (the one our auto picks here), or set by hand",
    )
    parser.add_argument("--trl-dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument(
        "--work-dir",
        help="keep each side's results and final model here (default: a temporary folder); "
        "re-running with the same folder and settings reuses the sides already trained and evaluated",
    )
    parser.add_argument("--venv", default=str(DEFAULT_VENV), help="the benchmark venv (created when missing)")
    parser.add_argument("--skip-install", action="store_true", help="use --venv as it is (it must have TRL)")
    parser.add_argument("--phase", choices=["trl", "ours"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.steps = SHAPES[args.shape].steps if args.steps is None else args.steps
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.warmup_steps < 0:
        parser.error(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    if args.phase:
        if not args.work_dir:
            parser.error("--phase needs --work-dir: the folder the orchestrator prepared (model_dir, data)")
        return run_phase(args)
    venv = Path(args.venv).resolve()
    python = venv / "bin" / "python"
    if args.skip_install:
        check_venv(python)
    else:
        python = ensure_venv(venv)
    if Path(sys.prefix).resolve() != venv:
        argv = [arg for arg in sys.argv[1:] if arg != "--skip-install"]
        os.execv(str(python), [str(python), str(Path(__file__).resolve()), *argv, "--skip-install"])
    return orchestrate(args)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
