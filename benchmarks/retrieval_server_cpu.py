"""Benchmark: the BM25 retrieval server's CPU per request under agent-like load, per way of serving it, in one run.

    python benchmarks/retrieval_server_cpu.py [--requests 2000] [--clients 96] [--delay-ms 200-1000] [--repeats 2]

Each variant starts `skyrl_gym.tools.retrieval_server`'s app in its own process over the corpus the async benchmark
uses (200 documents "n is a number"); `--clients` threads, each with its own keep-alive `http.client` connection as
`benchmarks/async_vs_sync.py`'s envs have, send `--requests` one-query searches in all. The server's CPU seconds
(user + system, `process_cpu.cpu_snapshot`) over that load, per request, are compared with the first variant's,
the server as it was before uvloop/httptools and inline searches (bm25s starting a thread pool per call, every search
handed to a worker thread, asyncio + h11). Variants run interleaved, `--repeats` times each; the table shows the means.

The server shares this machine's cores with the clients, so only the ratios taken in one run mean anything.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

from process_cpu import cpu_snapshot  # noqa: E402 - the benchmarks folder is not a package

SERVE = r"""
import sys
import uvicorn
from skyrl_gym.tools import retrieval_server as rs

corpus, loop, http, in_thread, pooled, low, high = sys.argv[1:8]
index = rs.BM25Index(rs.load_corpus(corpus))
if pooled == "1":  # the old search: bm25s starts and joins a one-thread pool per call
    retrieve = index._retriever.retrieve
    index._retriever.retrieve = lambda *args, **kwargs: retrieve(*args, **{**kwargs, "n_threads": 1})
sock = rs._bind("127.0.0.1", 0)
print(sock.getsockname()[1], flush=True)
app = rs.create_app(index, (float(low), float(high)), search_in_thread=in_thread == "1")
config = uvicorn.Config(app, log_level="warning", lifespan="off", loop=loop, http=http)
uvicorn.Server(config).run(sockets=[sock])
"""


class Variant(NamedTuple):
    """One way of serving: uvicorn's loop and HTTP parser, where searches run, whether bm25s pools per call."""

    name: str
    loop: str
    http: str
    search_in_thread: bool
    pooled: bool


VARIANTS = [
    Variant("before (asyncio, h11, worker thread, bm25s pool)", "asyncio", "h11", True, True),
    Variant("no bm25s pool", "asyncio", "h11", True, False),
    Variant("+ search on the event loop", "asyncio", "h11", False, False),
    Variant("+ uvloop, httptools (the default now)", "uvloop", "httptools", False, False),
]


def measure(variant: Variant, corpus: Path, requests: int, clients: int, delay_s: tuple[float, float]) -> float:
    """Milliseconds of server CPU per request for `variant` under the load."""
    command = [
        sys.executable,
        "-c",
        SERVE,
        str(corpus),
        variant.loop,
        variant.http,
        str(int(variant.search_in_thread)),
        str(int(variant.pooled)),
        *map(str, delay_s),
    ]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        time.sleep(1.0)  # let start-up finish before the CPU count starts
        left = [requests]
        lock = threading.Lock()
        failures: list[str] = []

        def client() -> None:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            body = json.dumps({"query": "46 is a number", "topk": 1})
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                connection.request("POST", "/retrieve", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                payload = response.read()
                if response.status != 200:
                    failures.append(f"HTTP {response.status}: {payload[:200]!r}")

        before = cpu_snapshot()[server.pid][1]
        threads = [threading.Thread(target=client) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        used = cpu_snapshot()[server.pid][1] - before
        if failures:
            raise RuntimeError(f"{variant.name}: {len(failures)} requests failed, first: {failures[0]}")
        return used / requests * 1000
    finally:
        server.kill()
        server.wait()


def main() -> None:
    """Run every variant `--repeats` times, interleaved, and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=96)
    parser.add_argument("--delay-ms", default="200-1000", help="the server's wait per call: N or MIN-MAX")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    low, _, high = args.delay_ms.partition("-")
    delay_s = (float(low) / 1000, float(high or low) / 1000)
    with tempfile.TemporaryDirectory() as directory:
        corpus = Path(directory) / "corpus.jsonl"
        corpus.write_text("".join(json.dumps({"id": n, "text": f"{n} is a number"}) + "\n" for n in range(200)))
        results: dict[str, list[float]] = {variant.name: [] for variant in VARIANTS}
        for repeat in range(args.repeats):
            for variant in VARIANTS:
                results[variant.name].append(measure(variant, corpus, args.requests, args.clients, delay_s))
                print(f"  run {repeat + 1}: {variant.name}: {results[variant.name][-1]:.3f} ms", flush=True)
    base = statistics.mean(results[VARIANTS[0].name])
    print(f"\nserver CPU per request, {args.requests} requests from {args.clients} clients, {args.delay_ms} ms waits")
    print(f"{'variant':>50} | {'CPU ms/request':>14} | vs before")
    for variant in VARIANTS:
        mean = statistics.mean(results[variant.name])
        print(f"{variant.name:>50} | {mean:14.3f} | {mean / base:8.2f}x")


if __name__ == "__main__":
    main()
