"""Weight sync without the gather: every FSDP2 rank writes its own rows straight into the `shm` sender's block.

The general sync gathers the whole model on rank 0 (`get_weights`) and rank 0 then packs it into shared memory. With
the `shm` transport both steps can go: an FSDP2 shard is a dim-0 `torch.chunk` of its parameter, so its rows are one
contiguous run of the packed tensor, and every rank can cast and copy its own rows into the block at their offset.
Rank 0 then only tells the engines a chunk is ready; the block's layout (names, shapes, dtype, order, chunks) is
exactly the one `WeightSender.send` packs, so the engines' receiver is the same. The gather's collectives and rank 0's
copy go away, and rank 0 no longer holds a gathered copy of the model.

Rank 0 decides the path each sync (`shm` sender, no LoRA adapters, every DTensor a dim-0 shard of a 1-D CPU mesh)
and broadcasts one integer: 0 for the general path, else the id of the plan it proposes. The plan (block name, dtype,
chunk layout) travels once, when its id changes. Per chunk: every rank writes its rows, a barrier, rank 0 notifies
the engines and waits for their acknowledgements, and (before the next chunk) a barrier so no rank overwrites a
chunk the engines are still copying. After the last chunk no barrier is needed: the next sync starts only after the
driver has every rank's answer to this one, which rank 0 gives after the engines acknowledged, and, when the final
chunk's installation was deferred to the engines' next generate, after the driver saw every engine install it.

A sync inside the policy update whose plan is one chunk, deferred to the engines' next generate, needs neither the
agreement nor a barrier once a plan was agreed (`send_presumed`): every rank writes its rows with that plan and reports
it (`PresumedWrite`), rank 0 after checking that its proposal is still that plan, and the driver, which has every
rank's answer before it hands the chunk to the engines, checks they all wrote with rank 0's plan (`update_send`), so a
sync costs no gloo collective at all. When rank 0's plan changed it writes nothing, and the driver runs the sync again
with an agreement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from skyrl_train.weight_sync.base import SendResult
from skyrl_train.weight_sync.chunks import dtype_from_name, dtype_name, nbytes_as, plan_chunks
from skyrl_train.weight_sync.shm import MappedBlock, SharedMemorySender
from skyrl_train.workers.strategy.flat_gather import shard_rows


@dataclass(frozen=True)
class ShardWritePlan:
    """Where each tensor goes in the block: per chunk, `(name, shape, byte offset)` of every tensor, in send order."""

    plan_id: int
    block_name: str
    dtype: str
    chunks: tuple[tuple[tuple[str, tuple[int, ...], int], ...], ...]

    def chunk_bytes(self, index: int) -> int:
        """Bytes of chunk `index` in the block."""
        element = torch.empty((), dtype=dtype_from_name(self.dtype)).element_size()
        return sum(math.prod(shape) * element for _, shape, _ in self.chunks[index])


@dataclass(frozen=True)
class PresumedWrite:
    """One rank's part of a sync written with the plan agreed in an earlier one, with no collective
    (`ShardedSend.send_presumed`): the plan it wrote with (0 when rank 0's plan changed: it wrote and sent nothing,
    and the sync has to run again with an agreement), and on rank 0 its `SendResult` (the chunk left to the engines'
    next generate)."""

    plan_id: int
    result: Optional[SendResult] = None


def update_send(parts: list[Any]) -> Optional[SendResult]:
    """Rank 0's `SendResult` from the per-rank `weight_sync` values of a policy update that synced
    (`MiniBatchResult.weight_sync`); None when the ranks presumed a plan that rank 0 no longer proposes (nothing was
    sent: the caller syncs again, with an agreement). Raises when no rank sent, or when ranks wrote with other plans
    than rank 0's (the block would mix two layouts)."""
    presumed = [part for part in parts if isinstance(part, PresumedWrite)]
    if not presumed:
        sent = next((part for part in parts if part is not None), None)
        if sent is None:
            raise RuntimeError("the policy update was asked to sync the weights, but no rank reported a send")
        return sent
    if len(presumed) != len(parts):
        raise RuntimeError(f"sharded weight sync: some ranks presumed the agreed plan and others did not: {parts!r}")
    lead = presumed[0]  # rank 0's
    if lead.plan_id == 0:
        return None
    others = [rank for rank, part in enumerate(presumed) if part.plan_id != lead.plan_id]
    if others or lead.result is None:
        raise RuntimeError(
            f"sharded weight sync: ranks {others} wrote with another plan than rank 0's ({lead.plan_id}); the agreed "
            "plans diverged, so the block holds a mix and is not handed to the engines"
        )
    return lead.result


