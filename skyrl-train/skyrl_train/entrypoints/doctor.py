"""`python -m skyrl_train.entrypoints.doctor`: what this machine offers SkyRL, and a short real training smoke step.

Reports Python, OS, CPUs and memory; the versions of skyrl_gym, skyrl_train, torch (and its build), Ray,
transformers, peft, vLLM, SGLang and megatron-core; the CUDA devices; which inference-engine, training-strategy and
weight-sync backends work here and, for each that does not, why (see `doctor_probes`). Then, unless `--no-smoke`, a
smoke step (about 10 s on 2 cores; see `doctor_smoke`): a tiny model, one real generate with the `hf` engine and one
policy forward_backward + optim_step through the real worker classes, on a local Ray cluster (or in this process
with `--no-ray`), each part timed and marked PASS/FAIL.

    python -m skyrl_train.entrypoints.doctor              # human-readable report + smoke step
    python -m skyrl_train.entrypoints.doctor --json       # the same as one JSON object on stdout
    python -m skyrl_train.entrypoints.doctor --no-smoke   # only the report (a few seconds)

Exit status: 0, or 1 when the smoke step failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Optional

from skyrl_train.entrypoints import doctor_probes


def build_report(smoke: bool, use_ray: bool = True, model_dir: Optional[str] = None, progress: bool = True) -> dict:
    """The whole report as plain data (what `--json` prints)."""
    torch_info = doctor_probes.torch_info()
    report: dict[str, Any] = {
        "system": doctor_probes.system_info(),
        "packages": doctor_probes.package_versions(),
        "torch": {key: value for key, value in torch_info.items() if key != "cuda"},
        "cuda": torch_info["cuda"],
        "ray": doctor_probes.ray_info(),
        "backends": doctor_probes.backend_report(),
    }
    if smoke:
        from skyrl_train.entrypoints.doctor_smoke import run_smoke

        report["smoke"] = run_smoke(use_ray=use_ray, model_dir=model_dir, show_progress=progress)
    else:
        report["smoke"] = {"ran": False, "passed": None, "reason": "skipped (--no-smoke)"}
    return report


def format_report(report: dict) -> str:
    """The report as aligned text for a terminal."""
    system, torch_info, cuda = report["system"], report["torch"], report["cuda"]
    memory = system["memory_total_gb"]
    lines = [
        "SkyRL doctor",
        f"  python       {system['python']} ({system['python_executable']})",
        f"  os           {system['os']}",
        f"  cpus         {system['cpu_count']} ({system['usable_cpus']} usable by this process)",
        f"  memory       {memory} GB total, {system['memory_available_gb']} GB available",
        "",
        "packages",
    ]
    for module, entry in report["packages"].items():
        version = entry["version"] or f"not installed ({entry.get('error', '')})"
        if module == "torch" and entry["version"]:
            version += f" (build: {torch_info['build']})"
        where = f"  [{entry['path']}]" if entry.get("path") else ""
        lines.append(f"  {module:<14} {version}{where}")
    lines += ["", "devices"]
    if cuda["available"]:
        for device in cuda["devices"]:
            lines.append(f"  cuda:{device['index']}  {device['name']}, {device['memory_gb']} GB")
    else:
        lines.append(f"  cuda         none: {cuda['reason']}")
    lines += ["", f"ray            {report['ray']['version']}, cluster: {report['ray']['address']}"]
    titles = {
        "engine": "inference engines (generator.inference_engine.backend)",
        "strategy": "training strategies (trainer.strategy)",
        "weight_sync": "weight sync (generator.inference_engine.weight_sync_backend)",
    }
    for kind, statuses in report["backends"].items():
        lines += ["", titles[kind]]
        for status in statuses:
            if status["available"]:
                lines.append(f"  {status['name']:<16} available")
            else:
                lines.append(f"  {status['name']:<16} unavailable: {status['reasons'][0]}")
                lines += [f"  {'':<16}   also: {reason}" for reason in status["reasons"][1:]]
    smoke = report["smoke"]
    lines += [""]
    if not smoke["ran"]:
        lines.append(f"smoke step     {smoke['reason']}")
    else:
        verdict = "PASS" if smoke["passed"] else "FAIL"
        lines.append(f"smoke step     {verdict} in {smoke['seconds']:.1f} s ({smoke['mode']}, {smoke['device']})")
        for part in smoke["parts"]:
            lines.append(f"  {part['name']:<10} {part['status']:<4} {part['seconds']:6.2f} s  {part['detail']}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    """Command-line entry; returns the exit status (1 when the smoke step failed)."""
    parser = argparse.ArgumentParser(
        prog="python -m skyrl_train.entrypoints.doctor", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object on stdout")
    parser.add_argument("--no-smoke", action="store_true", help="skip the smoke step (report only)")
    parser.add_argument("--no-ray", action="store_true", help="run the smoke step in this process instead of on Ray")
    parser.add_argument(
        "--model",
        metavar="DIR",
        help="smoke-test this Hugging Face model folder instead of a freshly built tiny model (slower for big ones)",
    )
    args = parser.parse_args(argv)
    if args.no_smoke and (args.no_ray or args.model):
        parser.error("--no-ray and --model choose how the smoke step runs; they cannot be used with --no-smoke")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    report = build_report(not args.no_smoke, use_ray=not args.no_ray, model_dir=args.model, progress=True)
    print(json.dumps(report, indent=2) if args.json else format_report(report), flush=True)
    return 1 if report["smoke"]["ran"] and not report["smoke"]["passed"] else 0


if __name__ == "__main__":
    sys.exit(main())
