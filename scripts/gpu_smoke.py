"""The GPU smoke run behind `scripts/gpu_smoke.sh`: every GPU-only path of the project, each as one timed item with a
PASS / FAIL / SKIP line, then a summary table and a JSON report; exit status 1 when an item failed.

Standard library only: it runs with any `python3` and starts each item in the venv of the torch its libraries pin
(vLLM 0.32: torch 2.13.0 in `.venv`; SGLang 0.5.23: torch 2.14.1 in `.venv-sglang`), which `scripts/setup.sh --gpu
vllm|sglang` sets up first when it lacks its engine (unless `--no-setup`).
Items that need more GPUs than `--gpus` (or the TP variant, `--tp 2`) are listed as SKIP with the flag that runs
them. `--dry-run` prints the plan (items, venvs, commands, time budget) and exits 0 on any machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
TORCH_VLLM = "2.13.0"
"""The torch `vllm==0.32.0` pins (megatron-core 0.16.1 runs on it too)."""
TORCH_SGLANG = "2.14.1"
"""The torch `sglang==0.5.23` pins."""
BUDGET_S = 600
"""What the one-GPU items may take together (the sum of their budgets; venv builds not counted)."""


@dataclass(frozen=True)
class Venv:
    """One virtual environment of the smoke run: the GPU stack `scripts/setup.sh --gpu <name>` installs into it (its
    torch pin and engine), and where it lives."""

    name: str
    env_var: str
    default: str
    torch: str
    engine: str
    engine_module: str

    @property
    def path(self) -> Path:
        """Where it lives (`$<env_var>`, else `<repo>/<default>`, the folder `setup.sh --gpu` uses)."""
        return Path(os.environ.get(self.env_var) or ROOT / self.default)

    @property
    def python(self) -> Path:
        """Its interpreter."""
        return self.path / "bin" / "python"

    def setup_command(self) -> list[str]:
        """The command that installs the stack into it (idempotent: what is installed already stays)."""
        return ["bash", "scripts/setup.sh", "--gpu", self.name]

    def check(self) -> tuple[str, ...]:
        """A python step that passes when the venv holds its pinned torch, built with CUDA, seeing a GPU."""
        code = (
            "import sys, torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus',"
            " torch.cuda.device_count()); sys.exit(0 if torch.__version__.split('+')[0] == sys.argv[1]"
            " and torch.cuda.is_available() else 1)"
        )
        return ("-c", code, self.torch)


VENVS = {
    "vllm": Venv("vllm", "SKYRL_GPU_VLLM_VENV", ".venv", TORCH_VLLM, "vllm==0.32.0", "vllm"),
    "sglang": Venv("sglang", "SKYRL_GPU_SGLANG_VENV", ".venv-sglang", TORCH_SGLANG, "sglang==0.5.23", "sglang"),
}
"""vLLM 0.32.0 pins torch 2.13.0 and SGLang 0.5.23 pins torch 2.14.1: one venv cannot hold both. The folders are
`scripts/setup.sh --gpu vllm|sglang`'s (docs/gpu-setup.md); megatron-core and our packages come with both."""


def pytest_args(*paths: str, marker: str) -> tuple[str, ...]:
    """A pytest run of `paths` selecting `marker` (skips are listed with their reasons)."""
    return ("-m", "pytest", *paths, "-m", marker, "-p", "no:cacheprovider", "-q", "-rs")


ONE_GPU = (
    "trainer.placement.policy_num_gpus_per_node=1",
    "trainer.placement.ref_num_gpus_per_node=1",
    "generator.inference_engine.num_engines=1",
)
TWO_GPUS = (
    "trainer.placement.policy_num_gpus_per_node=2",
    "trainer.placement.ref_num_gpus_per_node=2",
    "generator.inference_engine.num_engines=2",
)


def quickstart(name: str, *overrides: str, verify: bool = True) -> tuple[str, ...]:
    """3 quickstart GRPO steps on CUDA with `overrides` (run directory under the logs); `verify` compares every
    engine's weight checksums with the policy's after each sync."""
    return (
        "examples/quickstart/run_quickstart.py", "--train-size", "256", "--test-size", "32",
        "--out", f"{{logs}}/{name}.run", *(["--verify-weight-sync"] if verify else []),
        "trainer.max_training_steps=3", "trainer.device=cuda", "generator.inference_engine.enforce_eager=true",
        *overrides,
    )  # fmt: skip


