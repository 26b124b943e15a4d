"""Benchmark: resident memory of repeated bfloat16 training passes on CPU, and what bounds its growth.

A policy rank of the long shape (`shapes.LONG`: 21 M parameters, responses of 95-330 tokens) grows through a
bfloat16 run on CPU (docs/performance.md, "Long responses"). This script repeats that rank's work in one process per
setting: a packed forward and backward (`models.packing`, one torch thread) of the long shape's model, freshly
initialised (memory does not depend on what the weights learned), over 8 rows of random tokens with a 20-48 token
prompt and a 95-330 token response each (a new packed length almost every pass, as in a run), and reads the
process's resident set (`VmRSS`) every 10 passes. Settings:

- `bf16`: as the workers ran before packed lengths were bucketed;
- `bf16, bucketed`: the packed length and the LM head's positions rounded up by `bucket_length` (the default now);
- `bf16, malloc_trim`: `bf16` plus glibc's `malloc_trim(0)` after every pass (freed heap returned to the kernel);
- `float32`: the same passes in float32.

Each setting runs side by side with a `bf16` process (one core each, the same load), so its seconds compare with that
`bf16`'s; the table gives each setting's resident MB after 10 passes and at the end, the growth between, and its
seconds over its own pair's `bf16`.

    python benchmarks/bf16_cpu_memory.py [--passes 80] [--out DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

SETTINGS = {
    "bf16": {"dtype": "bfloat16", "bucket": False, "trim": False},
    "bf16, bucketed": {"dtype": "bfloat16", "bucket": True, "trim": False},
    "bf16, malloc_trim": {"dtype": "bfloat16", "bucket": False, "trim": True},
    "float32": {"dtype": "float32", "bucket": False, "trim": False},
}
PAIRS = [("bf16", "bf16, bucketed"), ("bf16", "bf16, malloc_trim"), ("bf16", "float32")]
"""Each setting runs side by side with `bf16` (which so runs once per pair; the table's `bf16` row is the first)."""
READ_EVERY = 10


def run_setting(name: str, passes: int) -> dict:
    """The passes of one setting in this process: resident MB every `READ_EVERY` passes and the seconds taken."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from shapes import LONG

    from skyrl_train.models.packing import enable_packed_attention, pack_rows, packed_response_logprobs
    from skyrl_train.models.tiny import build_tiny_model
    from skyrl_train.utils.memory import MIB, read_rss

    setting = SETTINGS[name]
    torch.set_num_threads(1)
    model = build_tiny_model(LONG.model.model_spec, seed=0).to(getattr(torch, setting["dtype"]))
    enable_packed_attention(model)
    trim = ctypes.CDLL("libc.so.6").malloc_trim if setting["trim"] else None
    rng = random.Random(0)
    torch.manual_seed(0)
    rows, prompt_width = 8, 48
    resident: list[float] = []
    started = time.perf_counter()
    for index in range(1, passes + 1):
        responses = [rng.randint(95, 330) for _ in range(rows)]
        width = prompt_width + max(responses)
        input_ids = torch.zeros(rows, width, dtype=torch.long)
        mask = torch.zeros(rows, width, dtype=torch.long)
        for row, response in enumerate(responses):
            prompt = rng.randint(20, prompt_width)
            span = slice(prompt_width - prompt, prompt_width + response)
            mask[row, span] = 1
            input_ids[row, span] = torch.randint(5, 60, (prompt + response,))
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        packed = pack_rows(input_ids, mask, positions, prompt_width, bucket_length=setting["bucket"])
        logprobs, _ = packed_response_logprobs(model, packed)
        logprobs.sum().backward()
        model.zero_grad(set_to_none=True)
        del logprobs, packed
        if trim is not None:
            trim(0)
        if index % READ_EVERY == 0:
            resident.append(read_rss()["rss"] / MIB)
    return {"setting": name, "seconds": time.perf_counter() - started, "rss_mb": resident}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=80)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--setting", choices=sorted(SETTINGS), help=argparse.SUPPRESS)  # one setting's process
    args = parser.parse_args()
    if args.passes < 2 * READ_EVERY:
        parser.error(f"--passes must be >= {2 * READ_EVERY} (resident memory is read every {READ_EVERY} passes)")
    if args.setting:
        print(json.dumps(run_setting(args.setting, args.passes)))
        return 0
    if not platform.libc_ver()[0] == "glibc":
        raise SystemExit("bf16_cpu_memory.py needs glibc (malloc_trim); this is not a glibc system")
    pairs = []
    for pair in PAIRS:
        print(f"bf16_cpu_memory: {' and '.join(pair)}, {args.passes} passes each, side by side", flush=True)
        command = [sys.executable, __file__, "--passes", str(args.passes), "--setting"]
        processes = [subprocess.Popen([*command, name], stdout=subprocess.PIPE, text=True) for name in pair]
        results = []
        for name, process in zip(pair, processes):
            out, _ = process.communicate()
            if process.returncode != 0:
                raise SystemExit(f"bf16_cpu_memory: setting {name!r} failed (exit {process.returncode})")
            results.append(json.loads(out.strip().splitlines()[-1]))
        pairs.append(results)
    print(
        f"\n| setting | resident MB after {READ_EVERY} passes | after {args.passes} | growth | seconds | vs bf16 beside it |"
    )
    print("|---|---|---|---|---|---|")
    rows = [(pairs[0][0], pairs[0][0])] + [(baseline, result) for baseline, result in pairs]
    for baseline, result in rows:
        start, end = result["rss_mb"][0], result["rss_mb"][-1]
        ratio = result["seconds"] / baseline["seconds"]
        print(
            f"| {result['setting']} | {start:.0f} | {end:.0f} | {end - start:+.0f} | {result['seconds']:.0f} "
            f"| {ratio:.2f}x |"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": "bf16_cpu_memory",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "passes": args.passes,
        "pairs": PAIRS,
        "results": pairs,
    }
    (out / "bf16_cpu_memory.json").write_text(json.dumps(record, indent=1))
    print(f"\nwritten: {out / 'bf16_cpu_memory.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
