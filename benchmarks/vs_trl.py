"""Benchmark: TRL's `GRPOTrainer` and our real stack, back to back, on the same task, model and settings.

Both sides start from the quickstart's embedded warm-started tiny model (`examples/quickstart/run_quickstart.py`,
`get_embedded_model(MODEL)`) and train on the quickstart's 2-digit addition prompts, rewarded by the `addition`
env's rule (skyrl-gym), with the same settings: `--steps` steps of 32 prompts x 8 samples, at most 8 new tokens,
temperature 1.0, lr 2e-4 constant (no warm-up), AdamW without weight decay, grad-norm clip 1.0, PPO clip 0.2, no
KL term, token-mean loss over the batch, group-std-normalised advantages, one optimizer step per batch, fp32.

- `trl`: `trl.GRPOTrainer` in one process on the CPU (torch's default intra-op threads), generation with
  `transformers`' `generate`, saved with `save_model` at the end.
- `ours`: `BasePPOExp` with the quickstart's overrides (Ray, FSDP2 policy ranks over gloo, colocated `hf` engines,
  weight sync after every step), a constant rate, `policy_mini_batch_size = train_batch_size`; the final model is
  the trainer's Hugging Face export. `--ours-overrides key=value ...` changes its config (e.g. 1 rank + 1 engine).

Each side runs in its own fresh process. Wall time per step is the time between the ends of consecutive steps (the
first step from its start), averaged after `--warmup-steps`; completions/s = 256 / that. The same greedy evaluation
function (`greedy_accuracy` of the warm start, the `hf` engine and the env) scores the initial model and both final
models on the same held-out problems. The table, the ratios ours/TRL and the reward curves go to stdout and to
`--out` (`vs_trl.json`, `vs_trl.png`).

TRL is not a dependency of this repo: the script creates (or reuses) a benchmark venv, `--venv` (default
`.venv-bench` at the repo root), installs torch 2.13.0 first (a CPU wheel; another torch request may fetch a
multi-GB CUDA build), then TRL and this repo's skyrl-gym and skyrl-train in editable mode, and re-runs itself there.

    python benchmarks/vs_trl.py [--steps 300] [--ours-overrides key=value ...] [--skip-install]
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
DEFAULT_VENV = REPO / ".venv-bench"
TORCH_REQUIREMENT = "torch==2.13.0"
TRL_REQUIREMENT = "trl==1.16.0"
"""The TRL release measured here (it supports transformers 5.x, which skyrl-train pins below 5.20)."""

PROMPTS_PER_STEP = 32
SAMPLES_PER_PROMPT = 8
MAX_NEW_TOKENS = 8
LEARNING_RATE = 2e-4
TRAIN_PROBLEMS = 8000
EVAL_PROBLEMS = 200
"""Held-out problems: the quickstart's test split (the warm start's held-out problems, never trained on)."""


# ----- shared by both sides (no TRL needed) ----------------------------------------------------------------------
def completion_text(completion: Any) -> str:
    """The text of one TRL completion: a string, or a conversation whose last message holds the answer."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"completion must be a string or a list of chat messages, got {type(completion).__name__}")


def addition_rewards(
    completions: Sequence[Any], ground_truths: Sequence[Any], env_class: str = "addition"
) -> list[float]:
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


def step_intervals(starts: Sequence[float], ends: Sequence[float]) -> list[float]:
    """Seconds per step: the first step from its start to its end, every later one from the previous step's end
    (so work between steps, such as logging and fetching the next batch, counts)."""
    if not ends or len(starts) < 1:
        return []
    return [ends[0] - starts[0]] + [later - earlier for earlier, later in zip(ends, ends[1:])]


