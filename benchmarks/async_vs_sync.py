"""Benchmark: samples/s of the sync, one_step_off and fully_async trainers, back to back on one machine.

Four configs (`--configs`: tool-wait and plain by default), each trained by every mode from the same warm-started
model with the same settings (fully_async twice: `max_staleness` 1, the default, and 2):

- **tool-wait**: a rollout-bound config whose episodes wait on the outside world the way agent rollouts do. Each
  episode asks two addition questions; after every answer the env looks it up in the bundled BM25 search server
  over HTTP (`skyrl_gym.tools.retrieval_server`), which waits `--delay-ms` (default 200-500 ms, a remote API's
  typical latency) before answering, shows the hit and asks the next question. Each right answer earns 1 / turns.
  Each env thread keeps its own keep-alive `http.client` connection (see `post_json`): the client's CPU must not be
  what episodes wait on. The model is warm-started on episodes of as many turns (`model_for`; the quickstart
  model has never seen a second question).
- **tool-wait-4**: the same over four turns (four API calls per episode), closer to an agent's long rollouts.
- **latency-bound**: an agent's episode: four turns, each answer looked up by an API that waits 200-1000 ms (its own
  server, whatever `--delay-ms` says), so an episode waits about 2.4 s on tools and its decoding is a small part of it
  (the model of tool-wait-4).
- **grader-wait**: the single-turn quickstart task whose reward comes back from a remote grader: the env posts the
  answer to the same API (same wait) before scoring it.
- **plain**: the quickstart task as it is (single turn, nothing to wait for): generation and training both need the
  two CPU cores, so overlapping them has little to win here.

Placement is the same for every mode: 1 FSDP2 policy rank and 1 separate hf engine (async modes cannot share devices).
samples/s counts trained samples over the wall time of the training loop (set-up and evaluation excluded). The
reward columns are the mean training reward over the first and the last third of the steps, and the held-out greedy
mean reward after training (accuracy for single-turn configs, the fraction of questions right for multi-turn ones).

    python benchmarks/async_vs_sync.py [--steps 16] [--delay-ms 200-500] [--configs tool-wait plain] [--out DIR]
        [--repeats N] [key=value ...]

Trailing `key=value` config overrides apply to every run of every mode (e.g. `trainer.policy.optimizer.lr=2e-4`);
they are checked against the config before anything runs and recorded in the JSON.

It also prints each run's training reward per sample trained (a trailing mean over `--window` steps, after a
quarter, half, three quarters and all of the samples) and held-out accuracy; with `--repeats N` every mode runs N
times (interleaved) and the tables show means (± standard error), which is what tells a real difference between two
modes from the noise of one run. `--out` writes the runs as JSON and the reward curves against samples and against wall
time as a PNG.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import logging
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple, Optional

import skyrl_gym
from skyrl_gym.envs.synthetic.addition import AdditionEnv, make_problem
from skyrl_gym.envs.synthetic.generate import write_dataset
from skyrl_train.config import SkyRLConfig
from skyrl_train.entrypoints.example_run import cpu_stack_overrides, output_overrides
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.recipes.embedded import get_embedded_model
from skyrl_train.recipes.warm_start import WarmStartSettings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from process_cpu import KINDS, cpu_snapshot, cpu_spent  # noqa: E402 - the benchmarks folder is not a package

MODEL = WarmStartSettings(task="addition", difficulty=2, size=2, seed=0, train_examples=8192)
FOLLOW_UP = "Lookup: {previous_answer} is a number\n{question}"
"""How the multi-turn models see a later question: what `CheckedAdditionEnv` shows after a right answer (the search
hit of a correct sum `n` is the document `n is a number`)."""
MODES = {
    "sync": [],
    "one_step_off": ["trainer.mode=one_step_off"],
    "fully_async": ["trainer.mode=fully_async"],  # max_staleness 1, the default
    "fully_async_s2": ["trainer.mode=fully_async", "trainer.async_rl.max_staleness=2"],
}
SEARCH_URL_ENV = "SKYRL_BENCH_SEARCH_URL"
SUMMED = ("samples_per_s", "reward_first", "reward_last", "accuracy")
"""Per-run numbers the summary table averages over repeats."""
_CONNECTIONS = threading.local()


def post_json(url: str, payload: dict[str, Any]) -> Any:
    """POST `payload` to `url` over this env thread's own keep-alive connection (one reconnect if it was closed).

    The client's own CPU matters here: one `httpx.Client` shared by 512 env threads spent ~15 ms of CPU per request in
    its pool's locking (256 concurrent lookups: 4 s of client CPU, 4.3 s wall); a client per thread, ~7 ms; this,
    ~0.4 ms (0.6 s wall). The API, not the client, should be what episodes wait on."""
    parts = urllib.parse.urlsplit(url)
    body = json.dumps(payload)
    for attempt in range(2):
        connection = getattr(_CONNECTIONS, "connection", None)
        if connection is None or (connection.host, connection.port) != (parts.hostname, parts.port):
            connection = _CONNECTIONS.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            connection.request("POST", parts.path, body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            data = response.read()
        except (http.client.HTTPException, OSError):
            connection.close()
            _CONNECTIONS.connection = None
            if attempt:
                raise
            continue
        if response.status != 200:
            raise RuntimeError(f"{url} answered {response.status}: {data[:200]!r}")
        return json.loads(data)


class CheckedAdditionEnv(AdditionEnv):
    """`max_turns` addition questions (the generator's `max_turns`) in one episode. After each answer the env looks it
    up in a search API (a real HTTP call), shows the hit and asks the next question, drawn from a generator seeded by
    the row's question; each correct answer earns 1 / `max_turns`, so the episode's reward is the fraction right."""

    default_max_turns = 2
    nonblocking = False  # each step waits on an HTTP call: it needs an env thread (AdditionEnv's never block)

    def init(self, prompt):
        """Start the episode; the later questions are fixed by the row (same row, same episode)."""
        started = super().init(prompt)
        self._questions = random.Random(f"checked_addition/{self.extras['extra_info']['question']}")
        return started

    def _step(self, action: str):
        found = post_json(f"{os.environ[SEARCH_URL_ENV]}/retrieve", {"query": action.strip() or "none", "topk": 1})
        scored = super()._step(action)
        scored["reward"] = scored["reward"] / self.max_turns
        if self.turns >= self.max_turns:
            return scored
        problem = make_problem(self._questions, difficulty=2)
        self._truth = self.parse_ground_truth(problem["ground_truth"])
        hits = found["result"][0]
        lookup = hits[0]["text"] if hits else "nothing found"
        scored.update(
            observations=[{"role": "user", "content": f"Lookup: {lookup}\n{problem['question']}"}], done=False
        )
        return scored


class GradedAdditionEnv(AdditionEnv):
    """The single-turn addition task whose answer goes to a grading API (a real HTTP call) before it is scored."""

    nonblocking = False  # each step waits on an HTTP call: it needs an env thread (AdditionEnv's never block)

    def _step(self, action: str):
        post_json(f"{os.environ[SEARCH_URL_ENV]}/retrieve", {"query": action.strip() or "none", "topk": 1})
        return super()._step(action)


class TimedExp(BasePPOExp):
    """BasePPOExp that records the wall time of the training loop (`run_steps`) and, for every step, the loop time
    at which its metrics were logged."""

    loop_seconds = 0.0
    step_seconds: dict[int, float] = {}
    cpu_seconds: dict[str, float] = {}
    """CPU seconds the run's processes spent in the training loop, by part (`process_cpu.KINDS`)."""

    def get_trainer(self, **parts: Any):
        trainer = super().get_trainer(**parts)
        original, log = trainer.run_steps, trainer.tracker.log
        started = [0.0]
        TimedExp.step_seconds = {}

        async def timed(max_steps: int) -> None:
            started[0], before = time.perf_counter(), cpu_snapshot()
            await original(max_steps)
            TimedExp.loop_seconds = time.perf_counter() - started[0]
            TimedExp.cpu_seconds = cpu_spent(before, cpu_snapshot())

        def logged(metrics: dict[str, Any], step: int) -> None:
            if "reward/mean" in metrics and started[0]:
                TimedExp.step_seconds[step] = time.perf_counter() - started[0]
            log(metrics, step=step)

        trainer.run_steps, trainer.tracker.log = timed, logged
        return trainer


class Config(NamedTuple):
    """A benchmark config: its env class, the turns of an episode (a lookup after each; 0: single turn) and the API's
    wait per call (None: `--delay-ms`)."""

    env_class: str
    turns: int
    delay_ms: Optional[str] = None


CONFIGS = {
    "tool-wait": Config("checked_addition", 2),
    "tool-wait-4": Config("checked_addition", 4),
    "latency-bound": Config("checked_addition", 4, "200-1000"),
    "grader-wait": Config("graded_addition", 0),
    "plain": Config("addition", 0),
}


def model_for(config: Config) -> WarmStartSettings:
    """The warm-started model a config trains: the quickstart's, or for a multi-turn config the same warm start over
    episodes of its turns (a single-turn model has never seen a second question, and does not learn one here)."""
    if not config.turns:
        return MODEL
    return replace(MODEL, turns=config.turns, follow_up=FOLLOW_UP)


def overrides(model_dir: str, data_dir: Path, out_dir: Path, config: Config, steps: int) -> list[str]:
    """The shared config of every run (multi-turn when `config.turns` > 0)."""
    env_class, turns, _ = config
    waits = env_class != "addition"
    return [
        # 1 FSDP2 rank and 1 hf engine, each on its own CPU worker, float32 throughout
        *cpu_stack_overrides(
            model_dir, data_dir / "train.parquet", data_dir / "test.parquet", ranks=1, num_engines=1, colocate=False
        ),
        "data.max_prompt_length=64",
        f"environment.env_class={env_class}",
        *([f"generator.max_turns={turns}", f"generator.max_input_length={64 + 64 * turns}"] if turns else []),
        *(["generator.batched=true"] if not turns else []),
        # every episode waits on its API call at once, as async HTTP tools do
        *(["environment.max_env_workers=512"] if waits else []),
        # 2e-4 (the quickstart's, for twice this batch) was too high here: every mode learned less per sample, and
        # one_step_off lost most (docs/async.md, "Learning rate")
        "trainer.policy.optimizer.lr=1e-4",
        "trainer.policy.optimizer.weight_decay=0.0",
        "trainer.algorithm.advantage_estimator=grpo",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.train_batch_size=16",
        "trainer.policy_mini_batch_size=16",
        "trainer.micro_train_batch_size_per_gpu=64",
        "trainer.micro_forward_batch_size_per_gpu=64",
        "trainer.epochs=100",
        f"trainer.max_training_steps={steps}",
        "generator.n_samples_per_prompt=8",
        "generator.sampling_params.max_generate_length=8",
        "generator.eval_sampling_params.max_generate_length=8",
        "trainer.eval_interval=0",
        "trainer.eval_before_train=false",
        "trainer.ckpt_interval=0",
        *output_overrides(out_dir),
    ]


def dataset_for(env_class: str, directory: Path) -> Path:
    """The addition dataset with every row's `env_class` set to `env_class` (rows name their env; it wins over
    `environment.env_class`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_dataset(directory, "addition", train_size=4000, test_size=200, difficulty=2, seed=0)
    for split in ("train", "test"):
        table = pq.read_table(directory / f"{split}.parquet")
        column = pa.array([env_class] * table.num_rows, type=pa.string())
        table = table.set_column(table.schema.get_field_index("env_class"), "env_class", column)
        pq.write_table(table, directory / f"{split}.parquet")
    return directory


def run_config(
    model_dir: str, data_dir: Path, out_dir: Path, config: Config, mode: str, steps: int, extra: list[str]
) -> SkyRLConfig:
    """The config of one run: the shared overrides, the mode's, then the user's `extra` ones (which win)."""
    return SkyRLConfig.from_cli_overrides(overrides(model_dir, data_dir, out_dir, config, steps) + MODES[mode] + extra)


def run(
    model_dir: str,
    data_dir: Path,
    config: Config,
    mode: str,
    steps: int,
    extra: list[str] = (),
    timeline: Optional[Path] = None,
) -> dict[str, float]:
    """One training run; its samples/s, reward over the first and last third, and held-out accuracy. With
    `timeline`, the run records its timeline (`trainer.record_timeline`) and it is copied there."""
    with tempfile.TemporaryDirectory() as out:
        record = ["trainer.record_timeline=true"] if timeline is not None else []
        cfg = run_config(model_dir, data_dir, Path(out), config, mode, steps, [*record, *extra])
        experiment = TimedExp(cfg)
        result = experiment.run()
        if timeline is not None:
            timeline.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(Path(out) / "logs" / "timeline.jsonl", timeline)
    points = sorted(result.history["reward/mean"])
    rewards = [value for _, value in points]
    third = max(1, len(rewards) // 3)
    per_step = cfg.trainer.train_batch_size * cfg.generator.n_samples_per_prompt
    samples = result.global_step * per_step
    return {
        "curve": [
            {"samples": step * per_step, "reward": reward, "seconds": TimedExp.step_seconds.get(step)}
            for step, reward in points
        ],
        "samples_per_s": samples / TimedExp.loop_seconds,
        "reward_first": sum(rewards[:third]) / third,
        "reward_last": sum(rewards[-third:]) / third,
        # mean held-out reward: accuracy for single-turn configs, the fraction of questions right for multi-turn ones
        "accuracy": result.final_eval.get("eval/all/mean_reward", float("nan")),
        "staleness": max((v for _, v in result.history.get("async/staleness_max", [])), default=0.0),
        "loop_seconds": TimedExp.loop_seconds,
        "steps": result.global_step,
        "cpu_seconds": dict(TimedExp.cpu_seconds),
    }


def cpu_table(rows: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    """Per (config, mode): the mean CPU seconds per training step of each part of the run, their total, and that
    total as a share of the machine's cores over the loop's wall time."""
    cores = os.cpu_count() or 1
    lines = [
        f"{'config':>13} | {'mode':>14} | " + " | ".join(f"{kind:>15}" for kind in KINDS) + " |  total | cores busy"
    ]
    for (config, mode), runs in grouped(rows).items():
        per_step = {kind: statistics.mean(run["cpu_seconds"][kind] / run["steps"] for run in runs) for kind in KINDS}
        busy = statistics.mean(sum(run["cpu_seconds"].values()) / (run["loop_seconds"] * cores) for run in runs)
        cells = " | ".join(f"{per_step[kind]:>15.2f}" for kind in KINDS)
        lines.append(f"{config:>13} | {mode:>14} | {cells} | {sum(per_step.values()):>6.2f} | {100 * busy:>9.0f}%")
    return lines


def start_search_server(directory: Path, delay_ms: str) -> subprocess.Popen:
    """The bundled BM25 server in its own process (as a remote API would be), waiting `delay_ms` per request; sets
    the env's URL."""
    corpus = directory / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": n, "text": f"{n} is a number"}) + "\n" for n in range(200)))
    command = [sys.executable, "-m", "skyrl_gym.tools.retrieval_server", "--corpus", str(corpus), "--port", "0"]
    process = subprocess.Popen([*command, "--delay-ms", delay_ms], stdout=subprocess.PIPE, text=True)
    first = process.stdout.readline()  # "serving N documents at URL"
    if " at " not in first:
        raise RuntimeError(f"the search server did not start: {first!r}")
    os.environ[SEARCH_URL_ENV] = first.rsplit(" at ", 1)[1].strip()
    return process


def moving_average(values: list[float], window: int) -> list[float]:
    """The mean of each value and the up to `window - 1` before it (a trailing window, so no future leaks in)."""
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def quarter_marks(metrics: dict[str, Any], window: int) -> list[float]:
    """A run's trailing-mean training reward after a quarter, half, three quarters and all of its samples."""
    curve = metrics["curve"]
    smooth = moving_average([point["reward"] for point in curve], window)
    return [smooth[max(0, round(len(curve) * q) - 1)] for q in (0.25, 0.5, 0.75, 1.0)]


def mean_and_error(values: list[float]) -> str:
    """`mean` of one value, `mean ± standard error` of several."""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values) / len(values) ** 0.5:.3f}"


