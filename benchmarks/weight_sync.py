"""Benchmark: seconds and MB/s of one weight sync into engine actors, per weight-sync strategy, on local Ray.

The driver holds a fresh tiny model in fp32 and syncs it into `--engines` hf engine actors (dtype `--dtype`) with
every CPU strategy (`broadcast`, `shm`, `checkpoint`), plus the plain Ray object-store path
(`RayEngineProxy.update_weights`) as a reference. Each cell is the best of `--repeats` syncs after one warm-up; MB
counts the bytes one engine receives (after casting).

    python benchmarks/weight_sync.py [--size 4] [--engines 2] [--dtype bfloat16] [--chunk-mb 32] [--repeats 3]
    python benchmarks/weight_sync.py --two-nodes   # same-node vs cross-node engines on a simulated 2-node cluster
    python benchmarks/weight_sync.py --lora-rank 8  # full sync vs LoRA adapter-only sync of the same model

`--two-nodes` starts a `ray.cluster_utils.Cluster` with two raylets on this machine: the driver (the sender) on the
head, one set of engines on the head and one on the other node, and times every strategy, and `auto` as the trainer
resolves it for a colocated run, into each set. Both "nodes" share this machine's memory and loopback network, so
the cross-node numbers show which transports work and what they cost in this process layout, not a real network.

`--lora-rank R` wraps the model with rank-R LoRA adapters (peft, `all-linear`, B randomised as after training) and
syncs, with every strategy, both the full merged weights and the adapter tensors alone into engines built for LoRA
(the hf engines merge adapters into their base weights), printing bytes, seconds and the full / adapter ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from typing import Any

import ray
import torch

from skyrl_train.inference.ray_engine import create_engine_actors
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer
from skyrl_train.weight_sync import WeightSyncError, connect_auto_weight_sync, make_weight_sync_strategy
from skyrl_train.weight_sync.node_aware import describe_weight_sync

STRATEGIES = ["broadcast", "shm", "checkpoint"]


async def _fastest_sync(strategy: Any, state: list, repeats: int) -> Any:
    """Sync once to warm up, then `repeats` times, close the strategy; the fastest sync's result."""
    try:
        await strategy.sync(state)  # warm-up
        results = [await strategy.sync(state) for _ in range(repeats)]
    finally:
        await strategy.close()
    return min(results, key=lambda result: result.seconds)


async def _time_strategy(
    name: str, engines: list, state: list, chunk_bytes: int, repeats: int
) -> tuple[float, int, int]:
    strategy = make_weight_sync_strategy(name, chunk_bytes=chunk_bytes)
    await strategy.init(None, engines)
    best = await _fastest_sync(strategy, state, repeats)
    return best.seconds, best.num_bytes, best.num_chunks


async def _time_object_store(engines: list, state: list, dtype: torch.dtype, repeats: int) -> tuple[float, int, int]:
    version = max(await asyncio.gather(*(engine.fetch_weight_version() for engine in engines)))
    timings = []
    for _ in range(repeats + 1):
        version += 1
        start = time.perf_counter()
        cast = [(name, tensor.to(dtype)) for name, tensor in state]
        await asyncio.gather(*(engine.update_weights(cast, version) for engine in engines))
        timings.append(time.perf_counter() - start)
    num_bytes = sum(tensor.numel() * tensor.element_size() for _, tensor in cast)
    return min(timings[1:]), num_bytes, 1


async def _run(args: argparse.Namespace, engines: list, state: list) -> None:
    dtype = getattr(torch, args.dtype)
    rows = [
        (name, await _time_strategy(name, engines, state, args.chunk_mb << 20, args.repeats)) for name in STRATEGIES
    ]
    rows.append(("ray object store", await _time_object_store(engines, state, dtype, args.repeats)))
    print(f"{'strategy':>16} | {'chunks':>6} | {'MB':>7} | {'seconds':>8} | {'MB/s':>8}")
    print("-" * 58)
    for name, (seconds, num_bytes, chunks) in rows:
        print(
            f"{name:>16} | {chunks:>6} | {num_bytes / 1e6:>7.2f} | {seconds:>8.4f} | {num_bytes / 1e6 / seconds:>8.1f}"
        )


async def _time_auto(engines: list, state: list, chunk_bytes: int, repeats: int) -> tuple[float, int, int, str]:
    strategy = await connect_auto_weight_sync(None, engines, colocated=True, device="cpu", chunk_bytes=chunk_bytes)
    best = await _fastest_sync(strategy, state, repeats)
    return best.seconds, best.num_bytes, best.num_chunks, describe_weight_sync(strategy)


async def _run_two_nodes(args: argparse.Namespace, sets: dict[str, list], state: list) -> None:
    chunk_bytes = args.chunk_mb << 20
    print(f"{'engines on':>11} | {'strategy':>10} | {'MB':>7} | {'seconds':>8} | {'MB/s':>8} | note")
    print("-" * 90)
    for where, engines in sets.items():
        for name in [*STRATEGIES, "auto"]:
            try:
                if name == "auto":
                    seconds, num_bytes, _, note = await _time_auto(engines, state, chunk_bytes, args.repeats)
                else:
                    seconds, num_bytes, _ = await _time_strategy(name, engines, state, chunk_bytes, args.repeats)
                    note = ""
            except WeightSyncError as exc:
                print(f"{where:>11} | {name:>10} | {'-':>7} | {'-':>8} | {'-':>8} | refused: {exc}")
                continue
            mb = num_bytes / 1e6
            print(f"{where:>11} | {name:>10} | {mb:>7.2f} | {seconds:>8.4f} | {mb / seconds:>8.1f} | {note}")


