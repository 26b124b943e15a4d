"""`engines_sleep_while_training`: colocated engines sleep during training only where sleeping frees GPU memory."""

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.trainer import engines_sleep_while_training


@pytest.mark.parametrize(
    ("device", "colocate_all", "sleeps"),
    [("cuda", True, True), ("cuda", False, False), ("cpu", True, False), ("cpu", False, False)],
)
def test_engines_sleep_only_when_colocated_on_gpus(device, colocate_all, sleeps):
    cfg = SkyRLConfig()
    cfg.trainer.device = device
    cfg.trainer.placement.colocate_all = colocate_all
    assert engines_sleep_while_training(cfg) is sleeps


class _Log(list):
    """What the stand-ins below were asked to do, in order."""


class _Group:
    """A worker group stand-in recording `run_all` calls (the workers' own `release_memory` runs on GPUs only)."""

    def __init__(self, name: str, log: _Log) -> None:
        self.name, self.log = name, log

    def run_all(self, method: str) -> list:
        self.log.append((self.name, method))
        return [{}]


class _Client:
    def __init__(self, log: _Log) -> None:
        self.log = log

    async def wake_up(self) -> None:
        self.log.append(("engines", "wake_up"))


async def test_workers_return_cached_gpu_memory_before_the_engines_wake():
    """The memory hand-over of a colocated GPU step: every worker group sharing the GPUs (policy, ref, critic and
    reward model) empties its caching allocator, and only then do the engines wake into that memory."""
    from skyrl_train.trainer import RayPPOTrainer

    cfg = SkyRLConfig.from_cli_overrides(["trainer.device=cuda", "trainer.placement.colocate_all=true"], validate=False)
    log = _Log()
    groups = {name: _Group(name, log) for name in ("policy", "ref", "critic", "reward")}
    parts = dict(generator=None, weight_sync=None, tracker=None, client=_Client(log))
    trainer = RayPPOTrainer(
        cfg, None, None, [], policy=groups["policy"], ref=groups["ref"], critic=groups["critic"], **parts
    )
    trainer.reward_scorer = type("Scorer", (), {"reward_group": groups["reward"]})()
    await trainer.wake_engines()
    released = [entry for entry in log if entry[1] == "release_memory"]
    assert sorted(name for name, _ in released) == ["critic", "policy", "ref", "reward"]
    assert log[-1] == ("engines", "wake_up") and len(log) == 5


def test_a_cuda_worker_empties_its_caching_allocator_and_a_cpu_worker_has_nothing_to_do(tiny_model_dir, monkeypatch):
    """`BaseWorker.release_memory`: CUDA cannot run here, so the allocator calls are stand-ins that record them."""
    import torch

    from skyrl_train.workers.policy_worker import PolicyWorker

    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 7)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 5)
    cfg = SkyRLConfig.from_cli_overrides(["trainer.device=cpu", f"trainer.policy.model.path={tiny_model_dir}"])
    worker = PolicyWorker("policy", 0, 1, None, None, cfg)
    assert worker.release_memory() == {"reserved_bytes": 0, "allocated_bytes": 0} and calls == []
    worker.device = torch.device("cuda", 0)
    assert worker.release_memory() == {"reserved_bytes": 7, "allocated_bytes": 5} and calls == ["empty_cache"]
