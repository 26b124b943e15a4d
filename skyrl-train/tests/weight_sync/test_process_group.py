"""The stand-alone sync group: a rank made the way SGLang's `init_weights_update_group` makes one (tcp:// rendezvous on
the coordinator's store, a `PrefixStore` named after the group, torch's `_new_process_group_helper`) joins a group
whose other rank comes from our `join_group`, and receives the bytes our sender broadcasts. That is the CPU twin
(gloo, `cpu:gloo` for the helper) of SGLang's tensor-parallel workers joining a `broadcast` sync over NCCL; the rank
layout that puts those workers after the sender is checked too.
"""

import subprocess
import sys
import textwrap

import pytest
import torch

from skyrl_train.weight_sync.broadcast import rank_offsets
from skyrl_train.weight_sync.process_group import broadcast_from_rank0, host_store, join_group

TIMEOUT_S = 60.0

HELPER_RANK = textwrap.dedent("""
    import datetime, os, sys
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import Backend, PrefixStore, _new_process_group_helper, _world, rendezvous

    port, group_name, rank, world_size, numel = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(
        sys.argv[5]
    )
    timeout = datetime.timedelta(seconds=60)
    store, rank, world_size = next(rendezvous(f"tcp://127.0.0.1:{port}", rank, world_size, timeout=timeout))
    store = PrefixStore(group_name, store)  # as SGLang's init_custom_process_group does
    group, _ = _new_process_group_helper(world_size, rank, [], Backend("cpu:gloo"), store, group_name=group_name,
                                         timeout=timeout)
    _world.pg_group_ranks[group] = {i: i for i in range(world_size)}
    received = torch.zeros(numel, dtype=torch.uint8)
    dist.broadcast(received, src=0, group=group)  # what SGLang's worker does with a flattened bucket
    print(received.view(torch.bfloat16).float().tolist(), flush=True)
    # Skip the interpreter's teardown: destroying the gloo group at exit while its peer still holds it sometimes
    # aborted this helper ("terminate called without an active exception", seen once in a loaded suite run), after
    # it had printed what the test checks.
    os._exit(0)
    """)


@pytest.mark.integration
def test_a_rank_made_by_torch_helpers_receives_our_broadcast():
    store = host_store("127.0.0.1", TIMEOUT_S)
    sent = torch.tensor([1.5, -2.0, 0.25, 3.0], dtype=torch.bfloat16)
    child = subprocess.Popen(
        [sys.executable, "-c", HELPER_RANK, str(store.port), "sync_g", "1", "2", str(sent.numel() * 2)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        group = join_group("127.0.0.1", store.port, "sync_g", 0, 2, "gloo", TIMEOUT_S)
        broadcast_from_rank0(group, sent.view(torch.uint8))
        out, err = child.communicate(timeout=TIMEOUT_S)
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert out.strip() == str(sent.float().tolist())


def test_engines_take_consecutive_ranks_after_the_sender():
    assert rank_offsets([1, 1, 1]) == [1, 2, 3, 4]
    assert rank_offsets([2, 4]) == [1, 3, 7]  # two SGLang engines with tp 2 and 4: world size 7
    with pytest.raises(ValueError, match="engine 1 reports sync_ranks=0"):
        rank_offsets([1, 0])