@dataclass(frozen=True)
class Item:
    """One check: its `steps` (argument lists for the venv's python) run in turn and must all exit 0 within
    `budget_s`; `gpus` is the fewest GPUs it needs, `tp` the `--tp` it needs."""

    name: str
    what: str
    venv: str
    steps: tuple[tuple[str, ...], ...]
    gpus: int = 1
    budget_s: int = 60
    tp: int = 1
    needs_module: str = ""
    """A Python module the item needs beyond its venv's pins: without it the item is a SKIP saying so."""


EMBEDDED_MODEL = (
    "-m", "skyrl_train.entrypoints.build_embedded_model", "--task", "addition", "--difficulty", "2", "--size", "2",
    "--seed", "0", "--train-examples", "8192", "--no-progress",
)  # fmt: skip
"""Builds (once; cached under $SKYRL_CACHE for every venv) the quickstart's warm-started model, `MODEL` of
examples/quickstart/run_quickstart.py, before the timed items: a few minutes the first time."""

DOCTOR = ("-m", "skyrl_train.entrypoints.doctor", "--no-smoke")
VLLM = "generator.inference_engine.backend=vllm"
SGLANG = ("generator.inference_engine.backend=sglang", "generator.inference_engine.model_dtype=bfloat16")

ITEMS: tuple[Item, ...] = (
    Item("doctor_vllm_venv", "torch 2.13.0 with CUDA in the vLLM venv; the install report (vLLM, megatron-core)",
         "vllm", (VENVS["vllm"].check(), DOCTOR), budget_s=20),
    Item("doctor_sglang_venv", "torch 2.14.1 with CUDA in the SGLang venv; the install report (SGLang)", "sglang",
         (VENVS["sglang"].check(), DOCTOR), budget_s=20),
    Item("fsdp2_gpu", "FSDP2 on CUDA: the offloaded optimizer's memory returns to the GPU (memory_reserved), and "
         "fsdp.cpu_offload steps over a cpu:gloo,cuda:nccl group (M3)", "vllm",
         (pytest_args("skyrl-train/tests/workers", marker="gpu"),), budget_s=50),
    Item("vllm_generate", "vllm.LLM on CUDA: generations and logprobs equal to the HF forward pass, sleep/wake with "
         "requests held, chunked weight updates and checksums", "vllm",
         (pytest_args("skyrl-train/tests/inference/test_vllm_engine.py", marker="vllm"),), budget_s=70),
    Item("vllm_sleep_wake", "vLLM sleep mode at levels 1 and 2 frees GPU memory; a sync after waking serves the new "
         "weights", "vllm", (pytest_args("skyrl-train/tests/inference/test_vllm_engine_gpu.py", marker="gpu"),),
         budget_s=50),
    Item("grpo_vllm", "3 GRPO steps: 1 FSDP2 rank + 1 colocated vLLM engine, cuda_ipc sync checked by checksum",
         "vllm", (quickstart("grpo_vllm", *ONE_GPU, VLLM),), budget_s=70),
    Item("lora_vllm", "3 GRPO steps with LoRA: adapters synced into vLLM's LoRA support, checked by checksum", "vllm",
         (quickstart("lora_vllm", *ONE_GPU, VLLM, "trainer.policy.model.lora.rank=8",
                     "trainer.policy.optimizer.lr=2e-3"),), budget_s=55),
    Item("megatron_tp1", "Megatron TP=1: HF-equal logits, a distributed-optimizer step, a dist_checkpointing round "
         "trip, the HF export; then 3 GRPO steps", "vllm",
         (pytest_args("skyrl-train/tests/workers/strategy/test_megatron_gpu.py", marker="megatron"),
          quickstart("megatron_tp1", *ONE_GPU, "trainer.strategy=megatron")), budget_s=75),
    Item("skyrl_tx_vllm_sampler", "skyrl-tx: sampler weights of LoRA training clients served by the vLLM sampler",
         "vllm", (pytest_args("skyrl-tx/tests/test_vllm_sampler.py", marker="vllm"),), budget_s=45),
    Item("sglang_engine", "sglang.Engine: logprobs vs HF, seeded sampling, sleep/wake, chunked updates, cuda_ipc into "
         "its worker", "sglang",
         (pytest_args("skyrl-train/tests/inference/test_sglang_engine.py", marker="sglang"),), budget_s=80),
    Item("grpo_sglang", "3 GRPO steps: 1 FSDP2 rank + 1 colocated SGLang engine (cuda_ipc into its worker)", "sglang",
         (quickstart("grpo_sglang", *ONE_GPU, *SGLANG, verify=False),), budget_s=65),
    Item("packing_flash", "packed micro-batches through flash-attention's varlen kernel on CUDA (bf16), then 3 GRPO "
         "steps with trainer.remove_microbatch_padding", "vllm",
         (pytest_args("skyrl-train/tests/models/test_varlen_attention.py", "skyrl-train/tests/models/test_packing.py",
                      marker="gpu"),
          quickstart("packing_flash", *ONE_GPU, VLLM, "trainer.policy.fsdp.mixed_precision.param_dtype=bfloat16",
                     "trainer.remove_microbatch_padding=true")), budget_s=60, needs_module="flash_attn"),
    Item("colocated_2gpu", "M1: 2 FSDP2 ranks + 2 colocated vLLM engines on 2 GPUs, auto sync (cuda_ipc to the engine "
         "on rank 0's GPU, NCCL broadcast to the other), checked by checksum", "vllm",
         (quickstart("colocated_2gpu", *TWO_GPUS, VLLM),), gpus=2, budget_s=90),
    Item("megatron_pp2", "Megatron with 2 pipeline stages on 2 GPUs: 3 GRPO steps through megatron-core's 1F1B "
         "schedule, finalize_model_grads (tied embedding) and the stages gathered for weight sync", "vllm",
         (quickstart("megatron_pp2", *TWO_GPUS, "trainer.strategy=megatron",
                     "trainer.policy.megatron.pipeline_model_parallel_size=2"),), gpus=2, budget_s=120),
    Item("nccl_broadcast", "NCCL broadcast from a sender on one GPU into an engine on another", "vllm",
         (pytest_args("skyrl-train/tests/weight_sync/test_nccl_broadcast.py", marker="gpu"),), gpus=2, budget_s=45),
    Item("vllm_tp2", "M2: a vLLM engine with tensor_parallel_size=2 serves the weights each rank loaded after an "
         "update; then colocated with 2 FSDP2 ranks on 2 GPUs (its ranks are Ray workers of vLLM's Ray executor), 3 GRPO "
         "steps with auto sync into both ranks' load_weights", "vllm",
         (pytest_args("skyrl-train/tests/inference/test_vllm_tensor_parallel_gpu.py", marker="gpu"),
          quickstart("vllm_tp2", *TWO_GPUS, VLLM, "generator.inference_engine.num_engines=1",
                     "generator.inference_engine.tensor_parallel_size=2", verify=False)),
         gpus=2, budget_s=150, tp=2),
    Item("sglang_tp2", "M2: an SGLang engine with tensor_parallel_size=2 on its own 2 GPUs + 1 FSDP2 rank on a third, "
         "NCCL broadcast into both of its workers", "sglang",
         (quickstart("sglang_tp2", "trainer.placement.colocate_all=false", *ONE_GPU, *SGLANG,
                     "generator.inference_engine.tensor_parallel_size=2", verify=False),),
         gpus=3, budget_s=90, tp=2),
)  # fmt: skip
"""Every item, in run order. The 10-minute budget covers the one-GPU items that need nothing beyond the two venvs
(`packing_flash` also needs the `flash-attn` package). The SGLang quickstarts run without checksum verification: SGLang reads weights back only
for Llama-family models (the quickstart's is a Qwen2); `sglang_engine` verifies on a tiny Llama."""


