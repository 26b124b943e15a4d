"""Renderers of the project's own engineering results (a refactor's same numbers and speed, upstream scripts that
run here), used by scripts/render_doc_results.py."""

from results_format import with_note


def render_same_numbers(data: dict) -> str:
    """benchmarks/same_numbers.py: how many steps of two seeded quickstart runs logged identical metrics, and their
    held-out accuracy curves."""
    labels = data["labels"]
    lines = [f"| | {labels[0]} | {labels[1]} |", "|---|---|---|"]
    for (step, before), (_, after) in zip(*data["eval_curves"]):
        lines.append(f"| held-out accuracy at step {step} | {before:.3f} | {after:.3f} |")
    compared = ", ".join(f"`{name}`" for name in data["compared_metrics"])
    curves = "identical" if data["eval_curves_identical"] else "different"
    return with_note(
        lines,
        f"{data['steps_identical']} of {data['steps']} steps logged identical {compared}; the eval curves are "
        f"{curves}. Measured on {data['machine'][0]}, {data['date']} "
        "(`benchmarks/results/redesign_same_numbers.json`, `benchmarks/same_numbers.py`).",
    )


def render_upstream_scripts(data: dict) -> str:
    """scripts/count_upstream_scripts.py --summary: how many of upstream SkyRL's run scripts pass `--dry-run` here,
    per layout, and the features that stop the others (all refused by name)."""
    lines = ["| upstream layout (commit) | scripts | pass `--dry-run` | refused by name | other failures |"]
    lines.append("|---|---|---|---|---|")
    for name, layout in data["layouts"].items():
        lines.append(
            f"| {name} ({layout['commit']}) | {layout['scripts']} | {layout['passed']} | {layout['refused_by_name']} "
            f"| {layout['other_failures']} |"
        )
    lines += ["", "| layout | feature refused here | scripts it stops | scripts only it stops |", "|---|---|---|---|"]
    for name, layout in data["layouts"].items():
        for blocker in layout["blockers"]:
            feature = blocker["feature"].replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            lines.append(f"| {name} | {feature} | {blocker['scripts']} | {blocker['alone']} |")
    return with_note(
        lines,
        f"Counted {data['date']} with `python scripts/count_upstream_scripts.py <SkyRL clone> --in-process --summary "
        "benchmarks/results/upstream_scripts.json`: each script as upstream ships it, with only its data and model "
        "paths pointed at local folders (`benchmarks/results/upstream_scripts.json`).",
    )


def render_redesign_speed(data: dict) -> str:
    """benchmarks/redesign_speed.py: each figure's median (and range) over the rounds in both checkouts, and the
    ratio of the medians, after / before."""
    before, after = data["labels"]

    def spread(label: str, figure: str, median: float) -> str:
        bench, key = figure.split(":")
        values = [measured[label][bench][key] for measured in data["rounds"]]
        return f"{median:.4g} ({min(values):.4g}-{max(values):.4g})"

    lines = [f"| figure | {before}: median (range) | {after}: median (range) | after / before |", "|---|---|---|---|"]
    for row in data["table"]:
        figure = row["figure"]
        cells = [spread(before, figure, row[before]), spread(after, figure, row[after])]
        lines.append(f"| {figure} | {cells[0]} | {cells[1]} | {row['after_over_before']:.3f} |")
    load = data["load_average_1min"]
    return with_note(
        lines,
        f"{len(data['rounds'])} rounds, the two checkouts alternating (step_breakdown: {data['steps']} steps, seconds "
        f"per step; async_vs_sync: the {data['async_config']} config, {data['async_steps']} steps per mode, samples/s "
        f"of sync and each async mode's ratio to it). Measured on {data['machine']}, {data['date']}, 1-minute load "
        f"average {load['before']:.1f} at the start and {load['after']:.1f} at the end "
        "(`benchmarks/results/redesign_speed.json`, `benchmarks/redesign_speed.py`).",
    )
