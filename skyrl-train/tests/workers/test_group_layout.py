"""WorkerGroup on local Ray with Megatron's layout: the ranks of one tensor-parallel group get the same shard, and
only their first rank's results are joined."""

import pytest
import torch

from skyrl_train.config import SkyRLConfig
from skyrl_train.workers import WorkerGroup

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class ShardRecorder:
    """A minimal worker (WorkerGroup's constructor contract): records the rows each rank receives."""

    def __init__(self, role, rank, world_size, master_addr, master_port, cfg, num_threads):
        self.rank = rank
        self.rows = None

    def master_address(self):
        return "127.0.0.1", 1

    def rows_times_ten_plus_rank(self, batch):
        self.rows = list(batch.uids)
        return torch.tensor([[int(uid) * 10 + self.rank] for uid in batch.uids])

    def seen(self):
        return self.rows


def test_tensor_parallel_pairs_share_rows_and_report_once(ray_cluster, make_batch):
    cfg = SkyRLConfig.from_cli_overrides(
        ["trainer.strategy=megatron", "trainer.policy.megatron.tensor_model_parallel_size=2"], validate=False
    )
    batch = make_batch(rows=6)
    batch.uids = [str(i) for i in range(6)]
    group = WorkerGroup("policy", ShardRecorder, 4, cfg, num_cpus_per_worker=0.5)
    try:
        joined = group.run_sharded("rows_times_ten_plus_rank", batch)
        seen = group.run_all("seen")
    finally:
        group.shutdown()
    assert seen == [["0", "1", "2"], ["0", "1", "2"], ["3", "4", "5"], ["3", "4", "5"]]
    # rows in order, each reported by tensor-parallel rank 0 of its group (ranks 0 and 2)
    assert joined[:, 0].tolist() == [0, 10, 20, 32, 42, 52]