def item_commands(item: Item, logs: Path) -> list[list[str]]:
    """The argv of each step of `item`: its venv's python, then the step's arguments with `{logs}` filled in."""
    python = str(VENVS[item.venv].python)
    return [[python, *(arg.replace("{logs}", str(logs)) for arg in step)] for step in item.steps]


@dataclass
class Outcome:
    """What one item did (an entry of the JSON report)."""

    name: str
    what: str
    status: str
    seconds: float = 0.0
    reason: str = ""
    log: str = ""
    commands: list[str] = field(default_factory=list)


def plan(gpus: int, tp: int, only: Optional[list[str]] = None) -> list[tuple[Item, Optional[str]]]:
    """Each chosen item with the reason it is skipped on this machine (None: it runs)."""
    chosen = []
    for item in ITEMS:
        if only and item.name not in only:
            continue
        reason = None
        if item.tp > tp:
            reason = f"needs --tp {item.tp} and {item.gpus} GPUs"
        elif item.gpus > gpus:
            reason = f"needs {item.gpus} GPUs: run with --gpus {item.gpus}"
        chosen.append((item, reason))
    return chosen


def visible_gpus() -> int:
    """GPUs `nvidia-smi -L` lists (0 without a driver)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU ") for line in done.stdout.splitlines()) if done.returncode == 0 else 0


def prepare_venv(venv: Venv, logs: Path, no_setup: bool) -> Optional[str]:
    """Why `venv` cannot be used, else None: without its engine it is set up (`setup.sh --gpu`) unless `no_setup`."""
    if venv.python.exists() and has_module(venv, venv.engine_module):
        return None
    if no_setup:
        return f"{venv.path} holds no {venv.engine_module}: run `{shlex.join(venv.setup_command())}` (--no-setup)"
    log_path = logs / f"setup_{venv.name}.log"
    print(f"venv {venv.name}: {shlex.join(venv.setup_command())} into {venv.path} (log: {log_path})", flush=True)
    with open(log_path, "w") as log:
        env = {**os.environ, "SKYRL_VENV": str(venv.path)}
        code = subprocess.call(venv.setup_command(), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    if code != 0 or not has_module(venv, venv.engine_module):
        return f"`{shlex.join(venv.setup_command())}` into {venv.path} failed (see {log_path})"
    return None


def has_module(venv: Venv, module: str) -> bool:
    """True when `module` can be imported in `venv` (looked up, not imported)."""
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)"
    return venv.python.exists() and subprocess.call([str(venv.python), "-c", code, module], cwd=ROOT) == 0


def uses_quickstart(item: Item) -> bool:
    """True when a step of `item` runs the quickstart (which needs the warm-started model)."""
    return any("examples/quickstart/run_quickstart.py" in step for step in item.steps)


def build_embedded_model(venv: Venv, logs: Path) -> Optional[str]:
    """Build (or find cached) the quickstart's model with `venv`'s python, untimed; why it failed, else None."""
    log_path = logs / "setup_embedded_model.log"
    print(f"quickstart model: building or finding it in the cache (log: {log_path})", flush=True)
    with open(log_path, "w") as log:
        code = subprocess.call([str(venv.python), *EMBEDDED_MODEL], cwd=ROOT, stdout=log, stderr=log)
    return None if code == 0 else f"building the quickstart's model failed (see {log_path})"


def unexpected_skips(log: str) -> list[str]:
    """The reasons of tests pytest skipped (its `-rs` lines) for anything but too few GPUs: on a GPU machine a
    skipped GPU test means the path did not run (a library missing, CUDA not seen), which must not count as a pass."""
    reasons = [line.split(": ", 1)[-1] for line in log.splitlines() if line.startswith("SKIPPED [")]
    return [reason for reason in reasons if not re.search(r"needs \d+ GPU", reason)]


def run_item(item: Item, logs: Path) -> Outcome:
    """Run an item's steps in turn within its time budget; PASS when every step exits 0."""
    commands = item_commands(item, logs)
    log_path = logs / f"{item.name}.log"
    started = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    status, reason = "PASS", ""
    with open(log_path, "w") as log:
        for command in commands:
            log.write(f"$ {shlex.join(command)}\n")
            log.flush()
            left = max(item.budget_s - (time.monotonic() - started), 1.0)
            try:
                code = subprocess.call(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=left, env=env)
            except subprocess.TimeoutExpired:
                status, reason = "FAIL", f"over its {item.budget_s} s budget"
                break
            if code != 0:
                status, reason = "FAIL", f"exit status {code} of `{shlex.join(command[1:4])} ...`"
                break
    if status == "PASS":
        skipped = unexpected_skips(log_path.read_text(errors="replace"))
        if skipped:
            status, reason = "FAIL", f"{len(skipped)} test(s) skipped, so their GPU path did not run: {skipped[0]}"
    if status == "FAIL":
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
        reason = f"{reason}; last log line: {tail[0][:160]}" if tail else reason
    seconds = round(time.monotonic() - started, 1)
    return Outcome(item.name, item.what, status, seconds, reason, str(log_path), [shlex.join(c) for c in commands])


