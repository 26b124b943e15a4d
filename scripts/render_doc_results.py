"""Render benchmark results (benchmarks/results/<name>.json) into the marked blocks of the docs pages.

A page holds a block per benchmark:

    <!-- results: dynamic_sampling -->
    ...generated markdown, never edited by hand...
    <!-- /results -->

`python scripts/render_doc_results.py` rewrites every block from its JSON file; `--check` only reports the blocks
that differ and exits 1 (tests/test_doc_results.py runs the check). A missing results file renders as a note saying
which file to produce, so a page never shows stale numbers silently.
"""

import argparse
import functools
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the renderer modules beside this file

from render_async_results import (  # noqa: E402 - after the path set-up
    render_async_timeline,
    render_async_vs_sync,
    render_off_policy_corrections,
    render_quickstart_modes,
)
from render_project_results import render_redesign_speed, render_same_numbers, render_upstream_scripts  # noqa: E402
from results_format import overrides_note, plus_minus, with_note  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
BLOCK = re.compile(r"(<!-- results: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.DOTALL)


def render_dynamic_sampling(data: dict) -> str:
    """The dynamic-sampling benchmark: one row per run, then the machine and date it was measured on."""
    lines = [
        "| run | steps | sampled groups | final accuracy | groups to reach GRPO's final accuracy |",
        "|---|---|---|---|---|",
    ]
    for run in data["runs"]:
        reached = run.get("groups_to_reach_grpo_final")
        lines.append(
            f"| {run['name']} | {run['steps']} | {run['sampled_groups']} | {run['final_accuracy']:.3f} | "
            f"{'not reached' if reached is None else reached} |"
        )
    budgets = [4000, 8000, 12000]
    lines += ["", "| run | " + " | ".join(f"best accuracy within {b} groups" for b in budgets) + " |"]
    lines.append("|---|" + "---|" * len(budgets))
    for run in data["runs"]:
        at = [
            max((acc for groups, acc in run["curve"] if groups <= budget), default=float("nan")) for budget in budgets
        ]
        lines.append(f"| {run['name']} | " + " | ".join(f"{value:.3f}" for value in at) + " |")
    lines.append("")
    filter_overrides = data.get("filter_overrides") or []
    if filter_overrides:
        lines.append("The filter run's own overrides: " + ", ".join(f"`{o}`" for o in filter_overrides) + ".")
    reused = data.get("grpo_reused_from")
    if reused:
        lines.append(f"The grpo run was measured on {reused['date']} by an earlier run of the script (deterministic).")
    lines.append(
        f"GRPO's final accuracy: {data['grpo_final_accuracy']:.3f}. Measured on {data['machine']}, {data['date']} "
        f"(`benchmarks/results/dynamic_sampling.json`, benchmark `{data['benchmark']}`)."
    )
    return "\n".join(lines) + "\n"


def render_minimal_grpo(data: dict) -> str:
    """One run of examples/minimal_grpo.py: its settings, accuracy before/after, wall time, the eval curve."""
    settings = data["settings"]
    lines = [
        "| steps | prompts x samples | lr | torch threads | held-out accuracy before -> after | wall time, all in | per step |",
        "|---|---|---|---|---|---|---|",
        f"| {settings['steps']} | {settings['prompts']} x {settings['group']} | {settings['lr']:g} | "
        f"{settings['threads']} | {data['accuracy_before']:.3f} -> {data['accuracy_after']:.3f} "
        f"({settings['eval_size']} problems, greedy) | {data['seconds']:.0f} s | {data['seconds'] / settings['steps']:.2f} s |",
        "",
        "Held-out accuracy by step: " + ", ".join(f"{step}: {acc:.3f}" for step, acc in data["evaluations"]) + ".",
        f"Measured on {data['machine']}, {data['date']} (`benchmarks/results/minimal_grpo.json`, written by "
        "`python examples/minimal_grpo.py --results benchmarks/results/minimal_grpo.json`).",
    ]
    return "\n".join(lines) + "\n"


def render_vs_trl(data: dict) -> str:
    """TRL's GRPOTrainer against our stack (benchmarks/vs_trl.py), per seed and side: throughput, peak memory and
    held-out accuracy; then the means over seeds with their standard errors, the acceptance verdicts, each process's
    peak memory, the auto settings our side ran with, and where and when it ran."""
    settings, summary = data["settings"], data["summary"]
    lines = [
        "| seed | side | s/step | completions/s | generated tokens/s | peak RSS, all processes | held-out before -> after |",
        "|---|---|---|---|---|---|---|",
    ]
    for seed in data["seeds"]:
        for name, run in seed["runs"].items():
            tokens = run.get("generated_tokens_per_second")
            lines.append(
                f"| {seed['seed']} | {name} | {run['seconds_per_step']:.3f} | {run['completions_per_second']:.1f} | "
                f"{'-' if tokens is None else f'{tokens:.0f}'} | {run['peak_rss_mb']['total']:.0f} MB | "
                f"{seed['accuracy_before']:.3f} -> {run['accuracy_after']:.3f} |"
            )
    ratio, diff = summary["completions_per_second_ratio"], summary["accuracy_after_difference"]
    gains = summary["accuracy_gain"]
    memory = [s["ratios"]["peak_rss_total"] for s in data["seeds"] if s["ratios"].get("peak_rss_total")]
    lines.append("")
    lines.append(
        f"Ours / TRL over {summary['seeds']} seed(s) (mean ± standard error): {plus_minus(ratio)}x the "
        f"completions per second (goal {summary['goal_ratio']}x: {'met' if summary['ratio_goal_met'] else 'not met'}); "
        f"held-out accuracy after, ours - TRL: {plus_minus(diff, 3, True)} "
        f"({'equal or better within one standard error' if summary['accuracy_goal_met'] else 'worse'}; gains "
        f"{plus_minus(gains['trl'], 3, True)} TRL, {plus_minus(gains['ours'], 3, True)} ours)"
        + (f"; peak memory, all processes: {sum(memory) / len(memory):.1f}x TRL's." if memory else ".")
    )
    first = data["seeds"][0]["runs"]
    per_process = "; ".join(
        f"{name}: "
        + ", ".join(f"{process} {mb:.0f}" for process, mb in run["peak_rss_mb"].items() if process != "total")
        for name, run in first.items()
    )
    shares = "; ".join(
        f"{name} {run['pss_mb_at_end']['total']:.0f} MB" for name, run in first.items() if run.get("pss_mb_at_end")
    )
    lines.append("")
    lines.append(
        f"Peak RSS per process, MB (seed {data['seeds'][0]['seed']}): {per_process}. Resident sizes count shared pages "
        "(torch's libraries, shared memory) in every process mapping them"
        + (f"; the proportional set size at the end, shared pages split, totals {shares}." if shares else ".")
    )
    auto = first["ours"].get("auto_settings") or {}
    if auto:
        lines.append("")
        lines.append(
            "Our side's `auto` settings: " + ", ".join(f"`{key}={value}`" for key, value in auto.items()) + "."
        )
    model = settings["model"]
    precision = (
        f"compute dtype {settings['ours_dtype']} on our side (`auto`), {settings['trl_dtype']} on TRL's, "
        if "trl_dtype" in settings
        else ""
    )
    loads = [
        run["load_average_1min"][when]
        for s in data["seeds"]
        for run in s["runs"].values()
        for when in ("before", "after")
    ]
    return with_note(
        lines,
        f"{settings['prompts_per_step']} prompts x {settings['samples_per_prompt']} samples per step, at most "
        f"{settings['max_new_tokens']} new tokens, lr {settings['learning_rate']:g} constant, {precision}"
        f"{settings['steps']} steps per "
        f"seed and side, {settings['held_out_problems']} held-out problems ({model['task']} difficulty "
        f"{model['difficulty']}, model size {model['size']}). 1-minute load average {min(loads):.1f}-{max(loads):.1f} "
        f"around the runs. Measured on {data['machine']}, {data['date']} (`benchmarks/results/{data['benchmark']}.json`, "
        "`benchmarks/vs_trl.py`).",
    )


def render_quickstart(data: dict) -> str:
    """One quickstart run (benchmarks/quickstart_run.py): the model, accuracy before/after, the eval curve, time."""
    model = data["model"]
    curve = ", ".join(f"{step}: {accuracy:.3f}" for step, accuracy in data["eval_curve"])
    step_time = data["mean_step_seconds"]
    lines = [
        "| measured | value |",
        "|---|---|",
        f"| embedded model | {model['num_parameters'] / 1e6:.2f} M parameters; warm start: {model['warm_start_steps']} "
        f"steps, greedy accuracy {model['warm_start_greedy_accuracy']:.3f} on {model['held_out_problems']} held-out "
        "problems |",
        f"| eval accuracy (greedy pass@1) | {data['accuracy_before']:.3f} before, {data['accuracy_after']:.3f} after |",
        f"| eval curve (step: accuracy) | {curve} |",
        f"| training steps | {data['steps']}, of which {data['health_alert_steps']} raised a health alert |",
        f"| wall-clock time | {data['wall_seconds'] / 60:.1f} min "
        + (
            "from `git clone` to the last line of `bash scripts/quickstart.sh` (new venv, empty model cache: install "
            "and model build included)"
            if data.get("fresh_clone")
            else "for `run_quickstart.py` (Ray start-up, data, training, evaluations, checkpoints, export; not "
            "`scripts/setup.sh`'s install)"
        )
        + ("" if step_time is None else f"; {step_time:.2f} s per step on average")
        + " |",
        "",
    ]
    arguments = " ".join((["--fresh-clone"] if data.get("fresh_clone") else []) + data["arguments"])
    how = f"`python {data['benchmark']}{' ' + arguments if arguments else ''}`"
    what = (
        "a shortened run, not the default settings"
        if data["arguments"]
        else "the quickstart's default settings, one run"
    )
    if "load_average_1min" in data:  # other work on the machine slows the run down
        start, end = data["load_average_1min"]
        what += f"; 1-minute load average {start:.1f} at the start and {end:.1f} at the end"
    lines.append(
        f"Measured on {data['machine']}, {data['date']}, by {how} ({what}; `benchmarks/results/quickstart.json`)."
    )
    return "\n".join(lines) + "\n"


def render_thread_counts(data: dict) -> str:
    """benchmarks/thread_counts.py: quickstart s/step idle and with one core kept busy, per thread setting."""
    lines = ["| setting | idle s/step | one core busy s/step | busy / idle |", "|---|---|---|---|"]
    for row in data["rows"]:
        lines.append(f"| {row['setting']} | {row['idle']:.3f} | {row['busy']:.3f} | {row['busy_over_idle']:.2f} |")
    load = data.get("load_average_1min")
    load_note = (
        f" (1-minute load average {load[0]:g} at the start and {load[1]:g} at the end; the run's own actors and its"
        " busy core count in the second)"
        if load
        else ""
    )
    return with_note(
        lines,
        f"Mean `timing/step` of steps {data['warmup_steps'] + 1}-{data['steps']} of the quickstart configuration, "
        f"each setting idle then busy, back to back. Measured on {data['machine']}, {data['date']}{load_note} "
        "(`benchmarks/results/thread_counts.json`, `benchmarks/thread_counts.py`).",
    )


def render_step_breakdown(data: dict) -> str:
    """benchmarks/step_breakdown.py: mean seconds and share of the step (quickstart, or `--shape long`) per phase and
    per compute part."""
    lines = ["| part | seconds | share of step |", "|---|---|---|"]
    for row in data["rows"]:
        name = f"**{row['part']}**" if row["part"] in ("step", "outside model compute") else row["part"]
        lines.append(f"| {name} | {row['seconds']:.3f} | {row['share']:.1%} |")
    load = data["load_average_1min"]
    long = data.get("configuration") == "long"
    configuration = "long-response shape (default keys)" if long else "quickstart configuration"
    name = "step_breakdown_long" if long else "step_breakdown"
    return with_note(
        lines,
        f"Mean of steps {data['warmup_steps'] + 1}-{data['steps']} of the {configuration}{overrides_note(data)}. "
        f"Load average {load['before']:.1f} before, {load['after']:.1f} after. Measured on {data['machine']}, "
        f"{data['date']} (`benchmarks/results/{name}.json`, `benchmarks/step_breakdown.py`).",
    )


def render_quickstart_seeds(data: dict) -> str:
    """The quickstart on several RL seeds (benchmarks/quickstart_seeds.py): accuracy before/after and gain per seed."""
    lines = [
        "| seed | held-out accuracy before -> after | gain | wall time | s/step |",
        "|---|---|---|---|---|",
    ]
    for run in data["runs"]:
        gain = run["accuracy_after"] - run["accuracy_before"]
        lines.append(
            f"| {run['seed']} | {run['accuracy_before']:.3f} -> {run['accuracy_after']:.3f} | {gain:+.3f} | "
            f"{run['wall_seconds'] / 60:.1f} min | {run['mean_step_seconds']:.3f} |"
        )
    if len(data["runs"]) == 1 and data["runs"][0].get("eval_curve"):
        curve = ", ".join(f"{step}: {accuracy:.3f}" for step, accuracy in data["runs"][0]["eval_curve"])
        lines += ["", f"Held-out accuracy by step: {curve}."]
    gains = [run["accuracy_after"] - run["accuracy_before"] for run in data["runs"]]
    verdict = "every seed reaches" if min(gains) >= data["goal_gain"] else "not every seed reaches"
    load = data.get("load_average_1min")
    load_note = f" (1-minute load average {load[0]:g} at the start, {load[1]:g} at the end)" if load else ""
    return with_note(
        lines,
        f"Goal: a gain of at least {data['goal_gain']:+.2f} on each seed; {verdict} it{overrides_note(data)}. "
        f"Measured on {data['machine']}, {data['date']}{load_note} "
        f"(`benchmarks/results/{data.get('name', 'quickstart_seeds')}.json`, `benchmarks/quickstart_seeds.py`).",
    )


def render_code_choices(data: dict) -> str:
    """The measurements behind the code's speed choices (recorded when each was made): one row per choice."""
    lines = ["| choice | where | measured |", "|---|---|---|"]
    lines += [f"| {c['choice']} | `{c['where']}` | {c['measured']} |" for c in data["choices"]]
    return with_note(
        lines, f"Measured on {data['machine']}: {data['benchmark']} (`benchmarks/results/code_choices.json`)."
    )


def render_packing(data: dict) -> str:
    """benchmarks/packing.py: speed-up of packed micro-batches over padded ones, per model size and batch shape."""
    names = [name for name in data["settings"] if name != "padded"]
    lines = [
        "| model | batch shape | tokens run: padded / "
        + " / ".join(names)
        + " | training pass speed-up: "
        + " / ".join(names)
        + " | log-prob pass speed-up: "
        + " / ".join(names)
        + " |",
        "|---|---|---|---|---|",
    ]
    for run in data["runs"]:
        shape = data["shapes"][run["shape"]]
        lo, hi = shape["response_tokens"]
        responses = f"{lo}" if lo == hi else f"{lo}-{hi}"
        described = f"{run['shape']}: {shape['prompts']} x {shape['samples']}, responses {responses} tokens"
        tokens = " / ".join(str(run["tokens"][name]) for name in ["padded", *names])
        train = " / ".join(f"{run['speedup'][name]['forward_backward']:.2f}x" for name in names)
        forward = " / ".join(f"{run['speedup'][name]['forward']:.2f}x" for name in names)
        model = f"size {run['model_size']} ({run['parameters'] / 1e6:.1f} M)"
        lines.append(f"| {model} | {described} | {tokens} | {train} | {forward} |")
    start, end = data["load_average_1min"]
    return with_note(
        lines,
        f"Speed-up: the padded setting's median CPU seconds over the setting's, {data['rounds']} interleaved rounds "
        f"after a warm-up, one worker process with one torch thread in float32. 1-minute load average {start:.1f} at "
        f"the start and {end:.1f} at the end. Measured on {data['machine']}, {data['date']} "
        "(`benchmarks/results/packing.json`, `benchmarks/packing.py`).",
    )


def render_prefix_cache(data: dict) -> str:
    """benchmarks/prefix_cache.py: multi-turn rollouts through the hf engine with its prefix cache off and on."""
    lines = ["| prefix cache | seconds (median, range) | prompt tokens prefilled | speed-up |", "|---|---|---|---|"]
    off = next(row for row in data["rows"] if row["setting"] == "off")
    for row in data["rows"]:
        spread = f"{row['median_s']:.2f} ({min(row['seconds']):.2f}-{max(row['seconds']):.2f})"
        speedup = off["median_s"] / row["median_s"]
        lines.append(f"| {row['setting']} | {spread} | {row['prefilled']:,} | {speedup:.2f}x |")
    work, model = data["workload"], data["model"]
    start, end = data["load_average_1min"]
    same = "the same tokens" if data["same_tokens"] else "DIFFERENT tokens"
    return with_note(
        lines,
        f"{work['sessions']} concurrent conversations x {work['turns']} turns of {work['new_tokens']} greedy tokens "
        f"plus a {work['observation_tokens']}-token observation each, on the tiny model size {model['size']} "
        f"({model['parameters'] / 1e6:.2f} M parameters); {data['rounds']} alternating rounds, both settings gave "
        f"{same}. 1-minute load average {start:.1f} at the start and {end:.1f} at the end. Measured on "
        f"{data['machine']}, {data['date']} (`benchmarks/results/prefix_cache.json`, `benchmarks/prefix_cache.py`).",
    )


def render_grouped_attention(data: dict) -> str:
    """benchmarks/grouped_attention.py: hf engine decoding with transformers' sdpa and with grouped-query SDPA."""
    lines = [
        "| workload | model | attention | seconds (median, range) | decode steps/s | speed-up | same tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in data["runs"]:
        baseline = run["results"][0]["median_s"]
        model = f"size {run['size']} ({run['parameters'] / 1e6:.1f} M)"
        work = f"{run['workload']}: {run['rows']} rows x {run['new_tokens']} tokens"
        for row in run["results"]:
            spread = f"{row['median_s']:.2f} ({min(row['seconds']):.2f}-{max(row['seconds']):.2f})"
            steps = run["new_tokens"] / row["median_s"]
            same = "yes" if run["same_tokens"] else "NO"
            lines.append(
                f"| {work} | {model} | `{row['attention']}` | {spread} | {steps:.1f} | "
                f"{baseline / row['median_s']:.2f}x | {same} |"
            )
    start, end = data["load_average_1min"]
    return with_note(
        lines,
        f"Seeded sampling at temperature 1 with `ignore_eos` (every row runs its whole budget) from prompts of "
        f"different lengths, freshly initialised tiny models, {data['rounds']} alternating rounds after a warm-up; "
        f"largest logprob difference between the two attentions "
        f"{max(run['max_logprob_difference'] for run in data['runs']):.1e}. 1-minute load average {start:.1f} at the "
        f"start and {end:.1f} at the end. Measured on {data['machine']}, {data['date']} "
        "(`benchmarks/results/grouped_attention.json`, `benchmarks/grouped_attention.py`).",
    )


def render_cpu_bf16(data: dict) -> str:
    """benchmarks/cpu_bf16.py: bfloat16 against float32 decoding and training per model size, and auto's pick."""
    lines = [
        "| model | auto picks | part | setting | seconds (median) | speed-up over float32 |",
        "|---|---|---|---|---|---|",
    ]
    for run in data["runs"]:
        model = f"size {run['size']} ({run['parameters'] / 1e6:.1f} M)"
        base = {part["part"]: part["median_s"] for part in run["parts"] if part["setting"] == "float32"}
        for part in run["parts"]:
            lines.append(
                f"| {model} | {run['auto']} | {part['part']} | {part['setting']} | {part['median_s']:.3f} | "
                f"{base[part['part']] / part['median_s']:.2f}x |"
            )
    start, end = data["load_average_1min"]
    return with_note(
        lines,
        f"decode: one `hf` engine sampling {data['rows']} rows x {data['new_tokens']} tokens (`bfloat16` attends in "
        "float32, as the engine runs it; the last decode row attends in bfloat16 with transformers' `sdpa`); train: "
        f"one packed forward and backward of {data['rows']} rows of 95-316 response tokens. Freshly initialised tiny "
        f"models, {data['rounds']} alternating rounds after a warm-up. Native bfloat16 on this CPU: "
        f"{data['cpu_bf16'] or 'none'}; `auto` picks bfloat16 from {data['threshold_parameters'] / 1e6:g} M "
        f"parameters on such a CPU. 1-minute load average {start:.1f} at the start and {end:.1f} at the end. "
        f"Measured on {data['machine']}, {data['date']} (`benchmarks/results/cpu_bf16.json`, "
        "`benchmarks/cpu_bf16.py`).",
    )


def render_tx_abuse(data: dict) -> str:
    """benchmarks/tx_abuse.py: each attack and the server's answer, then the good clients alone and under attack."""
    lines = ["| attack | answer | server RSS after |", "|---|---|---|"]
    for row in data["attacks"]:
        lines.append(f"| {row['attack']} | {row['answer']} | {row['rss_mb']:.0f} MB |")
    lines += [
        "",
        "| good clients | samples ok | sample p99 | train steps ok | train step p99 | server peak RSS |",
        "|---|---|---|---|---|---|",
    ]
    expected = data["expected"]
    for name, label in (("baseline", "alone"), ("attacked", "under attack"), ("baseline_after", "alone again")):
        run = data[name]
        sample, train = run["kinds"]["sample"], run["kinds"]["train_step"]
        lines.append(
            f"| {label} | {sample['ok']} / {expected['sample']} | {sample['p99_s']:.2f} s | "
            f"{train['ok']} / {expected['train_step']} | {train['p99_s']:.2f} s | {run['peak_rss_mb']:.0f} MB |"
        )
    settings = data["settings"]
    ratios = ", ".join(f"{kind} {ratio:.2f}x" for kind, ratio in data["p99_ratios"].items())
    passed = [check for check, ok in data["acceptance"].items() if ok]
    failed = [check for check, ok in data["acceptance"].items() if not ok]
    start, end = data["load_average_1min"]
    lines += [
        "",
        f"p99 under attack / the mean of the two runs alone: {ratios}; adapters lost: {data['adapters_lost']}; RSS bound "
        f"{data['rss_bound_mb']:.0f} MB (idle {data['idle_rss_mb']:.0f} MB). Acceptance: "
        + (f"all {len(passed)} checks pass" if not failed else "FAILED: " + "; ".join(failed))
        + f". {settings['sampling_clients']} sampling clients x {settings['requests']} requests "
        f"({settings['sample']}) and {settings['training_clients']} training clients x {settings['steps']} steps "
        f"({settings['train_step']}), each on its own key; server limits: {settings['limits']}. Measured on "
        f"{data['machine']}, {data['date']}, 1-minute load average {start:.1f} at the start and {end:.1f} at the end "
        "(`benchmarks/results/tx_abuse.json`, `python benchmarks/tx_abuse.py`).",
    ]
    return "\n".join(lines) + "\n"


RENDERERS = {
    "code_choices": render_code_choices,
    "dynamic_sampling": render_dynamic_sampling,
    "minimal_grpo": render_minimal_grpo,
    "packing": render_packing,
    "prefix_cache": render_prefix_cache,
    "grouped_attention": render_grouped_attention,
    "cpu_bf16": render_cpu_bf16,
    "quickstart": render_quickstart,
    "quickstart_seeds": render_quickstart_seeds,
    "lora_quickstart": render_quickstart_seeds,
    "quickstart_fully_async": render_quickstart_seeds,
    "step_breakdown": render_step_breakdown,
    "step_breakdown_long": render_step_breakdown,
    "thread_counts": render_thread_counts,
    "tx_abuse": render_tx_abuse,
    "vs_trl": render_vs_trl,
    "vs_trl_long": render_vs_trl,
    "quickstart_modes": render_quickstart_modes,
    "off_policy_corrections": render_off_policy_corrections,
    "redesign_same_numbers": render_same_numbers,
    "upstream_scripts": render_upstream_scripts,
    "redesign_speed": render_redesign_speed,
}
PREFIX_RENDERERS = {"async_vs_sync": render_async_vs_sync, "async_timeline": render_async_timeline}
"""Results files named `<prefix>...` (one benchmark, several measured configs); called with `name` too when they
take it."""


def renderer_for(name: str):  # noqa: ANN201 - a render function
    """The renderer of results file `name`: by exact name, else by prefix; None when there is none."""
    if name in RENDERERS:
        return RENDERERS[name]
    for prefix, render_data in PREFIX_RENDERERS.items():
        if name.startswith(prefix):
            return functools.partial(render_data, name=name) if render_data is render_async_vs_sync else render_data
    return None


def render(name: str, results_dir: Path = RESULTS_DIR) -> str:
    """The markdown for the block named `name` (a note when its results file does not exist yet).

    A block may name a benchmark that writes no results file yet (its note says which file is missing); once the
    file exists, a renderer for it must be added to RENDERERS.
    """
    path = results_dir / f"{name}.json"
    if not path.exists():
        return f"*No measured results yet: run the benchmark to write `benchmarks/results/{name}.json`.*\n"
    render_data = renderer_for(name)
    if render_data is None:
        raise KeyError(f"results block {name!r}: {path} exists but has no renderer; known: {sorted(RENDERERS)}")
    data = json.loads(path.read_text())
    try:
        return render_data(data)
    except KeyError as error:
        raise KeyError(f"{path}: missing key {error} that the {name!r} renderer needs") from error


def rendered_page(text: str, results_dir: Path = RESULTS_DIR) -> str:
    """The page text with every results block replaced by its rendering."""
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("name"), results_dir) + m.group(4), text)


def doc_pages() -> list[Path]:
    return (
        [REPO / "README.md"] + sorted((REPO / "docs").rglob("*.md")) + sorted((REPO / "examples").glob("*/README.md"))
    )


def main() -> int:
    """Rewrite (or with --check, compare) every page's results blocks."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report stale blocks and exit 1 instead of rewriting")
    args = parser.parse_args()
    stale = []
    for page in doc_pages():
        text = page.read_text()
        new = rendered_page(text)
        if new != text:
            stale.append(str(page.relative_to(REPO)))
            if not args.check:
                page.write_text(new)
    verb = "stale" if args.check else "rewrote"
    print(f"render_doc_results: {verb}: {', '.join(stale) if stale else 'none'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
