"""`WeightPublisher`'s memory hand-over on a colocated GPU run: the workers give their freed GPU memory back before
the engines wake (worker groups and engines are stand-ins recording what they are asked: no GPU here)."""

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.run_plan import RunPlan
from skyrl_train.weight_publisher import WeightPublisher


class _Group:
    """A worker group stand-in recording `run_all` calls (the workers' own `release_memory` acts on GPUs only)."""

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def run_all(self, method: str) -> list:
        self.log.append((self.name, method))
        return [{}]


class _Client:
    def __init__(self, log: list) -> None:
        self.log = log

    async def sleep(self) -> None:
        self.log.append(("engines", "sleep"))

    async def wake_up(self) -> None:
        self.log.append(("engines", "wake_up"))


async def test_workers_return_cached_gpu_memory_before_the_engines_wake():
    """The hand-over of a colocated GPU step: the engines sleep, the workers train, then every worker group sharing
    the GPUs (policy, ref, critic, reward model) empties its caching allocator, and only then do the engines wake."""
    cfg = SkyRLConfig.from_cli_overrides(["trainer.device=cuda", "trainer.placement.colocate_all=true"], validate=False)
    log: list = []
    groups = [_Group(name, log) for name in ("policy", "ref", "critic", "reward")]
    plan = RunPlan.from_config(cfg, False, can_defer_install=False)
    publisher = WeightPublisher(None, None, _Client(log), plan, colocated_groups=[*groups, None])
    async with publisher.engines_asleep():
        log.append(("workers", "train"))
    assert log[:2] == [("engines", "sleep"), ("workers", "train")] and log[-1] == ("engines", "wake_up")
    assert sorted(name for name, method in log[2:-1] if method == "release_memory") == [
        "critic",
        "policy",
        "ref",
        "reward",
    ]
    assert len(log) == 7
