"""Rendezvous: rank 0 listens on its port from the moment it reports it, and the other ranks join through it."""

import multiprocessing
import socket

import pytest
import torch
import torch.distributed as dist

from skyrl_train.workers.distributed import init_process_group, rendezvous_store


def _join_as_rank_1(port: int, results) -> None:
    init_process_group(1, 2, "127.0.0.1", port, torch.device("cpu"))
    total = torch.tensor([1.0])
    dist.all_reduce(total)
    results.put(float(total))
    dist.destroy_process_group()


def test_rendezvous_store_holds_its_port_and_forms_the_group():
    store = rendezvous_store(world_size=2)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other, pytest.raises(OSError):
        other.bind(("0.0.0.0", store.port))  # the port is taken from the start
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    rank_1 = context.Process(target=_join_as_rank_1, args=(store.port, results))
    rank_1.start()
    try:
        init_process_group(0, 2, "127.0.0.1", store.port, torch.device("cpu"), store=store)
        total = torch.tensor([2.0])
        dist.all_reduce(total)
        assert float(total) == 3.0 and results.get(timeout=60) == 3.0  # rank 1 joined over tcp:// with the same keys
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        rank_1.join(timeout=60)
    assert rank_1.exitcode == 0
