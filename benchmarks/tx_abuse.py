"""An attacker with a valid key against one `skyrl-tx serve` while well-behaved clients train and sample on it.

    python benchmarks/tx_abuse.py                        # writes benchmarks/results/tx_abuse.json
    python benchmarks/tx_abuse.py --requests 10 --steps 3 --no-save     # a quick look

The server runs on 127.0.0.1 with the embedded model and its default limits. Well-behaved clients (the official
tinker client, each on its own key) sample and train three times: alone, while an attacker sends the security
review's attack set from one key and floods the compute queue with requests shaped like theirs from another, and
alone again (the machine's load drifts, so the attacked run is compared with the mean of the two runs alone). Prints
one row per attack (what the server answered, its RSS afterwards), then the good clients' success counts and p99
latencies per run, and checks the acceptance: every attack answered 4xx, the server's peak RSS under
`--rss-bound-mb`, every good request successful, their p99 within 2x of the runs without the attacker, no adapter
lost. Exit 1 when one fails.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import tinker  # noqa: E402
from tinker import types  # noqa: E402
from tinker.proto import tinker_public_pb2 as pb  # noqa: E402

from skyrl_tx.cli import DEFAULT_BASE_MODEL  # noqa: E402
from skyrl_tx.limits import Limits  # noqa: E402
from skyrl_tx.local_server import LocalServer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tx_load import (  # noqa: E402 - the benchmarks folder is not a package
    PROMPT,
    SAMPLE_TOKENS,
    Tally,
    sampling_worker,
    training_worker,
)

REPO = Path(__file__).resolve().parents[1]
ATTACKER = "tml-attacker"
RUNS = ("baseline", "attacked", "baseline_after")
"""The good clients' runs: alone, under attack, alone again."""
FLOODER = "tml-attacker-flood"
"""The attacker's second key: it keeps its compute queue full for the whole run while the first sends the rest."""


class RssMonitor:
    """Samples the server process's resident memory every 50 ms; `peak` since the last `reset`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def current(self) -> int:
        """Resident bytes now (0 once the process is gone)."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.current())

    def reset(self) -> None:
        """Start a new peak from the current value."""
        self.peak = self.current()

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()


