"""The embedded model's task for the Tinker loops: 2-digit addition prompts, rewards, and held-out accuracy measured
through a tinker SamplingClient; plus the plumbing both loops share (options, the server and its client). Shared by
`sl_loop.py` and `rl_loop.py`."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import random
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


def loop_parser(description: str, steps: int) -> argparse.ArgumentParser:
    """The options both loops take: which server (`--base-url`, `--api-key`), the held-out size, the seed, the run
    length (`--steps`, default `steps`) and the LoRA rank; each loop adds its own batch and optimiser options."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default=None, help="a running server (default: TINKER_BASE_URL, else start one)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("TINKER_API_KEY", "tml-local"),
        help="X-API-Key (default $TINKER_API_KEY); a server this script starts accepts it",
    )
    parser.add_argument("--eval-size", type=int, default=256, help="held-out problems, at most 256")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank")
    return parser


def parse_checked(
    parser: argparse.ArgumentParser, argv: Optional[list[str]], positive: list[str]
) -> argparse.Namespace:
    """Parse `argv`; exit with a usage error unless every option in `positive` is >= 1 and `--eval-size` is in
    [1, 256] (the task has 256 held-out problems)."""
    args = parser.parse_args(argv)
    if min(getattr(args, name) for name in positive) < 1 or not 1 <= args.eval_size <= 256:
        flags = [f"--{name}" for name in positive]
        parser.error(f"{', '.join(flags[:-1])} and {flags[-1]} must be >= 1 and --eval-size in [1, 256]")
    return args


@dataclasses.dataclass
class LoopRun:
    """What a loop trains with: the service session, its LoRA training client and tokenizer, the train and held-out
    rows, and the seeded generator that draws the batches."""

    service: tinker.ServiceClient
    training: tinker.TrainingClient
    tokenizer: Any
    train_rows: list[dict]
    eval_rows: list[dict]
    rng: random.Random

    def accuracy(self, sampler: tinker.SamplingClient) -> float:
        """Held-out accuracy of `sampler` (see `held_out_accuracy`)."""
        return held_out_accuracy(sampler, self.tokenizer, self.eval_rows)

    def starting_accuracy(self) -> tuple[tinker.SamplingClient, float]:
        """(a sampler on the untrained weights, its held-out accuracy), printed as step 0."""
        sampler = self.training.save_weights_and_get_sampling_client().result()
        before = self.accuracy(sampler)
        print(f"step 0: held-out accuracy {before:.3f} on {len(self.eval_rows)} problems", flush=True)
        return sampler, before


@contextlib.contextmanager
def lora_run(args: argparse.Namespace, **lora_options: Any) -> Iterator[LoopRun]:
    """A LoRA training client (`--rank`, `--seed`, plus `lora_options`) on the server `--base-url` names, or on one
    started for the run (see `server_url`); the session is closed as a success when the block ends without an error."""
    rng = random.Random(args.seed)
    train_rows, eval_rows = load_problems(args.eval_size)
    with server_url(args.base_url, args.api_key) as url:
        service = tinker.ServiceClient(base_url=url, api_key=args.api_key)
        training = service.create_lora_training_client(
            base_model=BASE_MODEL, rank=args.rank, seed=args.seed, **lora_options
        ).result()
        yield LoopRun(service, training, training.get_tokenizer(), train_rows, eval_rows, rng)
        service.close("success")


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
