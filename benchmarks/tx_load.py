"""Load on one `skyrl-tx serve`: many sampling clients and several training clients at once, on SQLite and on
PostgreSQL, through the official tinker client.

    python benchmarks/tx_load.py                                   # 100 sampling + 8 training clients, both DBs
    python benchmarks/tx_load.py --databases sqlite --sampling-clients 20 --training-clients 2   # a quick look

Each sampling client (its own `SamplingClient` on the base model, spread over a few `ServiceClient`s) sends
`--requests` sample calls one after another; each training client runs `--steps` forward_backward + optim_step pairs
on its own LoRA adapter. Every request's latency is measured from submission to result. The run fails (exit 1) if a
request is lost or errors, or if the server log mentions "database is locked". Prints one row per database:
requests/s, latency percentiles per request kind, and the server's log size of warnings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import tinker  # noqa: E402
from tinker import types  # noqa: E402

from skyrl_tx.cli import DEFAULT_BASE_MODEL  # noqa: E402
from skyrl_tx.local_server import LocalServer, fresh_postgres_database  # noqa: E402

PROMPT = [5, 6, 7, 8, 9, 10]
SAMPLE_TOKENS = 8
"""Tokens each sample request asks for."""


@dataclass
class Tally:
    """Latencies per request kind and the errors seen, filled by many threads."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, seconds: float) -> None:
        with self.lock:
            self.latencies.setdefault(kind, []).append(seconds)

    def fail(self, message: str) -> None:
        with self.lock:
            self.errors.append(message)

    def summary(self) -> dict[str, Any]:
        """Per kind: requests that succeeded, p50 and p99 seconds; and the errors."""
        kinds = {
            kind: {"ok": len(values), "p50_s": percentile(values, 50), "p99_s": percentile(values, 99)}
            for kind, values in sorted(self.latencies.items())
        }
        return {"kinds": kinds, "errors": self.errors[:20], "error_count": len(self.errors)}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) of `values`, by linear interpolation."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def sampling_worker(sampler: tinker.SamplingClient, requests: int, tally: Tally, start: threading.Event) -> None:
    start.wait()
    params = types.SamplingParams(max_tokens=SAMPLE_TOKENS, temperature=1.0)
    for _ in range(requests):
        began = time.perf_counter()
        try:
            result = sampler.sample(types.ModelInput.from_ints(PROMPT), 1, params).result(timeout=600)
            assert len(result.sequences) == 1 and result.sequences[0].tokens
            tally.add("sample", time.perf_counter() - began)
        except Exception as exc:  # every failure is counted, none stops the others
            tally.fail(f"sample: {type(exc).__name__}: {exc}")


def training_worker(training: tinker.TrainingClient, steps: int, tally: Tally, start: threading.Event) -> None:
    start.wait()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(PROMPT), loss_fn_inputs={"target_tokens": PROMPT, "weights": [1.0] * 6}
    )
    for _ in range(steps):
        began = time.perf_counter()
        try:
            backward = training.forward_backward([datum] * 4, "cross_entropy")
            step = training.optim_step(types.AdamParams(learning_rate=1e-3))
            backward.result(timeout=600)
            step.result(timeout=600)
            tally.add("train_step", time.perf_counter() - began)
        except Exception as exc:
            tally.fail(f"train: {type(exc).__name__}: {exc}")


def run_load(url: str, args: argparse.Namespace) -> tuple[Tally, float]:
    """Create the clients, release them together, wait for all; returns the tally and the wall time."""
    services = [tinker.ServiceClient(base_url=url, api_key=f"tml-load-{i}") for i in range(args.service_clients)]
    samplers = [
        services[i % len(services)].create_sampling_client(base_model=DEFAULT_BASE_MODEL).result()
        for i in range(args.sampling_clients)
    ]
    trainers = [
        services[i % len(services)].create_lora_training_client(base_model=DEFAULT_BASE_MODEL, rank=4).result()
        for i in range(args.training_clients)
    ]
    tally, start = Tally(), threading.Event()
    threads = [threading.Thread(target=sampling_worker, args=(s, args.requests, tally, start)) for s in samplers]
    threads += [threading.Thread(target=training_worker, args=(t, args.steps, tally, start)) for t in trainers]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    start.set()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    for service in services:
        service.close("success")
    return tally, wall


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--databases", default="sqlite,postgres", help="comma-separated: sqlite, postgres")
    parser.add_argument("--postgres-url", default=os.environ.get("SKYRL_TX_POSTGRES_URL"))
    parser.add_argument("--sampling-clients", type=int, default=100)
    parser.add_argument("--training-clients", type=int, default=8)
    parser.add_argument("--service-clients", type=int, default=4, help="ServiceClients the others are spread over")
    parser.add_argument("--requests", type=int, default=5, help="sample calls per sampling client")
    parser.add_argument("--steps", type=int, default=3, help="forward_backward + optim_step pairs per training client")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    rows, failed = [], False
    for database in [name.strip() for name in args.databases.split(",") if name.strip()]:
        with ExitStack() as stack:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="skyrl-tx-load-")))
            extra: list[str] = []
            if database == "postgres":
                if not args.postgres_url:
                    print("postgres: no URL (set SKYRL_TX_POSTGRES_URL or --postgres-url; scripts/postgres.sh)")
                    failed = True
                    continue
                extra = ["--database-url", stack.enter_context(fresh_postgres_database(args.postgres_url))]
            elif database != "sqlite":
                raise SystemExit(f"--databases: unknown {database!r} (sqlite, postgres)")
            keys = tuple(f"tml-load-{i}" for i in range(args.service_clients))
            server = LocalServer(folder, extra, api_keys=keys)
            server.start()
            stack.callback(server.stop)
            tally, wall = run_load(server.url, args)
            log_text = server.log_path.read_text() if server.log_path else ""
        expected = {"sample": args.sampling_clients * args.requests, "train_step": args.training_clients * args.steps}
        done = {kind: len(tally.latencies.get(kind, [])) for kind in expected}
        locked = "database is locked" in log_text
        ok = done == expected and not tally.errors and not locked
        failed |= not ok
        total = sum(done.values())
        rows.append((database, total, wall, tally, ok, locked))
        for error in tally.errors[:5]:
            print(f"{database}: {error}")
    header = (
        f"{'database':<9} {'requests':>8} {'req/s':>7} {'sample p50/p90/p99 (s)':>24} {'train step p50/p99 (s)':>23} ok"
    )
    print(header)
    print("-" * len(header))
    for database, total, wall, tally, ok, locked in rows:
        samples, steps = tally.latencies.get("sample", []), tally.latencies.get("train_step", [])
        sample_cell = "/".join(f"{percentile(samples, q):.2f}" for q in (50, 90, 99))
        train_cell = "/".join(f"{percentile(steps, q):.2f}" for q in (50, 99))
        verdict = "yes" if ok else ("LOCKED" if locked else f"NO ({len(tally.errors)} errors)")
        print(f"{database:<9} {total:>8} {total / wall:>7.1f} {sample_cell:>24} {train_cell:>23} {verdict}")
    if len(rows) == 2 and all(r[2] for r in rows):
        print(f"postgres / sqlite requests/s: {(rows[1][1] / rows[1][2]) / (rows[0][1] / rows[0][2]):.2f}x")
    if rows and statistics.mean(r[2] for r in rows) > 0:
        print(
            f"clients: {args.sampling_clients} sampling x {args.requests} requests, {args.training_clients} training x "
            f"{args.steps} steps over {args.service_clients} ServiceClients"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