def steady_seconds_per_step(intervals: Sequence[float], warmup_steps: int) -> float:
    """Mean seconds per step after the first `warmup_steps` (all steps when there are no more than that)."""
    if not intervals:
        raise ValueError("no step was timed")
    kept = list(intervals[warmup_steps:]) or list(intervals)
    return statistics.mean(kept)


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over at most `window` values (the first points average what exists so far)."""
    out, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        out.append(total / min(index + 1, window))
    return out


def summarize(run: dict[str, Any], warmup_steps: int) -> dict[str, Any]:
    """Add `seconds_per_step` and `completions_per_second` (steady state) to a phase's record."""
    seconds = steady_seconds_per_step(run["step_seconds"], warmup_steps)
    phases = {name: steady_seconds_per_step(values, warmup_steps) for name, values in run["phase_seconds"].items()}
    return {
        **run,
        "phase_seconds": phases,
        "phase_seconds_per_step": run["phase_seconds"],
        "steps": len(run["step_seconds"]),
        "seconds_per_step": seconds,
        "completions_per_second": PROMPTS_PER_STEP * SAMPLES_PER_PROMPT / seconds,
    }


def ratios(ours: dict[str, Any], trl: dict[str, Any]) -> dict[str, float]:
    """ours / TRL for throughput (above 1: ours is faster) and the accuracy gains of both."""
    return {
        "completions_per_second": ours["completions_per_second"] / trl["completions_per_second"],
        "seconds_per_step": ours["seconds_per_step"] / trl["seconds_per_step"],
        "accuracy_after_difference": ours["accuracy_after"] - trl["accuracy_after"],
    }


def heldout_rows(data_dir: Path) -> list[dict[str, Any]]:
    """The held-out rows of the dataset written by `write_data`."""
    import pandas

    return pandas.read_parquet(data_dir / "test.parquet").to_dict("records")