class ShardedSend:
    """One policy rank's side of the sharded `shm` sync: the plan it last agreed on and the block it has mapped."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.distributed = world_size > 1  # a single rank has no peers to agree or wait on
        self.plan: Optional[ShardWritePlan] = None
        self._mapped = MappedBlock()
        self._proposals = 0  # rank 0: plans proposed so far (ids start at 1)
        self._proposed_for: Optional[tuple[int, str, tuple]] = None  # rank 0: (sender id, block, layout) of the plan
        self._layout_of: Optional[tuple] = None  # rank 0: (state, sender settings, layout, chunk sizes) last planned
        self._pieces_of: Optional[tuple] = None  # (plan id, state, {chunk index: pieces}) last written

    def propose(self, sender: Any, state: Optional[dict[str, torch.Tensor]], version: int) -> Optional[ShardWritePlan]:
        """Rank 0: the plan for this sync, or None for the general path (not an `shm` sender, `state` None, or a
        `version` the sender refuses: the general path then raises once every rank left the gather, where here the
        other ranks would wait in a barrier for a rank that gave up)."""
        if state is None or not isinstance(sender, SharedMemorySender) or version <= sender.last_version:
            return None
        settings = (id(sender), sender.chunk_bytes, sender.dtype)
        if self._layout_of is None or self._layout_of[0] is not state or self._layout_of[1] != settings:
            layout, sizes = [], []
            for chunk in plan_chunks(list(state.items()), sender.chunk_bytes, sender.dtype):
                offset, placed = 0, []
                for name, value in chunk:
                    placed.append((name, tuple(value.shape), offset))
                    offset += nbytes_as(value, sender.dtype)
                layout.append(tuple(placed))
                sizes.append(offset)
            self._layout_of = (state, settings, layout, sizes)  # the same state again (see FSDP2Strategy): reused
        _, _, layout, sizes = self._layout_of
        block = sender.block_for(max(sizes))
        key = (id(sender), block.name, tuple(layout))
        if key != self._proposed_for:
            self._proposals += 1
            self._proposed_for = key
        return ShardWritePlan(self._proposals, block.name, dtype_name(sender.dtype), tuple(layout))

    def agree(self, proposal: Optional[ShardWritePlan]) -> Optional[ShardWritePlan]:
        """Every rank: rank 0's `proposal` (what the others pass is ignored), received once per plan id."""
        if not self.distributed:
            self.plan = proposal
            return proposal
        plan_id = torch.tensor([proposal.plan_id if (self.rank == 0 and proposal) else 0], dtype=torch.int64)
        dist.broadcast(plan_id, src=0)
        if int(plan_id) == 0:
            return None
        if self.plan is None or self.plan.plan_id != int(plan_id):
            carrier = [proposal if self.rank == 0 else None]
            dist.broadcast_object_list(carrier, src=0)
            self.plan = carrier[0]
        return self.plan

    def can_presume(self, defer_final: bool) -> bool:
        """Whether this sync may write with the plan agreed earlier, without agreeing again or waiting on the other
        ranks (`send_presumed`): several ranks, a final chunk left to the engines' next generate, and an agreed plan of
        one chunk. The same answer on every rank: they agreed on the same plan."""
        return self.distributed and defer_final and self.plan is not None and len(self.plan.chunks) == 1

    def send_presumed(
        self, state: dict[str, torch.Tensor], sender: Optional[SharedMemorySender], version: int
    ) -> PresumedWrite:
        """Every rank, with no collective: write this rank's rows of the plan's one chunk, which stays in the block
        for the engines' next generate. Rank 0 first checks that it still proposes that plan (else it writes and sends
        nothing, and reports plan 0). No barrier is needed: the engines get the chunk only from the driver, once it has
        every rank's answer (`update_send`), and nothing reads the block before (the last sync's chunk was installed
        before this update started)."""
        plan = self.plan
        if self.rank != 0:
            self.write_chunk(state, 0)
            return PresumedWrite(plan.plan_id)
        proposal = self.propose(sender, state, version)
        if proposal is None or proposal.plan_id != plan.plan_id:
            return PresumedWrite(0)

        def write(index: int) -> None:
            self.write_chunk(state, index)

        result = sender.send_written(plan, version, write, writers=self.world_size, defer_final=True)
        return PresumedWrite(plan.plan_id, result)

    def write_chunk(self, state: dict[str, torch.Tensor], index: int) -> None:
        """Cast and copy this rank's rows of chunk `index`'s tensors into the block (rank 0 also writes the entries
        that are not sharded)."""
        plan = self.plan
        block = self._mapped.get(plan.block_name)
        dtype = dtype_from_name(plan.dtype)
        target = torch.frombuffer(block.buf, dtype=torch.uint8, count=plan.chunk_bytes(index))
        try:
            for local, begin, size in self._pieces(state, index):
                target[begin : begin + size].view(dtype).view(local.shape).copy_(local)
        finally:
            del target  # no view may outlive the write: the block may be closed later

    def _pieces(self, state: dict[str, torch.Tensor], index: int) -> list[tuple[torch.Tensor, int, int]]:
        """`(this rank's local tensor, byte offset, byte size)` of each piece of chunk `index` it writes, derived
        once per plan and state: the state's tensors view the live parameters (see `FSDP2Strategy`), so the pieces
        stay valid while the same state comes back."""
        plan = self.plan
        if self._pieces_of is None or self._pieces_of[0] != plan.plan_id or self._pieces_of[1] is not state:
            self._pieces_of = (plan.plan_id, state, {})
        by_chunk = self._pieces_of[2]
        if index not in by_chunk:
            element = torch.empty((), dtype=dtype_from_name(plan.dtype)).element_size()
            pieces = []
            for name, shape, offset in plan.chunks[index]:
                value = state[name]
                if isinstance(value, DTensor):
                    start, stop = shard_rows(shape[0], self.world_size, self.rank)
                    local = value.to_local().detach()
                    row = math.prod(shape[1:])
                    if local.numel() != (stop - start) * row:
                        raise RuntimeError(
                            f"sharded weight sync: rank {self.rank} holds {tuple(local.shape)} of '{name}' "
                            f"{shape}, not the torch.chunk rows {start}:{stop}"
                        )
                    begin = offset + start * row * element
                elif self.rank == 0:
                    local, begin = value.detach(), offset
                else:
                    continue
                if local.numel():
                    pieces.append((local, begin, local.numel() * element))
            by_chunk[index] = pieces
        return by_chunk[index]

    def send(
        self,
        state: dict[str, torch.Tensor],
        sender: Optional[SharedMemorySender],
        version: int,
        defer_final: bool = False,
    ) -> Optional[SendResult]:
        """Every rank: write each chunk and (rank 0, through `sender`) hand it to the engines; with `defer_final` the
        final chunk is left in the block for the engines' next generate (`SharedMemorySender.send_written`). Returns
        rank 0's `SendResult`, None elsewhere."""
        plan = self.plan

        def write(index: int) -> None:
            if index and self.distributed:  # the engines acknowledged chunk index - 1 before rank 0 got here
                dist.barrier()
            self.write_chunk(state, index)
            if self.distributed:
                dist.barrier()  # every rank's rows of this chunk are in the block

        if self.rank != 0:
            for index in range(len(plan.chunks)):
                write(index)
            return None
        return sender.send_written(plan, version, write, writers=self.world_size, defer_final=defer_final)

    def close(self) -> None:
        """Unmap the block (rank 0's sender owns and unlinks it)."""
        self._mapped.close()
