"""How a WorkerGroup starts its ranks: all at once when the worker class takes rank 0's address after construction
(`set_master_address`, every `BaseWorker`), rank 0 first otherwise; and `BaseWorker`'s side of that handshake."""

import time
from pathlib import Path

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.workers import WorkerGroup
from skyrl_train.workers.worker import BaseWorker

RANK_0_ADDRESS = ("127.0.0.1", 4321)


class _StartOrderWorker:
    """Records what it was constructed with. Rank 0 waits (up to `wait_s`) for rank 1's file before it finishes its
    constructor: only a group that starts rank 1 without waiting for rank 0 lets it see that file."""

    def __init__(self, role, rank, world_size, master_addr, master_port, cfg, threads):
        folder = Path(cfg["folder"])
        self.constructed_with = (master_addr, master_port)
        self.saw_rank_1_start = None
        if rank == 1:
            (folder / "rank1").write_text("started")
        if rank == 0:
            deadline = time.monotonic() + cfg["wait_s"]
            while not (folder / "rank1").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.saw_rank_1_start = (folder / "rank1").exists()
            master_addr, master_port = RANK_0_ADDRESS
        self.address = (master_addr, master_port)

    def master_address(self):
        return self.address

    def facts(self):
        return {"constructed_with": self.constructed_with, "address": self.address, "saw": self.saw_rank_1_start}


class _ToldLaterWorker(_StartOrderWorker):
    def set_master_address(self, master_addr, master_port):
        self.address = (master_addr, master_port)


def _facts(worker_cls: type, folder: Path, wait_s: float) -> tuple[dict, dict]:
    """Start a 2-rank group of `worker_cls` and return what each rank recorded."""
    group = WorkerGroup("policy", worker_cls, 2, {"folder": str(folder), "wait_s": wait_s}, num_cpus_per_worker=0.5)
    try:
        rank_0, rank_1 = group.run_all("facts")
    finally:
        group.shutdown()
    return rank_0, rank_1


@pytest.mark.integration
def test_ranks_that_take_the_address_later_all_start_before_rank_0_answers(ray_cluster, tmp_path):
    rank_0, rank_1 = _facts(_ToldLaterWorker, tmp_path, wait_s=60)
    assert rank_0["saw"] is True  # rank 1 ran its constructor while rank 0 was still in its own
    assert rank_1["constructed_with"] == (None, None)
    assert rank_0["address"] == rank_1["address"] == RANK_0_ADDRESS  # told by set_master_address


@pytest.mark.integration
def test_a_class_without_set_master_address_gets_rank_0s_address_at_construction(ray_cluster, tmp_path):
    rank_0, rank_1 = _facts(_StartOrderWorker, tmp_path, wait_s=1)
    assert rank_0["saw"] is False  # rank 1 was created only once rank 0 had answered
    assert rank_1["constructed_with"] == RANK_0_ADDRESS


def _config() -> SkyRLConfig:
    return SkyRLConfig.from_cli_overrides(["trainer.device=cpu"], validate=False)


def test_a_rank_created_without_an_address_refuses_to_join_until_told():
    worker = BaseWorker("policy", 1, 2, None, None, _config())
    assert worker.master_address() == (None, None)
    with pytest.raises(RuntimeError, match="policy rank 1 does not know where rank 0 listens.*set_master_address"):
        worker.join_process_group()
    worker.set_master_address("10.0.0.7", "29500")
    assert worker.master_address() == ("10.0.0.7", 29500)


def test_rank_0_keeps_the_address_it_chose():
    worker = BaseWorker("policy", 0, 2, None, None, _config())
    try:
        chosen = worker.master_address()
        assert chosen[0] and chosen[1] > 0
        worker.set_master_address(*chosen)  # its own address: accepted
        with pytest.raises(ValueError, match="rank 0 listens at"):
            worker.set_master_address("10.0.0.7", 29500)
        assert worker.master_address() == chosen
    finally:
        del worker  # its rendezvous store stops listening


def test_an_address_without_a_port_is_refused():
    with pytest.raises(ValueError, match="master_addr and master_port come together"):
        BaseWorker("policy", 1, 2, "10.0.0.7", None, _config())
