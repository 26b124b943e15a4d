"""Weight sync chosen per engine from where it runs (`locations.plan_weight_sync`), in one sync.

`weight_sync_backend=auto` lands here. Colocated on CPU, engines on the sender's node take `shm` and engines on other
nodes the `broadcast` group (gloo). Colocated on GPUs, Ray shows each actor only its own bundle's GPU, so `cuda_ipc`
reaches just the engines on policy rank 0's GPU, and every other engine (another GPU of the node, or another node)
takes the NCCL `broadcast` group. Not colocated, every engine takes `broadcast`. When one run needs two transports,
`MixedStrategy` drives one sub-strategy per group of engines behind one sender:

    device = cfg.resolved_device()  # trainer.device, `auto` resolved
    strategy = await connect_weight_sync("auto", sender=policy_rank0, engines=proxies, colocated=True, device=device)
    # on cpu:  SharedMemoryStrategy (one node), or MixedStrategy(shm for engines [0, 1], broadcast for [2, 3])
    # on cuda: CudaIpcStrategy (one GPU), or MixedStrategy(cuda_ipc for engines [0], broadcast for [1, 2, 3])

An explicitly named backend is used for every engine, after `locations.check_backend` made sure it reaches them.
Versions, `confirm` and checksum `verify` work over every engine, whatever transport it got.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import torch

from skyrl_train.weight_sync.base import SendResult, WeightSender
from skyrl_train.weight_sync.locations import Location, check_backend, plan_weight_sync, this_location
from skyrl_train.weight_sync.strategy import (
    WeightSyncStrategy,
    engine_handle,
    make_sender,
    make_weight_sync_strategy,
    register_composite_sender,
)

__all__ = ["MixedStrategy", "connect_auto_weight_sync", "connect_weight_sync"]
"""The public names of this module (`skyrl_train.weight_sync` re-exports them)."""

MIXED = "mixed"
"""Strategy name the sender side of `MixedStrategy` is built under (not a `weight_sync_backend` choice)."""


class MixedSender(WeightSender):
    """One sender made of several: each sends every sync to its own engines. Built from `init_info["parts"]`, a
    list of `(strategy name, that strategy's sender init_info)`."""

    def __init__(self, init_info: dict[str, Any]) -> None:
        super().__init__({**init_info, "engine_handles": []})
        self.parts = [(name, make_sender(name, info)) for name, info in init_info["parts"]]

    def send(self, named_tensors: Any, version: Optional[int] = None) -> SendResult:
        """Send to every part's engines in turn (the same version); bytes and chunks add up, checksums are the
        first part's (every part casts to the same dtype), served versions follow the parts' order."""
        named = list(named_tensors)
        results = [sender.send(named, version) for _, sender in self.parts]
        self.last_version = results[0].version
        return SendResult(
            version=results[0].version,
            num_tensors=results[0].num_tensors,
            num_bytes=sum(result.num_bytes for result in results),
            num_chunks=sum(result.num_chunks for result in results),
            seconds=sum(result.seconds for result in results),
            checksums=next((result.checksums for result in results if result.checksums is not None), None),
            served_versions=(
                None
                if any(result.served_versions is None for result in results)
                else [version for result in results for version in result.served_versions]
            ),
        )

    def send_chunk(self, tensors: list[torch.Tensor], chunk: Any) -> None:
        """Not used: `send` delegates whole syncs to the parts."""
        raise NotImplementedError("MixedSender sends through its parts; call send()")

    def close(self) -> None:
        """Close every part."""
        for _, sender in self.parts:
            sender.close()


register_composite_sender(MIXED, MixedSender)


class MixedStrategy(WeightSyncStrategy):
    """Several strategies behind one sender, each serving a group of engines (`parts`: `(name, engine indices)`).

    Args:
        parts: every engine index appears in exactly one part.
        **options: passed to every sub-strategy (`chunk_bytes`, `compute_checksums`, `timeout_s`).
    """

    name = MIXED

    def __init__(self, parts: list[tuple[str, list[int]]], **options: Any) -> None:
        super().__init__(**options)
        if not parts:
            raise ValueError("MixedStrategy: parts is empty")
        self.parts = [(name, list(indices)) for name, indices in parts]
        self.substrategies = [make_weight_sync_strategy(name, **options) for name, _ in self.parts]

    @property
    def part_names(self) -> dict[str, list[int]]:
        """Strategy name -> the engine indices it serves."""
        return {name: indices for name, indices in self.parts}

    def sender_engine_order(self) -> list[int]:
        """The `MixedSender` reports its parts' engines one part after the other."""
        return [index for _, indices in self.parts for index in indices]

    def build_init_infos(
        self, common: dict[str, Any], engine_infos: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Not used: `init` builds each part's infos with its own strategy."""
        raise NotImplementedError("MixedStrategy builds its parts' init infos in init()")

    async def init(self, sender: Any, engines: list[Any]) -> None:
        """Create each part's receivers (engine by engine, with that part's strategy) and one `MixedSender`."""
        covered = sorted(index for _, indices in self.parts for index in indices)
        if covered != list(range(len(engines))):
            raise ValueError(f"MixedStrategy: parts must cover engines 0..{len(engines) - 1} once each, got {covered}")
        self.engines = list(engines)
        self.handles = [engine_handle(engine, index) for index, engine in enumerate(engines)]
        engine_infos, common = await self.describe_engines()
        sender_parts, receivers = [], []
        for (name, indices), sub in zip(self.parts, self.substrategies):
            handles = [self.handles[index] for index in indices]
            sub_common = {
                **common,
                "engine_node_ids": [common["engine_node_ids"][index] for index in indices],
                "engine_locations": [common["engine_locations"][index] for index in indices],
            }
            sub_sender, sub_receivers = sub.build_init_infos(sub_common, [engine_infos[index] for index in indices])
            sender_parts.append((name, {**sub_sender, "engine_handles": handles}))
            receivers += [
                handle.init_weight_receiver.remote(name, info) for handle, info in zip(handles, sub_receivers)
            ]
        sender_info = {**common, "parts": sender_parts}
        if sender is None:
            creating = asyncio.to_thread(make_sender, MIXED, sender_info)
        else:
            creating = sender.init_weight_sender.remote(MIXED, sender_info)
        made, *_ = await asyncio.wait_for(asyncio.gather(creating, *receivers), timeout=self.timeout_s)
        self._local_sender = made if sender is None else None
        self._remote_sender = sender

    async def close(self) -> None:
        """Release the receivers, a local sender and every part's own resources (e.g. a rendezvous store)."""
        await super().close()
        for sub in self.substrategies:
            await sub.close()


async def sender_location(sender: Any, device: str) -> Location:
    """Where the sender runs: this process when `sender` is None, else the actor's (`WeightSenderHost`)."""
    if sender is None:
        return this_location(device)
    return Location.from_dict(await sender.weight_sender_location.remote(device))


async def plan_for(
    backend: str, sender: Any, engines: list[Any], colocated: bool, device: str
) -> list[tuple[str, list[int]]]:
    """The `(strategy name, engine indices)` parts a sync to `engines` takes: `auto` planned per engine from where
    the sender and each engine run, or the named backend for all of them once `check_backend` accepted it."""
    handles = [engine_handle(engine, index) for index, engine in enumerate(engines)]
    infos = await asyncio.gather(*(handle.engine_info.remote() for handle in handles))
    where = [Location.from_dict(info) for info in infos]
    sender_at = await sender_location(sender, device)
    if backend == "auto":
        return plan_weight_sync(sender_at, where, colocated, device)
    check_backend(backend, sender_at, where, device)
    return [(backend, list(range(len(engines))))]


async def connect_weight_sync(
    backend: str, sender: Any, engines: list[Any], colocated: bool, device: str, **options: Any
) -> WeightSyncStrategy:
    """The initialised strategy between `sender` and `engines` for `weight_sync_backend=backend` (`plan_for`): one
    plain strategy when a single transport serves every engine, else a `MixedStrategy`."""
    parts = await plan_for(backend, sender, engines, colocated, device)
    if len(parts) == 1:
        strategy = make_weight_sync_strategy(parts[0][0], **options)
    else:
        strategy = MixedStrategy(parts, **options)
    await strategy.init(sender=sender, engines=engines)
    return strategy


async def connect_auto_weight_sync(
    sender: Any, engines: list[Any], colocated: bool, device: str, **options: Any
) -> WeightSyncStrategy:
    """`connect_weight_sync("auto", ...)`."""
    return await connect_weight_sync("auto", sender, engines, colocated, device, **options)


def describe_weight_sync(strategy: WeightSyncStrategy) -> str:
    """E.g. `shm -> engines [0, 1]` or `shm -> engines [0]; broadcast -> engines [1]` (for the run's log)."""
    parts = (
        strategy.parts if isinstance(strategy, MixedStrategy) else [(strategy.name, list(range(len(strategy.engines))))]
    )
    return "; ".join(f"{name} -> engines {indices}" for name, indices in parts)
