"""Write rows for SkyRL's `multiply` example environment: `train.parquet` and `validation.parquet`.

    python examples/multiply/multiply_dataset.py --output_dir ~/data/multiply [--num_digits 2] [--train_size 10000]
        [--test_size 200] [--seed 0]

The same options and files as SkyRL's script of this name, so its `run_multiply.sh` finds its data. Each row asks
for the product of two `num_digits`-digit numbers, with a system prompt asking for the answer in `\\boxed{}`.
"""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Sequence
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq

SYSTEM_PROMPT = (
    "You are a helpful assistant that solves multiplication problems. Please solve the given multiplication problem"
    " step by step. Put your final answer in \\boxed{answer} format."
)


def make_rows(count: int, num_digits: int, split: str, rng: random.Random) -> list[dict[str, Any]]:
    """`count` rows of `a * b` with `num_digits`-digit operands (env `multiply`, the product as ground truth)."""
    if num_digits < 1:
        raise ValueError(f"--num_digits must be >= 1, got {num_digits}")
    low, high = 10 ** (num_digits - 1), 10**num_digits - 1
    rows = []
    for _ in range(count):
        first, second = rng.randint(low, high), rng.randint(low, high)
        rows.append(
            {
                "data_source": "synthetic_multiply",
                "prompt": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": f"{first} * {second}"},
                ],
                "env_class": "multiply",
                "reward_spec": {"method": "rule", "ground_truth": str(first * second)},
                "extra_info": {"num_digits": num_digits, "split": split},
            }
        )
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Write the two splits; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--output_dir", default="~/data/multiply")
    parser.add_argument("--num_digits", type=int, default=2, help="digits of each operand")
    parser.add_argument("--train_size", type=int, default=10000, help="rows of train.parquet")
    parser.add_argument("--test_size", type=int, default=200, help="rows of validation.parquet")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random operands")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    out = os.path.expanduser(args.output_dir)
    os.makedirs(out, exist_ok=True)
    for name, count, split in (("train", args.train_size, "train"), ("validation", args.test_size, "test")):
        path = os.path.join(out, f"{name}.parquet")
        pq.write_table(pa.Table.from_pylist(make_rows(count, args.num_digits, split, rng)), path)
        print(f"wrote {count} rows to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