def grouped(rows: list[tuple[str, str, dict[str, Any]]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The runs of each (config, mode), in the order they first ran (repeats of one pair together)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for config, mode, metrics in rows:
        groups.setdefault((config, mode), []).append(metrics)
    return groups


def curve_table(rows: list[tuple[str, str, dict[str, Any]]], window: int) -> list[str]:
    """Lines of the reward-per-sample table: each (config, mode)'s trailing-mean training reward after a quarter,
    half, three quarters and all of its samples (every mode trains the same number of samples), and its held-out
    accuracy; with repeats, the mean ± standard error over them."""
    columns = ("25% samples", "50%", "75%", "100%", "held-out")
    lines = [f"{'config':>11} | {'mode':>14} | " + " | ".join(f"{q:>13}" for q in columns)]
    for (config, mode), runs in grouped(rows).items():
        marks = [quarter_marks(metrics, window) for metrics in runs]
        cells = [mean_and_error([run[q] for run in marks]) for q in range(4)]
        cells.append(mean_and_error([metrics["accuracy"] for metrics in runs]))
        lines.append(f"{config:>11} | {mode:>14} | " + " | ".join(f"{cell:>13}" for cell in cells))
    return lines


def plot(rows: list[tuple[str, str, dict[str, Any]]], window: int, path: Path) -> None:
    """One row of two panels per config: trailing-mean training reward against samples trained and against the
    training loop's wall seconds."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    configs = list(dict.fromkeys(config for config, _, _ in rows))
    figure = Figure(figsize=(11, 3.8 * len(configs)), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(configs), 2, squeeze=False)
    for row, config in enumerate(configs):
        for (config_name, mode), runs in grouped(rows).items():
            if config_name != config:
                continue
            color = None  # every repeat of a mode in the colour its first run got
            for index, metrics in enumerate(runs):
                curve = metrics["curve"]
                smooth = moving_average([point["reward"] for point in curve], window)
                label = mode if index == 0 else None
                (line,) = axes[row][0].plot(
                    [point["samples"] for point in curve], smooth, label=label, color=color, alpha=0.8
                )
                color = line.get_color()
                timed = [(p["seconds"], value) for p, value in zip(curve, smooth) if p["seconds"] is not None]
                axes[row][1].plot([t for t, _ in timed], [v for _, v in timed], label=label, color=color, alpha=0.8)
        for column, x_label in enumerate(("samples trained", "training-loop seconds")):
            axes[row][column].set_title(f"{config}: reward ({window}-step trailing mean)")
            axes[row][column].set_xlabel(x_label)
            axes[row][column].set_ylabel("training reward")
            axes[row][column].grid(True, alpha=0.3)
            axes[row][column].legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")


def check_overrides(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Build every (config, mode)'s config with the user's overrides before anything runs: a typo or a bad value
    stops the benchmark at once, not after the first runs."""
    for name in args.configs:
        for mode in args.modes:
            try:
                run_config("model", Path("data"), Path("out"), CONFIGS[name], mode, args.steps, args.overrides)
            except Exception as error:  # noqa: BLE001 - reported to the user, with the override that caused it
                parser.error(f"the overrides {args.overrides} do not make a valid config for {name} / {mode}: {error}")


def main() -> None:
    """Run every (config, mode), print the table with ratios to sync."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--delay-ms", default="200-500", help="search API wait per request: N or MIN-MAX")
    parser.add_argument("--configs", nargs="+", default=["tool-wait", "plain"], choices=list(CONFIGS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--window", type=int, default=4, help="steps in the reward curves' trailing mean")
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each (config, mode); tables then show mean ± standard error"
    )
    parser.add_argument("--out", type=Path, default=None, help="write <name>.json and <name>.png here")
    parser.add_argument("--name", default="async_vs_sync", help="file name of the results (async_vs_sync*)")
    parser.add_argument(
        "--timeline",
        type=Path,
        default=None,
        help="record each run's timeline (trainer.record_timeline) into DIR/<config>_<mode>_<repeat>.jsonl",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides for every run, key=value")
    args = parser.parse_args()
    if "sync" not in args.modes:
        parser.error("--modes must include sync (the ratios are against it)")
    check_overrides(parser, args)
    if not args.name.startswith("async_vs_sync"):
        parser.error("--name must start with async_vs_sync (scripts/render_doc_results.py renders such files)")
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    load_before = os.getloadavg()[0]
    skyrl_gym.register("checked_addition", CheckedAdditionEnv)
    skyrl_gym.register("graded_addition", GradedAdditionEnv)
    rows = []
    with tempfile.TemporaryDirectory() as data:
        for config in args.configs:
            search = start_search_server(Path(data), CONFIGS[config].delay_ms or args.delay_ms)
            data_dir = dataset_for(CONFIGS[config].env_class, Path(data) / config)
            model_dir = str(get_embedded_model(model_for(CONFIGS[config])))
            for repeat in range(args.repeats):  # modes interleaved, so a drift of the machine hits each alike
                for mode in args.modes:
                    print(f"== {config} / {mode} (run {repeat + 1} of {args.repeats})", flush=True)
                    timeline = None if args.timeline is None else args.timeline / f"{config}_{mode}_{repeat}.jsonl"
                    metrics = run(model_dir, data_dir, CONFIGS[config], mode, args.steps, args.overrides, timeline)
                    rows.append((config, mode, {**metrics, "repeat": repeat}))
            search.terminate()
    print(
        f"\n{args.steps} steps of 16 prompts x 8 samples each; tool-wait(-N): 2 (N) turns, a search API call after "
        f"each turn waiting {args.delay_ms} ms; latency-bound: 4 turns, 200-1000 ms per call; grader-wait: one turn, "
        "graded by a call to that API; 1 policy rank + 1 separate hf engine on this machine"
    )
    header = f"{'config':>11} | {'mode':>14} | {'samples/s':>9} | {'vs sync':>7} | {'reward first→last third':>24}"
    print(header + f" | {'held-out acc':>12} | {'max staleness':>13}")
    print("-" * (len(header) + 32))
    groups = grouped(rows)
    summary = {
        key: {name: statistics.mean(run[name] for run in runs) for name in SUMMED} for key, runs in groups.items()
    }
    for (config, mode), m in summary.items():
        curve = f"{m['reward_first']:.3f} → {m['reward_last']:.3f}"
        staleness = max(run["staleness"] for run in groups[(config, mode)])
        print(
            f"{config:>11} | {mode:>14} | {m['samples_per_s']:>9.1f} | "
            f"{m['samples_per_s'] / summary[(config, 'sync')]['samples_per_s']:>6.2f}x |"
            f" {curve:>24} | {m['accuracy']:>12.3f} | {staleness:>13.0f}"
        )
    if args.repeats > 1:
        print(f"(means over {args.repeats} runs of each mode)")
    if args.overrides:
        print(f"overrides of every run: {' '.join(args.overrides)}")
    print(
        "\nCPU seconds per step in the training loop, by process (mean over the runs); cores busy: their total over the"
    )
    print("loop's wall time, as a share of the machine's cores:")
    print("\n".join(cpu_table(rows)))
    print(f"\ntraining reward per sample ({args.window}-step trailing mean; every mode trains the same samples):")
    print("\n".join(curve_table(rows, args.window)))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        delays = sorted({CONFIGS[config].delay_ms or args.delay_ms for config in args.configs})
        record = {
            "benchmark": "async_vs_sync",
            "steps": args.steps,
            "delay_ms": ", ".join(delays),
            "window": args.window,
        }
        record["repeats"] = args.repeats
        record["overrides"] = args.overrides
        record["arguments"] = sys.argv[1:]
        record["date"] = datetime.date.today().isoformat()
        record["machine"] = f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}"
        record["load_average_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        record["runs"] = [{"config": config, "mode": mode, **metrics} for config, mode, metrics in rows]
        (args.out / f"{args.name}.json").write_text(json.dumps(record, indent=1))
        plot(rows, args.window, args.out / f"{args.name}.png")
        print(f"results: {args.out / f'{args.name}.json'}, reward curves: {args.out / f'{args.name}.png'}")


if __name__ == "__main__":
    main()