def summary(outcomes: list[Outcome]) -> str:
    """The table printed at the end."""
    lines = [f"{'item':24} {'status':6} {'seconds':>8}  reason", "-" * 100]
    lines += [f"{o.name:24} {o.status:6} {o.seconds:8.1f}  {o.reason}" for o in outcomes]
    counts = {status: sum(o.status == status for o in outcomes) for status in ("PASS", "FAIL", "SKIP")}
    lines.append(f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
    return "\n".join(lines)


def print_plan(chosen: list[tuple[Item, Optional[str]]], gpus: int, tp: int, logs: Path) -> None:
    """What a run would do (`--dry-run`)."""
    print(f"gpu_smoke plan: {gpus} GPU(s), --tp {tp}; logs and report.json in {logs}")
    for venv in VENVS.values():
        setup = shlex.join(venv.setup_command())
        print(f"venv {venv.name}: {venv.path} (torch=={venv.torch}, {venv.engine}; `{setup}` when it lacks them)")
    if any(reason is None and uses_quickstart(item) for item, reason in chosen):
        print(f"setup: the quickstart's model, built once (untimed): $ python {shlex.join(EMBEDDED_MODEL)}")
    for item, reason in chosen:
        needs = f", needs {item.needs_module}" if item.needs_module else ""
        run = f"RUN  {item.name} [{item.venv} venv, <= {item.budget_s} s{needs}]"
        head = f"SKIP {item.name}: {reason}" if reason else run
        print(f"{head}\n     {item.what}")
        for command in item_commands(item, logs):
            print(f"     $ {shlex.join(command)}")
    budget = sum(item.budget_s for item, reason in chosen if reason is None and not item.needs_module)
    optional = [item.name for item, reason in chosen if reason is None and item.needs_module]
    extra = f"; + {', '.join(optional)} when its package is installed" if optional else ""
    print(f"time budget of the items that run: {budget} s ({budget / 60:.1f} min; venv builds not counted{extra})")


def main(argv: Optional[list[str]] = None) -> int:
    """Parse the flags, then print the plan (`--dry-run`) or run it."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: 1; the 2-GPU items need 2)")
    parser.add_argument(
        "--tp", type=int, default=1, choices=(1, 2), help="2 adds the TP=2 items (vLLM: 2 GPUs, SGLang: 3)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit 0 (works on any machine)")
    parser.add_argument("--no-setup", action="store_true", help="do not build missing venvs (their items fail)")
    parser.add_argument("--logs", default=os.environ.get("SKYRL_GPU_SMOKE_LOGS", str(ROOT / "gpu_smoke_logs")))
    parser.add_argument("--report", default=None, help="JSON report path (default: <logs>/report.json)")
    parser.add_argument("only", nargs="*", help="run only these items")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only) - {item.name for item in ITEMS})
    if unknown:
        parser.error(f"unknown items {unknown}; items: {[item.name for item in ITEMS]}")
    gpus = 1 if args.gpus is None else args.gpus
    logs = Path(args.logs).resolve()
    chosen = plan(gpus, args.tp, args.only)
    if args.dry_run:
        print_plan(chosen, gpus, args.tp, logs)
        return 0
    found = visible_gpus()
    if found < gpus:
        print(f"gpu_smoke: {gpus} GPU(s) asked, nvidia-smi lists {found}; this needs a GPU machine", file=sys.stderr)
        return 2
    logs.mkdir(parents=True, exist_ok=True)
    venv_problems: dict[str, Optional[str]] = {}
    model_problem: Optional[str] = None
    built_model = False
    outcomes = []
    for item, reason in chosen:
        if reason is None and item.venv not in venv_problems:
            venv_problems[item.venv] = prepare_venv(VENVS[item.venv], logs, args.no_setup)
        ready = reason is None and not venv_problems[item.venv]
        if ready and item.needs_module and not has_module(VENVS[item.venv], item.needs_module):
            reason = f"needs the {item.needs_module} package in {VENVS[item.venv].path}"
        elif ready and uses_quickstart(item) and not built_model:
            model_problem, built_model = build_embedded_model(VENVS[item.venv], logs), True
        if reason is not None:
            outcome = Outcome(item.name, item.what, "SKIP", reason=reason)
        elif venv_problems[item.venv]:
            outcome = Outcome(item.name, item.what, "FAIL", reason=str(venv_problems[item.venv]))
        elif model_problem and uses_quickstart(item):
            outcome = Outcome(item.name, item.what, "FAIL", reason=model_problem)
        else:
            outcome = run_item(item, logs)
        outcomes.append(outcome)
        note = f": {outcome.reason}" if outcome.reason else ""
        print(f"{outcome.status} {outcome.name} ({outcome.seconds:.1f} s){note}", flush=True)
    print("\n" + summary(outcomes))
    report = Path(args.report) if args.report else logs / "report.json"
    venvs = {
        name: {"python": str(venv.python), "torch": venv.torch, "engine": venv.engine} for name, venv in VENVS.items()
    }
    body = {"gpus": gpus, "tp": args.tp, "venvs": venvs, "items": [asdict(outcome) for outcome in outcomes]}
    report.write_text(json.dumps(body, indent=2) + "\n")
    print(f"report: {report}")
    return 1 if any(outcome.status == "FAIL" for outcome in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