def greedy_eval(model_dir: str | Path, tokenizer_dir: str | Path, rows: list[dict[str, Any]]) -> float:
    """Held-out greedy accuracy of the weights in `model_dir`, with the tokenizer of `tokenizer_dir`: the same code
    (the warm start's `greedy_accuracy`: `hf` engine, env scoring) for every model compared here."""
    from skyrl_train.models.loading import load_causal_lm, load_tokenizer
    from skyrl_train.recipes.warm_start import greedy_accuracy

    model = load_causal_lm(str(model_dir), dtype="float32", device="cpu").eval()
    tokenizer = load_tokenizer(str(tokenizer_dir), padding_side="left")
    return greedy_accuracy(model, tokenizer, rows, max_new_tokens=MAX_NEW_TOKENS)


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
def load_quickstart() -> Any:
    """The quickstart module (its `MODEL` and `quickstart_overrides`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from step_breakdown import load_quickstart as load

    return load()


def run_trl(model_dir: Path, data_dir: Path, work: Path, steps: int) -> dict[str, Any]:
    """Train with `trl.GRPOTrainer` for `steps` steps; per-step times and rewards, TRL's own profiling means."""
    import pandas
    import torch
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer, __version__

    train = pandas.read_parquet(data_dir / "train.parquet")
    dataset = Dataset.from_list(
        [
            {"prompt": list(prompt), "ground_truth": str(spec["ground_truth"])}
            for prompt, spec in zip(train["prompt"], train["reward_spec"])
        ]
    )

    def addition_reward(completions: list[Any], ground_truth: list[str], **_: Any) -> list[float]:
        return addition_rewards(completions, ground_truth)

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.starts: list[float] = []
            self.ends: list[float] = []
            self.logs: list[dict[str, float]] = []

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.starts.append(time.perf_counter())

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.ends.append(time.perf_counter())
            if state.global_step % 25 == 0 or state.global_step == steps:
                print(f"vs_trl[trl]: step {state.global_step}/{steps}", flush=True)

        def on_log(self, args: Any, state: Any, control: Any, logs: Optional[dict] = None, **kwargs: Any) -> None:
            if logs and "reward" in logs:
                self.logs.append(dict(logs))

    config = GRPOConfig(
        output_dir=str(work / "trl"),
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        max_steps=steps,
        per_device_train_batch_size=PROMPTS_PER_STEP * SAMPLES_PER_PROMPT,
        gradient_accumulation_steps=1,
        steps_per_generation=1,  # one generation batch (32 prompts x 8) per optimizer step
        num_iterations=1,  # on-policy: one optimizer step per batch, no old-logprob forward
        num_generations=SAMPLES_PER_PROMPT,
        max_completion_length=MAX_NEW_TOKENS,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",  # token mean over the batch, as our `token_mean`
        scale_rewards="group",  # divide by the group's std, as our `grpo_norm_by_std`
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        seed=0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    phases: dict[str, list[float]] = {"generate": [], "generate_and_score": []}

    class TimedGRPOTrainer(GRPOTrainer):
        """`GRPOTrainer` that times its generation call and its whole generate-and-score phase once per step."""

        def _generate_single_turn(self, *args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return super()._generate_single_turn(*args, **kwargs)
            finally:
                phases["generate"].append(time.perf_counter() - began)

        def _generate_and_score_completions(self, *args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return super()._generate_and_score_completions(*args, **kwargs)
            finally:
                phases["generate_and_score"].append(time.perf_counter() - began)

    clock = Clock()
    # The embedded tokenizer is a plain `tokenizers` char tokenizer; AutoTokenizer (TRL's default loader) would
    # re-create it as Qwen2Tokenizer, which drops spaces and newlines, so it is passed in as saved.
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(model_dir), local_files_only=True)
    started = time.perf_counter()
    trainer = TimedGRPOTrainer(
        model=str(model_dir),
        reward_funcs=addition_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    setup_seconds = time.perf_counter() - started
    trainer.train()
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
        "threads": {"trainer process (torch intra-op)": torch.get_num_threads()},
        "setup_seconds": setup_seconds,
        "step_seconds": intervals,
        "rewards": [float(logs["reward"]) for logs in clock.logs],
        "phase_seconds": phases,
        "final_model": str(final_dir),
    }


def ours_overrides(quickstart: Any, model_dir: Path, data_dir: Path, work: Path, steps: int) -> list[str]:
    """The quickstart config with the benchmark's settings (before the user's `--ours-overrides`)."""
    return quickstart.quickstart_overrides(str(model_dir), data_dir, work / "ours") + [
        "trainer.policy.optimizer.scheduler=constant",
        "trainer.policy.optimizer.num_warmup_steps=0",
        f"trainer.policy.optimizer.lr={LEARNING_RATE}",
        f"trainer.train_batch_size={PROMPTS_PER_STEP}",
        f"trainer.policy_mini_batch_size={PROMPTS_PER_STEP}",  # one optimizer step per batch
        # each rank's whole shard (128 rows) in one pass, as TRL takes its whole batch in one pass
        f"trainer.micro_train_batch_size_per_gpu={PROMPTS_PER_STEP * SAMPLES_PER_PROMPT // 2}",
        f"trainer.micro_forward_batch_size_per_gpu={PROMPTS_PER_STEP * SAMPLES_PER_PROMPT // 2}",
        f"generator.n_samples_per_prompt={SAMPLES_PER_PROMPT}",
        f"generator.sampling_params.max_generate_length={MAX_NEW_TOKENS}",
        "generator.sampling_params.temperature=1.0",
        f"trainer.max_training_steps={steps}",
        "trainer.eval_before_train=false",
        "trainer.eval_interval=0",
        "trainer.ckpt_interval=0",
        "trainer.hf_save_interval=-1",
    ]


def run_ours(model_dir: Path, data_dir: Path, work: Path, steps: int, extra: list[str]) -> dict[str, Any]:
    """Train with `BasePPOExp` for `steps` steps; per-step times, rewards, phase timings and actor thread counts."""
    import ray
    import torch

    from skyrl_train.config import SkyRLConfig
    from skyrl_train.entrypoints.main_base import BasePPOExp
    from skyrl_train.trainer import RayPPOTrainer

    quickstart = load_quickstart()
    starts: list[float] = []
    ends: list[float] = []
    threads: dict[str, list[int]] = {}

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
            return metrics

    class ClockedExp(BasePPOExp):
        def get_trainer(self, **parts: Any) -> RayPPOTrainer:
            return ClockedTrainer(self.cfg, **parts)

    cfg = SkyRLConfig.from_cli_overrides(ours_overrides(quickstart, model_dir, data_dir, work, steps) + extra)
    started = time.perf_counter()
    experiment = ClockedExp(cfg)
    result = experiment.run()
    exported = experiment.trainer.checkpoints.exported_paths
    if not exported:
        raise RuntimeError("our trainer exported no Hugging Face model at the end of the run")
    history = result.history
    rewards = [value for _, value in sorted(history.get("reward/mean", []))]
    phase_seconds = {
        key.split("/", 1)[1]: [value for _, value in sorted(values)]
        for key, values in history.items()
        if key.startswith("timing/") and key != "timing/step"
    }
    intervals = step_intervals(starts, ends)
    phase_seconds["rest (sleep / wake-up, between steps)"] = [
        interval - sum(values[index] for values in phase_seconds.values() if index < len(values))
        for index, interval in enumerate(intervals)
    ]
    trainer_eval = result.final_eval.get(f"eval/all/pass_at_{cfg.generator.eval_n_samples_per_prompt}")
    return {
        "name": "ours",
        "stack": quickstart.describe_stack(cfg),
        "threads": threads,
        "setup_seconds": (starts[0] if starts else time.perf_counter()) - started,
        "step_seconds": intervals,
        "rewards": rewards,
        "phase_seconds": phase_seconds,
        "trainer_final_eval": trainer_eval,
        "final_model": exported[-1],
    }


def run_phase(name: str, workdir: Path, steps: int, extra: list[str]) -> int:
    """`--phase NAME`: train one side in this process and write `<workdir>/<name>.json`."""
    logging.basicConfig(level=logging.WARNING)
    model_dir, data_dir = Path((workdir / "model_dir").read_text()), workdir / "data"
    if name == "trl":
        record = run_trl(model_dir, data_dir, workdir, steps)
    else:
        record = run_ours(model_dir, data_dir, workdir, steps, extra)
    (workdir / f"{name}.json").write_text(json.dumps(record, indent=1))
    return 0


# ----- report --------------------------------------------------------------------------------------------------------
def print_table(runs: dict[str, dict[str, Any]], ratio: dict[str, float], accuracy_before: float) -> None:
    """The comparison table, the threads and phase timings of each side, and the ratios."""
    print(f"\nvs_trl: {PROMPTS_PER_STEP} prompts x {SAMPLES_PER_PROMPT} samples per step, same model and settings")
    header = f"{'side':6s} {'steps':>6s} {'s/step':>8s} {'compl/s':>9s} {'acc before':>11s} {'acc after':>10s}"
    print(header + "  stack")
    for name, run in runs.items():
        print(
            f"{name:6s} {run['steps']:6d} {run['seconds_per_step']:8.3f} {run['completions_per_second']:9.1f} "
            f"{accuracy_before:11.3f} {run['accuracy_after']:10.3f}  {run['stack']}"
        )
    for name, run in runs.items():
        print(f"{name} threads: {run['threads']}")
        phases = ", ".join(f"{key} {value:.3f}s" for key, value in sorted(run["phase_seconds"].items()))
        print(f"{name} phases (mean per step): {phases}")
    print(
        f"ours/TRL: completions/s {ratio['completions_per_second']:.2f}x, s/step {ratio['seconds_per_step']:.2f}x, "
        f"accuracy after {ratio['accuracy_after_difference']:+.3f}"
    )


def plot(runs: dict[str, dict[str, Any]], path: Path, window: int = 10) -> None:
    """Mean reward per step of both sides (faint) and its trailing mean over `window` steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    for name, run in runs.items():
        steps = range(1, len(run["rewards"]) + 1)
        (line,) = axis.plot(steps, moving_average(run["rewards"], window), label=f"{name} ({window}-step mean)")
        axis.plot(steps, run["rewards"], color=line.get_color(), alpha=0.25, linewidth=0.8)
    axis.set_xlabel("training step (32 prompts x 8 samples)")
    axis.set_ylabel("mean reward of the step's samples")
    axis.set_title("GRPO on 2-digit addition: TRL GRPOTrainer vs ours")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def machine() -> str:
    """CPUs, architecture, Python and torch versions of this machine."""
    import torch

    return f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}"


def orchestrate(args: argparse.Namespace) -> int:
    """Build the model and data, run both sides in fresh processes, evaluate, print and write the results."""
    from skyrl_gym.envs.synthetic.generate import write_dataset
    from skyrl_train.recipes.embedded import get_embedded_model

    logging.basicConfig(level=logging.WARNING)
    quickstart = load_quickstart()
    model_dir = get_embedded_model(quickstart.MODEL)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vs_trl_") as scratch:
        work = Path(scratch)
        (work / "model_dir").write_text(str(model_dir))
        settings = quickstart.MODEL
        write_dataset(
            work / "data",
            settings.task,
            train_size=TRAIN_PROBLEMS,
            test_size=EVAL_PROBLEMS,
            difficulty=settings.difficulty,
            seed=settings.seed,
        )
        rows = heldout_rows(work / "data")
        print(f"vs_trl: model {model_dir}; evaluating the initial model on {len(rows)} held-out problems", flush=True)
        accuracy_before = greedy_eval(model_dir, model_dir, rows)
        runs: dict[str, dict[str, Any]] = {}
        for name in ("trl", "ours"):
            print(f"vs_trl: training {name} for {args.steps} steps", flush=True)
            command = [sys.executable, str(Path(__file__).resolve()), "--skip-install", "--phase", name]
            command += ["--workdir", str(work), "--steps", str(args.steps)]
            if args.ours_overrides:
                command += ["--ours-overrides", *args.ours_overrides]
            began, load_before = time.perf_counter(), os.getloadavg()[0]
            subprocess.run(command, check=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
            run = json.loads((work / f"{name}.json").read_text())
            run["process_seconds"] = time.perf_counter() - began
            # a 1-minute load average well above the side's own threads means other work shared the machine
            run["load_average_1min"] = {"before": load_before, "after": os.getloadavg()[0]}
            run["accuracy_after"] = greedy_eval(run.pop("final_model"), model_dir, rows)
            runs[name] = summarize(run, args.warmup_steps)
    ratio = ratios(runs["ours"], runs["trl"])
    print_table(runs, ratio, accuracy_before)
    record = {
        "benchmark": "vs_trl",
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "settings": {
            "steps": args.steps,
            "prompts_per_step": PROMPTS_PER_STEP,
            "samples_per_prompt": SAMPLES_PER_PROMPT,
            "max_new_tokens": MAX_NEW_TOKENS,
            "learning_rate": LEARNING_RATE,
            "warmup_steps_excluded": args.warmup_steps,
            "held_out_problems": EVAL_PROBLEMS,
            "ours_overrides": args.ours_overrides,
            "trl": TRL_REQUIREMENT,
        },
        "accuracy_before": accuracy_before,
        "runs": runs,
        "ratios_ours_over_trl": ratio,
    }
    (out / "vs_trl.json").write_text(json.dumps(record, indent=1))
    plot(runs, out / "vs_trl.png")
    print(f"results: {out / 'vs_trl.json'}, reward curves: {out / 'vs_trl.png'}")
    return 0


def main() -> int:
    """Set up the benchmark venv, re-run there, then run the benchmark (or one `--phase` of it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="training steps of each side")
    parser.add_argument("--warmup-steps", type=int, default=3, help="first steps left out of s/step")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"), help="directory for JSON and PNG")
    parser.add_argument("--ours-overrides", nargs="+", default=[], metavar="KEY=VALUE", help="our config overrides")
    parser.add_argument("--venv", default=str(DEFAULT_VENV), help="the benchmark venv (created when missing)")
    parser.add_argument("--skip-install", action="store_true", help="use --venv as it is (it must have TRL)")
    parser.add_argument("--phase", choices=["trl", "ours"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.warmup_steps < 0:
        parser.error(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    if args.phase:
        return run_phase(args.phase, Path(args.workdir), args.steps, args.ours_overrides)
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
