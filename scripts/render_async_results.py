"""Renderers of the async benchmarks' results blocks (async_vs_sync, quickstart modes, off-policy corrections,
timelines), used by scripts/render_doc_results.py."""

import statistics

from results_format import mean_and_error, overrides_note, trailing_mean


def render_async_vs_sync(data: dict, name: str) -> str:
    """One run of benchmarks/async_vs_sync.py: per config, each mode's samples/s against sync's, its trailing-mean
    training reward after a quarter, half, three quarters and all of the samples, and held-out accuracy (mean ±
    standard error over the repeats), the way the benchmark prints them."""
    window, lines = data["window"], []
    groups: dict[str, dict[str, list[dict]]] = {}
    for run in data["runs"]:
        groups.setdefault(run["config"], {}).setdefault(run["mode"], []).append(run)
    for config, modes in groups.items():
        if len(groups) > 1:
            lines += [f"**{config}**", ""]
        sync_speed = statistics.mean(run["samples_per_s"] for run in modes["sync"])
        lines += [
            f"| mode | samples/s | vs sync | reward after 25 / 50 / 75 / 100 % of the samples ({window}-step trailing "
            f"mean) | held-out after {data['steps']} steps |",
            "|---|---|---|---|---|",
        ]
        for mode, runs in modes.items():
            speed = statistics.mean(run["samples_per_s"] for run in runs)
            marks = []
            for run in runs:
                smooth = trailing_mean([point["reward"] for point in run["curve"]], window)
                marks.append([smooth[max(0, round(len(smooth) * q) - 1)] for q in (0.25, 0.5, 0.75, 1.0)])
            quarters = " / ".join(mean_and_error([run_marks[q] for run_marks in marks]) for q in range(4))
            held_out = mean_and_error([run["accuracy"] for run in runs])
            lines.append(f"| {mode_label(mode)} | {speed:.1f} | {speed / sync_speed:.2f}x | {quarters} | {held_out} |")
        lines.append("")
        if all("cpu_seconds" in run for runs in modes.values() for run in runs):
            lines += cpu_lines(modes)
    repeats = data.get("repeats", 1)
    runs_note = f"{repeats} runs of each mode (mean±standard error)" if repeats > 1 else "one run of each mode"
    load = data.get("load_average_1min")
    loads = f", 1-minute load average {load[0]:.1f} at the start and {load[1]:.1f} at the end" if load else ""
    arguments = data.get("arguments")
    command = (
        f"python benchmarks/async_vs_sync.py {' '.join(arguments)}" if arguments else "benchmarks/async_vs_sync.py"
    )
    lines.append(
        f"{data['steps']} steps, {runs_note}, API wait {data['delay_ms']} ms{overrides_note(data)}. Measured on "
        f"{data.get('machine', 'a 2-CPU machine')}, {data.get('date', 'a date the file does not record')}{loads} "
        f"(`benchmarks/results/{name}.json`, `{command}`)."
    )
    return "\n".join(lines) + "\n"


def mode_label(mode: str) -> str:
    """How a benchmark mode is named in the tables."""
    return "fully_async (`max_staleness=2`)" if mode == "fully_async_s2" else mode


def cpu_lines(modes: dict[str, list[dict]]) -> list[str]:
    """A config's CPU table: per mode, the CPU seconds per training step of each part of the run (mean over its runs),
    their total, and the share of the machine's cores that total kept busy over the loop's wall time."""
    kinds = list(next(iter(modes.values()))[0]["cpu_seconds"])
    lines = [
        "| mode | " + " | ".join(kinds) + " | total | cores busy |",
        "|---|" + "---|" * (len(kinds) + 2),
    ]
    for mode, runs in modes.items():
        per_step = [statistics.mean(run["cpu_seconds"][kind] / run["steps"] for run in runs) for kind in kinds]
        busy = statistics.mean(sum(run["cpu_seconds"].values()) / run["loop_seconds"] for run in runs)
        cells = " | ".join(f"{seconds:.2f}" for seconds in per_step)
        lines.append(f"| {mode_label(mode)} | {cells} | {sum(per_step):.2f} | {busy:.2f} |")
    note = (
        "CPU seconds per training step by process, read from `/proc` around the training loop; cores busy: their"
        " total over the loop's wall time."
    )
    return [*lines, "", note, ""]


