"""How `BasePPOExp` starts its actors: the worker groups and the engines at once (two threads), except when they
share GPUs; an error of either hook is raised once both ended. The hooks are overridden with stand-ins that record
what they saw (no Ray, no model): this is about the order of the calls, which the real hooks do not show."""

import asyncio
import threading

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.entrypoints.main_base import BasePPOExp

WAIT_S = 30
"""How long a stand-in hook waits for the other to start: never reached when both run at once."""


class _WorkersFailed(RuntimeError):
    pass


class _StartOrderExp(BasePPOExp):
    """Stops `_run` right after the two hooks: the workers' hook raises once it saw (or gave up waiting for) the
    engines' hook start, so the test reads the order from the error."""

    def __init__(self, cfg: SkyRLConfig) -> None:
        super().__init__(cfg)
        self.engines_started = threading.Event()
        self.engines_finished = threading.Event()
        self.tokenizer, self.train_loader, self.eval_items, self.total_steps = None, None, [], 1

    def get_placement(self):
        return None

    def get_worker_groups(self, placement, total_steps):
        saw = self.engines_started.wait(WAIT_S)
        raise _WorkersFailed(f"engines started before the workers' hook ended: {saw}")

    def get_inference_engines(self, placement):
        self.engines_started.set()
        self.engines_finished.set()
        return []


def _config(*overrides: str) -> SkyRLConfig:
    return SkyRLConfig.from_cli_overrides(list(overrides), validate=False)


def test_the_engines_start_while_the_worker_groups_are_made_and_a_hooks_error_waits_for_the_other():
    experiment = _StartOrderExp(_config("trainer.device=cpu"))
    assert experiment.engines_start_beside_workers()
    with pytest.raises(_WorkersFailed, match="engines started before the workers' hook ended: True"):
        asyncio.run(experiment._run())
    assert experiment.engines_finished.is_set()  # the error came once the engines' hook had ended too


@pytest.mark.parametrize(
    "overrides, beside",
    [
        (["trainer.device=cpu", "trainer.placement.colocate_all=true"], True),
        (["trainer.device=cuda", "trainer.placement.colocate_all=false"], True),
        (["trainer.device=cuda", "trainer.placement.colocate_all=true"], False),
    ],
)
def test_engines_that_share_gpus_with_the_workers_start_after_them(overrides, beside):
    assert BasePPOExp(_config(*overrides)).engines_start_beside_workers() is beside


def test_with_the_hook_saying_no_the_workers_come_first():
    class OneAfterTheOther(_StartOrderExp):
        def engines_start_beside_workers(self) -> bool:
            return False

        def get_worker_groups(self, placement, total_steps):
            raise _WorkersFailed(f"engines started first: {self.engines_started.is_set()}")

    experiment = OneAfterTheOther(_config("trainer.device=cpu"))
    with pytest.raises(_WorkersFailed, match="engines started first: False"):
        asyncio.run(experiment._run())
    assert not experiment.engines_started.is_set()  # the workers' hook ran alone, and its error ended the start
