"""The measured-results blocks of the pages match what scripts/render_doc_results.py renders from the JSON files."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("render_doc_results", REPO / "scripts" / "render_doc_results.py")
renderer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(renderer)

SAMPLE = {
    "benchmark": "benchmarks/dynamic_sampling.py",
    "date": "2026-11-23",
    "machine": "2-core CPU",
    "grpo_final_accuracy": 0.5,
    "runs": [
        {
            "name": "grpo",
            "steps": 10,
            "sampled_groups": 320,
            "final_accuracy": 0.5,
            "groups_to_reach_grpo_final": 320,
            "curve": [[0, 0.2], [10, 0.5]],
        },
        {
            "name": "dapo",
            "steps": 10,
            "sampled_groups": 410,
            "final_accuracy": 0.4,
            "groups_to_reach_grpo_final": None,
            "curve": [],
        },
    ],
}


def _render(tmp_path, name: str, data: dict) -> str:
    """A page holding only the `<!-- results: name -->` block, rendered from `data` saved as `name`.json."""
    (tmp_path / f"{name}.json").write_text(json.dumps(data))
    return renderer.rendered_page(f"<!-- results: {name} -->\n<!-- /results -->\n", tmp_path)


def assert_all_in(text: str, *fragments: str) -> None:
    """Every fragment is in the rendered `text`; a failure names each one that is missing."""
    missing = [fragment for fragment in fragments if fragment not in text]
    assert not missing, f"missing from the rendered text: {missing}\n{text}"


def test_every_results_block_is_up_to_date():
    stale = [
        str(page.relative_to(REPO))
        for page in renderer.doc_pages()
        if renderer.rendered_page(page.read_text()) != page.read_text()
    ]
    assert not stale, f"results blocks differ from their JSON in {stale}; run python scripts/render_doc_results.py"


def test_renders_the_dynamic_sampling_shape(tmp_path):
    (tmp_path / "dynamic_sampling.json").write_text(json.dumps(SAMPLE))
    page = "before\n<!-- results: dynamic_sampling -->\nold numbers\n<!-- /results -->\nafter\n"
    text = renderer.rendered_page(page, tmp_path)
    assert "old numbers" not in text and text.startswith("before\n") and text.endswith("<!-- /results -->\nafter\n")
    assert_all_in(
        text,
        "| dapo | 10 | 410 | 0.400 | not reached |",
        "| grpo | 10 | 320 | 0.500 | 320 |",
        "Measured on 2-core CPU, 2026-11-23",
    )
    assert renderer.rendered_page(text, tmp_path) == text  # rendering is idempotent


def test_missing_results_file_renders_a_note(tmp_path):
    text = renderer.rendered_page("<!-- results: dynamic_sampling -->\n<!-- /results -->", tmp_path)
    assert "No measured results yet" in text and "benchmarks/results/dynamic_sampling.json" in text


def test_bad_results_file_names_the_missing_key(tmp_path):
    (tmp_path / "dynamic_sampling.json").write_text(json.dumps({"benchmark": "x"}))
    with pytest.raises(KeyError) as refused:  # a results file without `runs`
        renderer.rendered_page("<!-- results: dynamic_sampling -->\n<!-- /results -->", tmp_path)
    assert "dynamic_sampling.json" in str(refused.value) and "runs" in str(refused.value)


def test_block_for_a_benchmark_without_results_file_or_renderer_renders_a_note(tmp_path):
    text = renderer.rendered_page("<!-- results: future_bench -->\n<!-- /results -->", tmp_path)
    assert "No measured results yet" in text and "benchmarks/results/future_bench.json" in text


def test_results_file_without_a_renderer_is_refused(tmp_path):
    (tmp_path / "future_bench.json").write_text("{}")
    with pytest.raises(KeyError) as refused:  # refused, not shown as a note
        renderer.rendered_page("<!-- results: future_bench -->\n<!-- /results -->", tmp_path)
    assert "future_bench" in str(refused.value) and "no renderer" in str(refused.value)


def test_renders_the_minimal_grpo_shape(tmp_path):
    run = {
        "benchmark": "examples/minimal_grpo.py",
        "date": "2026-11-23",
        "machine": "2 CPUs, x86_64, torch 2.13.0+cpu",
        "settings": {"steps": 300, "prompts": 32, "group": 8, "lr": 2e-4, "eval_size": 200, "threads": 2},
        "accuracy_before": 0.25,
        "accuracy_after": 0.6,
        "evaluations": [[0, 0.25], [150, 0.5], [300, 0.6]],
        "seconds": 150.0,
    }
    text = _render(tmp_path, "minimal_grpo", run)
    assert_all_in(
        text,
        "| 300 | 32 x 8 | 0.0002 | 2 | 0.250 -> 0.600 (200 problems, greedy) | 150 s | 0.50 s |",
        "Held-out accuracy by step: 0: 0.250, 150: 0.500, 300: 0.600.",
        "Measured on 2 CPUs, x86_64, torch 2.13.0+cpu, 2026-11-23",
    )


def _vs_trl_run(seconds: float, completions: float, accuracy: float, peaks: dict, **extra) -> dict:
    return {
        "seconds_per_step": seconds,
        "completions_per_second": completions,
        "generated_tokens_per_second": completions * 4,
        "peak_rss_mb": peaks,
        "pss_mb_at_end": {"total": peaks["total"] / 2},
        "load_average_1min": {"before": 0.5, "after": 2.5},
        "accuracy_after": accuracy,
        **extra,
    }


VS_TRL_SAMPLE = {
    "benchmark": "vs_trl_long",
    "date": "2026-11-23",
    "machine": "2 CPUs, x86_64",
    "settings": {
        "steps": 300,
        "model": {"task": "binary", "difficulty": 6, "size": 7},
        "prompts_per_step": 4,
        "samples_per_prompt": 4,
        "max_new_tokens": 330,
        "learning_rate": 5e-5,
        "held_out_problems": 128,
    },
    "seeds": [
        {
            "seed": seed,
            "accuracy_before": 0.25,
            "runs": {
                "trl": _vs_trl_run(1.0, 16.0, 0.5 + seed / 10, {"trainer": 800.0, "total": 800.0}),
                "ours": _vs_trl_run(
                    0.5,
                    32.0,
                    0.6,
                    {"driver": 500.0, "policy_0": 700.0, "total": 1200.0},
                    auto_settings={"trainer.policy.fsdp.shard_layers": False},
                ),
            },
            "ratios": {"completions_per_second": 2.0, "peak_rss_total": 1.5},
        }
        for seed in (0, 1)
    ],
    "summary": {
        "seeds": 2,
        "completions_per_second_ratio": {"mean": 2.0, "standard_error": 0.0},
        "accuracy_after_difference": {"mean": 0.05, "standard_error": 0.05},
        "accuracy_gain": {"trl": {"mean": 0.3, "standard_error": 0.05}, "ours": {"mean": 0.35, "standard_error": 0.0}},
        "goal_ratio": 1.5,
        "ratio_goal_met": True,
        "accuracy_goal_met": True,
    },
}


def test_renders_the_vs_trl_shape(tmp_path):
    text = _render(tmp_path, "vs_trl_long", VS_TRL_SAMPLE)
    assert "| 0 | trl | 1.000 | 16.0 | 64 | 800 MB | 0.250 -> 0.500 |" in text
    assert "| 1 | ours | 0.500 | 32.0 | 128 | 1200 MB | 0.250 -> 0.600 |" in text
    assert (
        "Ours / TRL over 2 seed(s) (mean ± standard error): 2.00 ± 0.00x the completions per second (goal 1.5x: met)"
        in text
    )
    assert_all_in(
        text,
        "ours - TRL: +0.050 ± 0.050 (equal or better within one standard error",
        "peak memory, all processes: 1.5x TRL's.",
        "Peak RSS per process, MB (seed 0): trl: trainer 800; ours: driver 500, policy_0 700.",
        "totals trl 400 MB; ours 600 MB.",
        "Our side's `auto` settings: `trainer.policy.fsdp.shard_layers=False`.",
        "300 steps per seed and side, 128 held-out problems (binary difficulty 6, model size 7)",
        "1-minute load average 0.5-2.5 around the runs",
        "(`benchmarks/results/vs_trl_long.json`, `benchmarks/vs_trl.py`)",
    )
    assert renderer.rendered_page(text, tmp_path) == text


def test_the_vs_trl_summary_says_when_a_goal_is_missed(tmp_path):
    data = json.loads(json.dumps(VS_TRL_SAMPLE))
    data["summary"].update(ratio_goal_met=False, accuracy_goal_met=False)
    text = _render(tmp_path, "vs_trl_long", data)
    assert "(goal 1.5x: not met)" in text
    assert "+0.050 ± 0.050 (worse;" in text


STEP_BREAKDOWN = {
    "benchmark": "step_breakdown",
    "rows": [
        {"part": "generate", "seconds": 1.0, "share": 0.25},
        {"part": "step", "seconds": 4.0, "share": 1.0},
        {"part": "outside model compute", "seconds": 0.2, "share": 0.05},
    ],
    "steps": 20,
    "warmup_steps": 3,
    "overrides": [],
    "load_average_1min": {"before": 0.5, "after": 1.5},
    "date": "2026-11-23",
    "machine": "2 CPUs, x86_64",
}


def test_renders_the_step_breakdown_of_either_configuration(tmp_path):
    (tmp_path / "step_breakdown.json").write_text(json.dumps(STEP_BREAKDOWN))
    (tmp_path / "step_breakdown_long.json").write_text(json.dumps({**STEP_BREAKDOWN, "configuration": "long"}))
    page = "<!-- results: step_breakdown -->\n<!-- /results -->\n<!-- results: step_breakdown_long -->\n<!-- /results -->\n"
    text = renderer.rendered_page(page, tmp_path)
    assert_all_in(
        text,
        "| **outside model compute** | 0.200 | 5.0% |",
        "steps 4-20 of the quickstart configuration. Load average 0.5 before, 1.5 after.",
        "(`benchmarks/results/step_breakdown.json`, `benchmarks/step_breakdown.py`)",
        "steps 4-20 of the long-response shape (default keys).",
        "(`benchmarks/results/step_breakdown_long.json`, `benchmarks/step_breakdown.py`)",
    )


QUICKSTART = {
    "benchmark": "benchmarks/quickstart_run.py",
    "date": "2026-11-23",
    "machine": "2 CPUs, x86_64",
    "arguments": [],
    "model": {
        "num_parameters": 410752,
        "warm_start_steps": 270,
        "warm_start_greedy_accuracy": 0.26171875,
        "held_out_problems": 256,
    },
    "steps": 450,
    "accuracy_before": 0.25,
    "accuracy_after": 0.6,
    "eval_curve": [[0, 0.25], [450, 0.6]],
    "health_alert_steps": 0,
    "wall_seconds": 480.0,
    "mean_step_seconds": 0.9,
}


def test_renders_the_quickstart_seeds(tmp_path):
    run = {key: QUICKSTART[key] for key in ("accuracy_before", "accuracy_after", "wall_seconds", "mean_step_seconds")}
    seeds = {
        "date": "2026-11-25",
        "machine": "2 CPUs, x86_64",
        "overrides": [],
        "goal_gain": 0.45,
        "runs": [dict(run, seed=0), dict(run, seed=1, accuracy_after=0.5)],
    }
    text = _render(tmp_path, "quickstart_seeds", seeds)
    assert_all_in(
        text,
        "| 0 | 0.250 -> 0.600 | +0.350 | 8.0 min | 0.900 |",
        "| 1 | 0.250 -> 0.500 | +0.250 | 8.0 min | 0.900 |",
        "Goal: a gain of at least +0.45 on each seed; not every seed reaches it.",
    )


def test_renders_the_quickstart_run(tmp_path):
    text = _render(tmp_path, "quickstart", QUICKSTART)
    assert_all_in(
        text,
        "| embedded model | 0.41 M parameters; warm start: 270 steps, greedy accuracy 0.262 on 256 held-out",
        "| eval accuracy (greedy pass@1) | 0.250 before, 0.600 after |",
        "| eval curve (step: accuracy) | 0: 0.250, 450: 0.600 |",
        "| training steps | 450, of which 0 raised a health alert |",
        "| wall-clock time | 8.0 min for `run_quickstart.py` (Ray start-up, data, training",
        "not `scripts/setup.sh`'s install); 0.90 s per step on average |",
        "Measured on 2 CPUs, x86_64, 2026-11-23, by `python benchmarks/quickstart_run.py` (the quickstart's",
    )
    text = _render(tmp_path, "quickstart", dict(QUICKSTART, fresh_clone=True))
    assert "| wall-clock time | 8.0 min from `git clone` to the last line of `bash scripts/quickstart.sh`" in text
    assert "by `python benchmarks/quickstart_run.py --fresh-clone` (the quickstart's default settings" in text
    shortened = dict(QUICKSTART, arguments=["trainer.max_training_steps=2"])
    text = _render(tmp_path, "quickstart", shortened)
    assert "`python benchmarks/quickstart_run.py trainer.max_training_steps=2` (a shortened run" in text
    loaded = dict(QUICKSTART, load_average_1min=[3.19, 2.5])
    text = _render(tmp_path, "quickstart", loaded)
    assert "one run; 1-minute load average 3.2 at the start and 2.5 at the end;" in text


def test_renders_the_thread_counts_shape(tmp_path):
    data = {
        "benchmark": "thread_counts",
        "date": "2026-11-23",
        "machine": "2 CPUs, x86_64, 3.11.7",
        "steps": 12,
        "warmup_steps": 3,
        "rows": [{"setting": "defaults", "overrides": [], "idle": 1.0, "busy": 1.5, "busy_over_idle": 1.5}],
    }
    text = _render(tmp_path, "thread_counts", data)
    assert "| defaults | 1.000 | 1.500 | 1.50 |" in text
    assert "steps 4-12" in text and "Measured on 2 CPUs, x86_64, 3.11.7, 2026-11-23" in text


def _async_run(mode: str, speed: float, accuracy: float) -> dict:
    curve = [{"samples": 128 * (i + 1), "seconds": float(i), "reward": 0.1 * (i + 1)} for i in range(4)]
    return {"config": "latency-bound", "mode": mode, "samples_per_s": speed, "accuracy": accuracy, "curve": curve}


def test_renders_any_async_vs_sync_file_with_ratios_to_sync(tmp_path):
    runs = [_async_run("sync", 10.0, 0.3), _async_run("fully_async", 25.0, 0.3), _async_run("sync", 12.0, 0.5)]
    data = {"steps": 4, "repeats": 2, "window": 1, "machine": "2 CPUs", "date": "2026-11-29", "runs": runs}
    data.update(arguments=["--steps", "4"], load_average_1min=[1.0, 2.0], delay_ms="200-1000")
    (tmp_path / "async_vs_sync_new_config.json").write_text(json.dumps(data))
    page = "<!-- results: async_vs_sync_new_config -->\n<!-- /results -->\n"
    text = renderer.rendered_page(page, tmp_path)
    assert "| sync | 11.0 | 1.00x | 0.100±0.000 / 0.200±0.000 / 0.300±0.000 / 0.400±0.000 | 0.400±0.100 |" in text
    assert "| fully_async | 25.0 | 2.27x | 0.100 / 0.200 / 0.300 / 0.400 | 0.300 |" in text
    assert (
        "load average 1.0 at the start and 2.0 at the end (`benchmarks/results/async_vs_sync_new_config.json`, " in text
    )
    assert "`python benchmarks/async_vs_sync.py --steps 4`)." in text
    for key in ("arguments", "load_average_1min", "repeats", "machine", "date"):  # older files lack these
        del data[key]
    (tmp_path / "async_vs_sync_new_config.json").write_text(json.dumps(data))
    text = renderer.rendered_page(page, tmp_path)
    assert "4 steps, one run of each mode, API wait 200-1000 ms. Measured on a 2-CPU machine, a date" in text


def test_renders_the_off_policy_corrections_and_the_timeline(tmp_path):
    row = {"quarters": [[0.1, 0.01]] * 4, "accuracy": [0.5, 0.02]}
    corrections = {
        "date": "2026-11-29",
        "machine": "2 CPUs",
        "load_average_1min": [1.0, 2.0],
        "config": "plain",
        "max_staleness": 2,
        "lr": "2e-4",
        "steps": 100,
        "repeats": 2,
        "window": 10,
        "corrections": {"sync": [], "tis": ["trainer.algorithm.off_policy_correction.tis_ratio_type=token"]},
        "summary": {"sync": row, "tis": dict(row, mismatch_kl=0.00123, tis_clip_frac=0.005)},
    }
    (tmp_path / "off_policy_corrections.json").write_text(json.dumps(corrections))
    timeline = {"busy": {"trainer": 0.5, "engine 0": 0.904}, "window": [0, 30.5], "image": "x.png", "run": "a run"}
    timeline.update(machine="2 CPUs", date="2026-11-29")
    (tmp_path / "async_timeline_latency_bound.json").write_text(json.dumps(timeline))
    page = "<!-- results: off_policy_corrections -->\n<!-- /results -->\n"
    text = renderer.rendered_page(
        page + page.replace("off_policy_corrections", "async_timeline_latency_bound"), tmp_path
    )
    assert (
        "| sync | (sync) | 0.100 ± 0.010 / 0.100 ± 0.010 / 0.100 ± 0.010 / 0.100 ± 0.010 | 0.500 ± 0.020 | – | – |"
        in text
    )
    assert "| tis | `tis_ratio_type=token` | " in text and "| 0.0012 | TIS-clipped 0.50 % |" in text
    assert "| engine 0 | 90 % |" in text and "![timeline](x.png)" in text and "Seconds 0-30 of `a run`" in text


def test_renders_the_quickstart_modes_with_each_seeds_gap_to_sync(tmp_path):
    run = {key: QUICKSTART[key] for key in ("accuracy_before", "accuracy_after", "wall_seconds", "mean_step_seconds")}
    data = {
        "date": "2026-11-29",
        "machine": "2 CPUs",
        "load_average_1min": [1.0, 2.0],
        "parity": 0.03,
        "modes": {"sync": [], "fully_async": ["trainer.mode=fully_async"]},
        "runs": [
            dict(run, seed=0, mode="sync"),
            dict(run, seed=0, mode="fully_async", accuracy_after=0.55),
            dict(run, seed=1, mode="sync"),
            dict(run, seed=1, mode="fully_async", accuracy_after=0.62),
        ],
    }
    text = _render(tmp_path, "quickstart_modes", data)
    assert_all_in(
        text,
        "| 0 | 0.250 -> 0.600 (0.900) | 0.250 -> 0.550 (0.900) | -0.050 |",
        "| 1 | 0.250 -> 0.600 (0.900) | 0.250 -> 0.620 (0.900) | +0.020 |",
        "reached not on every seed (largest gap 0.050)",
    )