def render_quickstart_modes(data: dict) -> str:
    """benchmarks/quickstart_seeds.py --modes ...: per seed, held-out accuracy after the quickstart in each mode and
    each mode's gap to sync, then the verdict against the parity goal."""
    modes = list(data["modes"])
    by_seed: dict[int, dict[str, dict]] = {}
    for run in data["runs"]:
        by_seed.setdefault(run["seed"], {})[run["mode"]] = run
    header = " | ".join(f"{mode}: before -> after (s/step)" for mode in modes)
    others = [mode for mode in modes if mode != "sync"]
    lines = [
        f"| seed | {header} | " + " | ".join(f"{mode} − sync" for mode in others) + " |",
        "|---|" + "---|" * (len(modes) + len(others)),
    ]
    gaps = []
    for seed, runs in by_seed.items():
        cells = [
            f"{runs[m]['accuracy_before']:.3f} -> {runs[m]['accuracy_after']:.3f} ({runs[m]['mean_step_seconds']:.3f})"
            for m in modes
        ]
        differences = [runs[m]["accuracy_after"] - runs["sync"]["accuracy_after"] for m in others]
        gaps += [abs(d) for d in differences]
        lines.append(f"| {seed} | " + " | ".join(cells + [f"{d:+.3f}" for d in differences]) + " |")
    verdict = "on every seed" if max(gaps) <= data["parity"] else "not on every seed"
    load = data["load_average_1min"]
    lines += [
        "",
        f"Goal: held-out accuracy within {data['parity']} of sync on each seed; reached {verdict} (largest gap "
        f"{max(gaps):.3f}). Each seed's runs back to back, same warm start. Measured on {data['machine']}, "
        f"{data['date']}, 1-minute load average {load[0]:.1f} at the start and {load[1]:.1f} at the end "
        f"(`python benchmarks/quickstart_seeds.py --modes {' '.join(modes)}`, `benchmarks/results/quickstart_modes.json`).",
    ]
    return "\n".join(lines) + "\n"


def render_off_policy_corrections(data: dict) -> str:
    """benchmarks/off_policy_corrections.py: per correction, reward after each quarter of the steps and held-out
    accuracy (mean ± standard error), and the mismatch KL and clip/mask fractions the runs logged."""
    lines = [
        "| run | overrides | reward after 25 / 50 / 75 / 100 % of the steps | held-out | mismatch KL | tokens clipped / masked |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in data["summary"].items():
        overrides = ", ".join(f"`{o.split('off_policy_correction.', 1)[-1]}`" for o in data["corrections"][name])
        overrides = overrides or "(sync)"
        quarters = " / ".join(f"{mean:.3f} ± {error:.3f}" for mean, error in row["quarters"])
        kl = f"{row['mismatch_kl']:.4f}" if "mismatch_kl" in row else "–"
        labels = {"tis_clip_frac": "TIS-clipped", "token_mask_frac": "token-masked", "geo_mask_frac": "sequence-masked"}
        shares = [f"{label} {100 * row[key]:.2f} %" for key, label in labels.items() if key in row]
        accuracy = f"{row['accuracy'][0]:.3f} ± {row['accuracy'][1]:.3f}"
        lines.append(f"| {name} | {overrides} | {quarters} | {accuracy} | {kl} | {' / '.join(shares) or '–'} |")
    load = data["load_average_1min"]
    lines += [
        "",
        f"fully_async on the `{data['config']}` config with `max_staleness={data['max_staleness']}`, lr "
        f"{data['lr']}, {data['steps']} steps, {data['repeats']} runs each (mean ± standard error; reward: "
        f"{data['window']}-step trailing mean); sync is the on-policy reference. Measured on {data['machine']}, "
        f"{data['date']}, 1-minute load average {load[0]:.1f} at the start and {load[1]:.1f} at the end "
        "(`benchmarks/off_policy_corrections.py`, `benchmarks/results/off_policy_corrections.json`).",
    ]
    return "\n".join(lines) + "\n"


def render_async_timeline(data: dict) -> str:
    """scripts/plot_timeline.py --results: each lane's busy share of the drawn window, and the plot."""
    lines = ["| lane | busy |", "|---|---|"]
    lines += [f"| {lane} | {100 * share:.0f} % |" for lane, share in data["busy"].items()]
    low, high = data["window"]
    lines += [
        "",
        f"![timeline]({data['image']})",
        "",
        f"Seconds {low:.0f}-{high:.0f} of `{data['run']}`, from the run's own `timeline.jsonl` "
        f"(`trainer.record_timeline=true`; drawn by `scripts/plot_timeline.py`). Measured on {data['machine']}, "
        f"{data['date']}.",
    ]
    return "\n".join(lines) + "\n"