def _engines_on(node_resource: str, count: int, directory: str, cfg: dict) -> list:
    from ray.util.placement_group import placement_group

    group = placement_group([{"CPU": 1, node_resource: 1} for _ in range(count)], strategy="PACK")
    ray.get(group.ready(), timeout=120)
    return create_engine_actors(count, directory, cfg, placement_group=group)


def main_two_nodes(args: argparse.Namespace, model: torch.nn.Module) -> None:
    """Same-node and cross-node engines on a simulated two-node cluster (see the module docstring)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        connect=True,
        head_node_args={"num_cpus": args.engines + 1, "resources": {"head_node": 100}},
    )
    cluster.add_node(num_cpus=args.engines, resources={"other_node": 100})
    cluster.wait_for_nodes()
    try:
        with tempfile.TemporaryDirectory() as directory:
            model.save_pretrained(directory)
            save_tokenizer(build_char_tokenizer(), directory)
            cfg = {"generator": {"inference_engine": {"backend": "hf", "model_dtype": args.dtype}}, "trainer": {}}
            cfg["trainer"]["device"] = "cpu"
            sets = {
                "same node": _engines_on("head_node", args.engines, directory, cfg),
                "other node": _engines_on("other_node", args.engines, directory, cfg),
            }
        print(
            f"two simulated nodes; the sender is the driver on the head node; {args.engines} engine(s) per set in "
            f"{args.dtype}, chunks of {args.chunk_mb} MiB, best of {args.repeats}"
        )
        asyncio.run(_run_two_nodes(args, sets, list(model.state_dict().items())))
    finally:
        ray.shutdown()
        cluster.shutdown()


async def _run_lora(args: argparse.Namespace, engines: list, full: list, adapter: list) -> None:
    chunk_bytes = args.chunk_mb << 20
    print(
        f"{'strategy':>10} | {'full MB':>8} | {'full s':>7} | {'adapter MB':>10} | {'adapter s':>9} | bytes ratio | time ratio"
    )
    print("-" * 86)
    for name in STRATEGIES:
        full_s, full_bytes, _ = await _time_strategy(name, engines, full, chunk_bytes, args.repeats)
        adapter_s, adapter_bytes, _ = await _time_strategy(name, engines, adapter, chunk_bytes, args.repeats)
        print(
            f"{name:>10} | {full_bytes / 1e6:>8.2f} | {full_s:>7.4f} | {adapter_bytes / 1e6:>10.3f} | {adapter_s:>9.4f}"
            f" | {full_bytes / adapter_bytes:>10.1f}x | {full_s / adapter_s:>9.1f}x"
        )


def main_lora(args: argparse.Namespace, model: torch.nn.Module) -> None:
    """Full vs adapter-only sync of one LoRA model into LoRA-enabled hf engines (see the module docstring)."""
    from skyrl_train.models.lora import LoRASettings, apply_lora
    from skyrl_train.models.lora_state import is_adapter_name, merge_peft_state

    alpha = 2 * args.lora_rank
    with tempfile.TemporaryDirectory() as directory:
        model.save_pretrained(directory)
        save_tokenizer(build_char_tokenizer(), directory)
        adapted = apply_lora(model, LoRASettings(rank=args.lora_rank, alpha=alpha))
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, param in adapted.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.01)
        state = adapted.state_dict()
        adapter = [(name, tensor) for name, tensor in state.items() if is_adapter_name(name)]
        full = list(merge_peft_state(state, alpha).items())
        ray.init(num_cpus=args.engines + 1, include_dashboard=False, log_to_driver=False)
        try:
            cfg = {
                "generator": {"inference_engine": {"backend": "hf", "model_dtype": args.dtype}},
                "trainer": {"device": "cpu", "policy": {"model": {"lora": {"rank": args.lora_rank, "alpha": alpha}}}},
            }
            engines = create_engine_actors(args.engines, directory, cfg)
            full_params = sum(tensor.numel() for _, tensor in full)
            adapter_params = sum(tensor.numel() for _, tensor in adapter)
            print(
                f"tiny model size={args.size}: {full_params / 1e6:.2f} M weights, LoRA rank {args.lora_rank} on every "
                f"linear layer: {adapter_params / 1e6:.3f} M adapter weights; {args.engines} hf engine actor(s) in "
                f"{args.dtype}, best of {args.repeats}"
            )
            asyncio.run(_run_lora(args, engines, full, adapter))
        finally:
            ray.shutdown()


def main() -> None:
    """Start Ray and the engines, time every strategy, print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=4, help="tiny model size dial")
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--chunk-mb", type=int, default=32, help="chunk size in MiB")
    parser.add_argument("--repeats", type=int, default=3, help="best of N syncs per strategy")
    parser.add_argument("--two-nodes", action="store_true", help="same-node vs cross-node engines (simulated)")
    parser.add_argument("--lora-rank", type=int, default=0, help="> 0: full vs LoRA adapter-only sync at this rank")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = build_tiny_model(TinyModelSpec(size=args.size), seed=0)
    if args.two_nodes:
        main_two_nodes(args, model)
        return
    if args.lora_rank > 0:
        main_lora(args, model)
        return
    state = list(model.state_dict().items())
    params = sum(p.numel() for p in model.parameters())
    ray.init(num_cpus=args.engines + 1, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory() as directory:
            model.save_pretrained(directory)
            save_tokenizer(build_char_tokenizer(), directory)
            cfg = {"generator": {"inference_engine": {"backend": "hf", "model_dtype": args.dtype}}}
            engines = create_engine_actors(args.engines, directory, {**cfg, "trainer": {"device": "cpu"}})
        print(
            f"tiny model size={args.size} ({params / 1e6:.2f} M params), {args.engines} engine actor(s) in "
            f"{args.dtype}, chunks of {args.chunk_mb} MiB, best of {args.repeats}"
        )
        asyncio.run(_run(args, engines, state))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
