"""Draw a run's timeline (`trainer.record_timeline=true` writes `<log_path>/timeline.jsonl`) as busy/idle bars.

    python scripts/plot_timeline.py /tmp/skyrl-logs/timeline.jsonl timeline.png [--window 30 60]
        [--results benchmarks/results/async_timeline_<name>.json --run "what ran"]

One row per lane: the trainer's driver phases, every policy/critic/ref rank's compute, every engine's decoding and
the engines' pauses for weight syncs; each row is labelled with its busy share of the window drawn. `--results`
also writes those shares as JSON for `scripts/render_doc_results.py` (an `async_timeline*` block links the PNG).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

from skyrl_train.utils.timeline import busy_fractions, plot_timeline, read_timeline


def main() -> int:
    """Read the file, print each lane's busy share, write the PNG."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("timeline", type=Path, help="a timeline.jsonl file")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--window", type=float, nargs=2, metavar=("FROM", "TO"), help="seconds since the first span")
    parser.add_argument("--title", default="Timeline")
    parser.add_argument("--results", type=Path, default=None, help="also write the busy shares here (JSON)")
    parser.add_argument("--run", default="a run", help="what ran, for the results file")
    args = parser.parse_args()
    spans = read_timeline(args.timeline)
    if not spans:
        parser.error(f"{args.timeline} holds no spans (was trainer.record_timeline=true?)")
    origin = min(span.start for span in spans)
    low, high = args.window or (0.0, max(span.end for span in spans) - origin)
    busy = busy_fractions(spans, origin + low, origin + high)
    for lane, share in busy.items():
        print(f"{lane:>32}: {100 * share:5.1f}% busy")
    plot_timeline(spans, args.out, (low, high), args.title)
    print(f"wrote {args.out}")
    if args.results is not None:
        record = {
            "busy": {lane: round(share, 4) for lane, share in busy.items()},
            "window": [low, high],
            "image": os.path.relpath(args.out.resolve(), (Path(__file__).resolve().parents[1] / "docs")),
            "run": args.run,
            "date": datetime.date.today().isoformat(),
            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}",
        }
        args.results.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
