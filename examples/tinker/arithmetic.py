"""The embedded model's task for the Tinker loops: 2-digit addition prompts, rewards, and held-out accuracy measured
through a tinker SamplingClient. Shared by `sl_loop.py` and `rl_loop.py`."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import tinker
from tinker import types

from skyrl_gym.envs.synthetic.generate import generate_splits
from skyrl_train.recipes.warm_start import score_response

BASE_MODEL = "skyrl/embedded-arithmetic"
"""The name `skyrl-tx serve` gives the embedded quickstart model."""
MAX_TOKENS = 8  # a 2-digit sum is at most 3 characters plus the end-of-turn token


def load_problems(eval_size: int = 256) -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows): the warm start's task, difficulty and seed, so held-out rows were never trained on."""
    splits = generate_splits("addition", train_size=8000, test_size=eval_size, difficulty=2, seed=0)
    return splits["train"], splits["test"]


def prompt_tokens(tokenizer: Any, row: dict) -> list[int]:
    """The chat-templated prompt, ending with the assistant header the model answers after."""
    text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


def reward(row: dict, answer: str) -> float:
    """1.0 for the exact sum, else 0.0 (the `addition` env of skyrl-gym decides, as in the warm start)."""
    return score_response(row, answer)[0]


def held_out_accuracy(sampler: tinker.SamplingClient, tokenizer: Any, rows: list[dict]) -> float:
    """Fraction of held-out problems whose greedy answer is right (all requests in flight at once)."""
    greedy = types.SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0)
    futures = [sampler.sample(types.ModelInput.from_ints(prompt_tokens(tokenizer, row)), 1, greedy) for row in rows]
    answers = [tokenizer.decode(f.result().sequences[0].tokens, skip_special_tokens=True) for f in futures]
    return sum(reward(row, answer) for row, answer in zip(rows, answers)) / len(rows)


def add_shared_arguments(parser: argparse.ArgumentParser) -> None:
    """The options both loops take: which server (`--base-url`, `--api-key`), the held-out size and the seed."""
    parser.add_argument("--base-url", default=None, help="a running server (default: TINKER_BASE_URL, else start one)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("TINKER_API_KEY", "tml-local"),
        help="X-API-Key (default $TINKER_API_KEY); a server this script starts accepts it",
    )
    parser.add_argument("--eval-size", type=int, default=256, help="held-out problems, at most 256")
    parser.add_argument("--seed", type=int, default=0)


@contextlib.contextmanager
def server_url(base_url: Optional[str], api_key: str) -> Iterator[str]:
    """`base_url`, or `TINKER_BASE_URL`, or a `skyrl-tx serve` started for this run in a temporary folder (accepting
    `api_key` only)."""
    url = base_url or os.environ.get("TINKER_BASE_URL")
    if url:
        yield url
        return
    from skyrl_tx.local_server import LocalServer

    with tempfile.TemporaryDirectory(prefix="skyrl-tx-") as folder:
        server = LocalServer(Path(folder), api_keys=(api_key,))
        print(f"starting skyrl-tx serve on {server.url} (data in {folder})", flush=True)
        server.start()
        try:
            yield server.url
        finally:
            server.stop()