def good_keys(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The sampling clients' and training clients' keys (one key each)."""
    sampling = [f"tml-good-sample-{i}" for i in range(args.sampling_clients)]
    training = [f"tml-good-train-{i}" for i in range(args.training_clients)]
    return sampling, training


def run_good_clients(url: str, args: argparse.Namespace, started: threading.Event) -> tuple[Tally, list[Any]]:
    """Every good client does its work at once (and `started` is set when they begin); returns the tally and the
    training clients as (key, ServiceClient, TrainingClient), still open, for the adapter check."""
    sampling_keys, training_keys = good_keys(args)
    services = [tinker.ServiceClient(base_url=url, api_key=key) for key in sampling_keys + training_keys]
    samplers = [
        service.create_sampling_client(base_model=DEFAULT_BASE_MODEL) for service in services[: len(sampling_keys)]
    ]
    trainers = [
        service.create_lora_training_client(base_model=DEFAULT_BASE_MODEL, rank=4).result()
        for service in services[len(sampling_keys) :]
    ]
    tally, go = Tally(), threading.Event()
    params = types.SamplingParams(max_tokens=SAMPLE_TOKENS, temperature=1.0)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(PROMPT), loss_fn_inputs={"target_tokens": PROMPT, "weights": [1.0] * 6}
    )

    for sampler in samplers:  # warm-up, not timed: the first call of a client sets up its session and connections
        sampler.sample(types.ModelInput.from_ints(PROMPT), 1, params).result(timeout=600)
    for training in trainers:
        training.forward_backward([datum], "cross_entropy").result(timeout=600)
    threads = [threading.Thread(target=sampling_worker, args=(s, args.requests, tally, go)) for s in samplers]
    threads += [threading.Thread(target=training_worker, args=(t, args.steps, tally, go)) for t in trainers]
    for thread in threads:
        thread.start()
    go.set()
    started.set()
    for thread in threads:
        thread.join()
    return tally, list(zip(training_keys, services[len(sampling_keys) :], trainers))


# ----- the attacker -------------------------------------------------------------------------------------------------
class Attacker:
    """Raw HTTP as an attacker with a valid key would send it; every attack returns the answers it got."""

    def __init__(self, url: str, limits: Limits) -> None:
        self.url = url
        self.limits = limits
        self.http = httpx.Client(timeout=120)
        self.model_id: Optional[str] = None

    def post(self, path: str, body: Any, key: str = ATTACKER, **headers: str) -> httpx.Response:
        content = body if isinstance(body, (bytes, Iterator)) else json.dumps(body).encode()
        merged = {"X-API-Key": key, "Content-Type": "application/json", **headers}
        return self.http.post(f"{self.url}/api/v1/{path}", content=content, headers=merged)

    def answer(self, call: Callable[[], httpx.Response]) -> str:
        """The status code of one request, or the transport error that ended it."""
        try:
            return str(call().status_code)
        except httpx.HTTPError as exc:
            return type(exc).__name__

    def wait(self, request_id: str) -> dict:
        while True:
            body = self.post("retrieve_future", {"request_id": request_id}).json()
            if body.get("type") != "try_again":
                return body

    def setup(self) -> None:
        """The attacker's own session and model (forward_backward attacks need one)."""
        session = self.post("create_session", {}).json()["session_id"]
        body = {"session_id": session, "model_seq_id": 0, "base_model": DEFAULT_BASE_MODEL, "lora_config": {"rank": 2}}
        reply = self.post("create_model", body).json()
        self.wait(reply["request_id"])
        self.model_id = reply["model_id"]
        self.session = session

    def forward_backward(self, lengths: list[int], shape: Optional[list[int]] = None) -> httpx.Response:
        request = pb.ForwardBackwardRequest(model_id=self.model_id, seq_id=1, loss_fn="cross_entropy")
        for length in lengths:
            datum = request.data.add()
            datum.model_input.add().encoded_text.tokens = np.full(length, 5, dtype="<i4").tobytes()
            targets = datum.loss_fn_inputs["target_tokens"]
            targets.dtype, targets.dense = pb.DTYPE_INT64, np.full(length, 6, dtype="<i8").tobytes()
            weights = datum.loss_fn_inputs["weights"]
            weights.dtype = pb.DTYPE_FLOAT32
            if shape is None:
                weights.dense = np.ones(length, dtype="<f4").tobytes()
            else:  # a sparse tensor whose shape asks for a huge dense array
                weights.shape.extend(shape)
                weights.sparse_csr.crow_indices = np.zeros(shape[0] + 1, dtype="<i8").tobytes()
        return self.post("forward_backward", request.SerializeToString(), **{"Content-Type": "application/x-protobuf"})

    def sample(self, key: str = ATTACKER, **changes: Any) -> httpx.Response:
        params = {"max_tokens": SAMPLE_TOKENS, **changes.pop("sampling_params", {})}
        body = {"base_model": DEFAULT_BASE_MODEL, "prompt": {"chunks": [{"tokens": PROMPT}]}, "num_samples": 1}
        return self.post("asample", {**body, **changes, "sampling_params": params}, key)

    def attacks(self, good_request_ids: list[str]) -> list[tuple[str, Callable[[], list[str]]]]:
        """The review's attack set, each a (name, run) pair; run returns the answers."""
        mb = 1 << 20
        cap = self.limits

        def chunked(total: int) -> Iterator[bytes]:
            yield b'{"user_metadata": {"x": "'
            for _ in range(total // mb):
                yield b"A" * mb
            yield b'"}}'

        def repeat(count: int, call: Callable[[int], httpx.Response]) -> list[str]:
            return [self.answer(lambda i=i: call(i)) for i in range(count)]

        def session_flood() -> list[str]:
            return repeat(cap.max_sessions_per_key + 10, lambda i: self.post("create_session", {}))

        def adapter_flood() -> list[str]:
            body = {"session_id": self.session, "base_model": DEFAULT_BASE_MODEL, "lora_config": {"rank": 32}}
            return repeat(
                cap.max_adapters_per_key + 5, lambda i: self.post("create_model", {**body, "model_seq_id": 100 + i})
            )

        def one(call: Callable[[], httpx.Response]) -> Callable[[], list[str]]:
            return lambda: [self.answer(call)]

        protobuf = {"Content-Type": "application/x-protobuf"}
        create = {"session_id": self.session, "base_model": DEFAULT_BASE_MODEL}
        return [
            ("chunked body of 80 MB (no Content-Length)", one(lambda: self.post("create_session", chunked(80 * mb)))),
            ("declared body of 80 MB", one(lambda: self.post("create_session", b"x" * (80 * mb)))),
            (
                "forward_backward: 40,000 datums + one of 512 tokens",
                one(lambda: self.forward_backward([1] * 40000 + [512])),
            ),
            ("forward_backward padded to 1,024 x 512 tokens", one(lambda: self.forward_backward([1] * 1023 + [512]))),
            ("sparse weights of shape [1, 10^12]", one(lambda: self.forward_backward([1], shape=[1, 10**12]))),
            ("garbage forward_backward body", one(lambda: self.post("forward_backward", b"\xff\xfe junk", **protobuf))),
            ("top-k sampled logprobs = 10^6", one(lambda: self.sample(topk_sample_logprobs=10**6))),
            (
                "top-k prompt logprobs = 10^6",
                one(lambda: self.sample(prompt_logprobs=True, topk_prompt_logprobs=10**6)),
            ),
            ('seed = "x" (the batch-poisoning probe)', one(lambda: self.sample(sampling_params={"seed": "x"}))),
            ("seed = 2^64", one(lambda: self.sample(sampling_params={"seed": 2**64}))),
            (
                "prompt token id 10^6 (out of vocabulary)",
                one(lambda: self.sample(prompt={"chunks": [{"tokens": [10**6]}]})),
            ),
            ("stop token id 10^6", one(lambda: self.sample(sampling_params={"stop": [10**6]}))),
            ("10,000 stop strings", one(lambda: self.sample(sampling_params={"stop": ["ab"] * 10000}))),
            (
                "1,024 samples x 500 tokens",
                one(lambda: self.sample(num_samples=1024, sampling_params={"max_tokens": 500})),
            ),
            (
                "user_metadata of 8 MB",
                one(lambda: self.post("create_session", {"user_metadata": {"x": "A" * (8 * mb)}})),
            ),
            ("100,000 tags", one(lambda: self.post("create_session", {"tags": ["t"] * 100000}))),
            (
                "LoRA rank 100,000",
                one(lambda: self.post("create_model", {**create, "model_seq_id": 99, "lora_config": {"rank": 100000}})),
            ),
            (
                "user_metadata = [1], sent twice (the wedged-future probe)",
                lambda: repeat(
                    2, lambda i: self.post("create_model", {**create, "model_seq_id": 98, "user_metadata": [1]})
                ),
            ),
            (
                "polls of another key's futures",
                lambda: repeat(20, lambda i: self.post("retrieve_future", {"request_id": good_request_ids[i]})),
            ),
            (
                "polls of 1,000 nonexistent futures",
                lambda: repeat(1000, lambda i: self.post("retrieve_future", {"request_id": str(10**9 + i)})),
            ),
            (
                "no key, a wrong key",
                lambda: repeat(2, lambda i: self.post("create_session", {}, key=["", "tml-guess"][i])),
            ),
            (
                "GET /openapi.json, /docs, /redoc",
                lambda: repeat(3, lambda i: self.http.get(f"{self.url}/{['openapi.json', 'docs', 'redoc'][i]}")),
            ),
            ("session flood", session_flood),
            ("adapter flood (rank 32 each)", adapter_flood),
        ]


def summarize(answers: list[str]) -> str:
    """`200 x 50, 429 x 10` in first-seen order."""
    counts = Counter(answers)
    order = list(dict.fromkeys(answers))
    return ", ".join(f"{answer} x {counts[answer]}" if counts[answer] > 1 else answer for answer in order)


def attack_ok(name: str, answers: list[str]) -> bool:
    """Every answer 4xx; a flood's accepted requests (200, up to its quota) must end in 429s."""
    if "flood" in name:
        return bool(answers) and answers[-1] == "429" and all(a in ("200", "429") for a in answers)
    return bool(answers) and all(answer.startswith("4") for answer in answers)


FLOOD_BURST = 1000
"""Requests the flooding key sends at once (the review's "1,000 queued jobs from one key")."""
FLOOD_WORKERS = 16


def flood(url: str, limits: Limits, until: threading.Event, answers: list[str]) -> None:
    """Send `FLOOD_BURST` sample requests shaped like the good clients' from one key, as fast as `FLOOD_WORKERS`
    connections allow, then keep its queue full (every slot the compute frees is taken again) until `until` is set."""
    sent, lock = [0], threading.Lock()

    def worker() -> None:
        attacker = Attacker(url, limits)
        while True:
            with lock:
                burst = sent[0] < FLOOD_BURST
                sent[0] += 1
            if not burst and until.is_set():
                return
            answer = attacker.answer(lambda: attacker.sample(key=FLOODER))
            answers.append(answer)
            if answer == "429" and not burst:
                time.sleep(0.05)

    workers = [threading.Thread(target=worker) for _ in range(FLOOD_WORKERS)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sampling-clients", type=int, default=4)
    parser.add_argument("--training-clients", type=int, default=2)
    parser.add_argument("--requests", type=int, default=40, help="sample calls per good sampling client")
    parser.add_argument("--steps", type=int, default=12, help="forward_backward + optim_step pairs per training client")
    parser.add_argument("--rss-bound-mb", type=float, default=1024.0, help="the server's peak RSS must stay under it")
    parser.add_argument("--no-save", action="store_true", help="print only; do not write benchmarks/results")
    args = parser.parse_args(argv)
    limits = Limits()
    sampling_keys, training_keys = good_keys(args)
    with tempfile.TemporaryDirectory(prefix="skyrl-tx-abuse-") as folder:
        server = LocalServer(Path(folder), api_keys=tuple(sampling_keys + training_keys + [ATTACKER, FLOODER]))
        server.start()
        monitor = RssMonitor(server.process.pid)
        try:
            result = measure(server, monitor, args, limits)
        finally:
            monitor.stop()
            server.stop()
    return report(result, args)


def measure(server: LocalServer, monitor: RssMonitor, args: argparse.Namespace, limits: Limits) -> dict[str, Any]:
    """Both runs and the attack set; returns the results record."""
    load_before = os.getloadavg()[0]  # other work on the machine slows every request down
    idle_rss = monitor.current()
    monitor.reset()
    baseline, clients = run_good_clients(server.url, args, threading.Event())
    baseline_peak = monitor.peak
    for _, service, _ in clients:
        service.close("success")

    attacker = Attacker(server.url, limits)
    attacker.setup()
    started, finished, flood_answers = threading.Event(), threading.Event(), []
    rows: list[dict[str, Any]] = []
    monitor.reset()

    def attack() -> None:
        started.wait()
        flooder = threading.Thread(target=flood, args=(server.url, limits, finished, flood_answers))
        flooder.start()
        for name, run in attacker.attacks([str(i) for i in range(1, 40)]):  # ids 1-39: the baseline's requests
            began = time.perf_counter()
            answers = run()
            rows.append(
                {
                    "attack": name,
                    "answer": summarize(answers),
                    "ok": attack_ok(name, answers),
                    "seconds": time.perf_counter() - began,
                    "rss_mb": monitor.current() / 2**20,
                }
            )
        flooder.join()

    attack_thread = threading.Thread(target=attack, daemon=True)
    attack_thread.start()
    try:
        attacked, clients = run_good_clients(server.url, args, started)
    finally:
        started.set()
        finished.set()
    attack_thread.join()
    attacked_peak = monitor.peak
    rows.append(
        {
            "attack": f"queue flood: {FLOOD_BURST:,} sample requests at once from a second key, then kept full",
            "answer": summarize(flood_answers),
            "ok": "429" in flood_answers and set(flood_answers) <= {"200", "429"},
            "seconds": None,
            "rss_mb": monitor.current() / 2**20,
        }
    )
    lost = adapters_lost(server.url, clients)
    for _, service, _ in clients:
        service.close("success")
    monitor.reset()  # alone again: the machine's load drifts, so the attacked run is compared with both runs alone
    after, clients = run_good_clients(server.url, args, threading.Event())
    after_peak = monitor.peak
    for _, service, _ in clients:
        service.close("success")
    import torch

    return {
        "benchmark": "benchmarks/tx_abuse.py",
        "date": dt.date.today().isoformat(),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}",
        "settings": {
            "sampling_clients": args.sampling_clients,
            "training_clients": args.training_clients,
            "requests": args.requests,
            "steps": args.steps,
            "sample": f"{len(PROMPT)}-token prompt, 1 sample x {SAMPLE_TOKENS} tokens",
            "train_step": f"forward_backward of 4 x {len(PROMPT)} tokens + optim_step, LoRA rank 4",
            "limits": "defaults",
        },
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "rss_bound_mb": args.rss_bound_mb,
        "idle_rss_mb": idle_rss / 2**20,
        "baseline": {**baseline.summary(), "peak_rss_mb": baseline_peak / 2**20},
        "attacked": {**attacked.summary(), "peak_rss_mb": attacked_peak / 2**20},
        "baseline_after": {**after.summary(), "peak_rss_mb": after_peak / 2**20},
        "attacks": rows,
        "adapters_lost": lost,
        "expected": {"sample": args.sampling_clients * args.requests, "train_step": args.training_clients * args.steps},
    }


def adapters_lost(url: str, clients: list[Any]) -> int:
    """Good training clients whose adapter no longer answers (a forward fails, or the key sees no adapter)."""
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(PROMPT), loss_fn_inputs={"target_tokens": PROMPT, "weights": [1.0] * 6}
    )
    lost = 0
    for key, _, training in clients:
        try:
            training.forward([datum], "cross_entropy").result(timeout=600)
            lost += httpx.get(f"{url}/healthz", headers={"X-API-Key": key}).json()["adapters"] < 1
        except Exception:  # a lost adapter answers "weights are gone"
            lost += 1
    return lost


def verdict(result: dict[str, Any]) -> dict[str, bool]:
    """Each acceptance check of the run."""
    runs = [result[name] for name in RUNS]
    hit, expected = result["attacked"]["kinds"], result["expected"]
    ratios = {}
    for kind in expected:
        alone = [run["kinds"].get(kind, {}).get("p99_s") for run in (result["baseline"], result["baseline_after"])]
        if kind in hit and None not in alone:
            ratios[kind] = hit[kind]["p99_s"] / (sum(alone) / len(alone))
    result["p99_ratios"] = ratios
    return {
        "every attack answered 4xx": all(row["ok"] for row in result["attacks"]),
        "peak RSS under the bound": max(run["peak_rss_mb"] for run in runs) < result["rss_bound_mb"],
        "every good request succeeded": all(
            run["error_count"] == 0 and all(run["kinds"].get(k, {}).get("ok") == n for k, n in expected.items())
            for run in runs
        ),
        "good p99 within 2x of no attacker": len(ratios) == len(expected) and all(r <= 2.0 for r in ratios.values()),
        "no adapter lost": result["adapters_lost"] == 0,
    }


def report(result: dict[str, Any], args: argparse.Namespace) -> int:
    """Print the tables, write the JSON (unless --no-save); 1 when an acceptance check fails."""
    checks = verdict(result)
    result["acceptance"] = checks
    width = max(len(row["attack"]) for row in result["attacks"])
    print(f"{'attack':<{width}}  {'answer':<28} {'RSS after (MB)':>14}")
    for row in result["attacks"]:
        print(
            f"{row['attack']:<{width}}  {row['answer']:<28} {row['rss_mb']:>14.0f}{'' if row['ok'] else '  <- NOT 4xx'}"
        )
    print()
    print(
        f"{'run':<16} {'samples ok':>10} {'sample p99 (s)':>15} {'train steps ok':>15} {'train p99 (s)':>14} {'peak RSS (MB)':>14}"
    )
    for name in RUNS:
        run = result[name]
        sample, train = run["kinds"].get("sample", {}), run["kinds"].get("train_step", {})
        print(
            f"{name:<16} {sample.get('ok', 0):>10} {sample.get('p99_s', float('nan')):>15.3f} "
            f"{train.get('ok', 0):>15} {train.get('p99_s', float('nan')):>14.3f} {run['peak_rss_mb']:>14.0f}"
        )
    for error in [error for name in RUNS for error in result[name]["errors"]][:5]:
        print(f"error: {error}")
    print(
        f"p99 attacked / mean of the two runs alone: {', '.join(f'{k} {v:.2f}x' for k, v in result['p99_ratios'].items())}"
    )
    print(f"adapters lost: {result['adapters_lost']}; RSS bound {result['rss_bound_mb']:.0f} MB")
    for check, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}: {check}")
    if not args.no_save:
        path = REPO / "benchmarks" / "results" / "tx_abuse.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path.relative_to(REPO)}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
