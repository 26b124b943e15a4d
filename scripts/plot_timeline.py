"""Draw a run's timeline (`trainer.record_timeline=true` writes `<log_path>/timeline.jsonl`) as busy/idle bars.

    python scripts/plot_timeline.py /tmp/skyrl-logs/timeline.jsonl timeline.png [--window 30 60]

One row per lane: the trainer's driver phases, every policy/critic/ref rank's compute, every engine's decoding and
the engines' pauses for weight syncs; each row is labelled with its busy share of the window drawn.
"""

from __future__ import annotations

import argparse
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
    args = parser.parse_args()
    spans = read_timeline(args.timeline)
    if not spans:
        parser.error(f"{args.timeline} holds no spans (was trainer.record_timeline=true?)")
    origin = min(span.start for span in spans)
    low, high = args.window or (0.0, max(span.end for span in spans) - origin)
    for lane, share in busy_fractions(spans, origin + low, origin + high).items():
        print(f"{lane:>32}: {100 * share:5.1f}% busy")
    plot_timeline(spans, args.out, (low, high), args.title)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
