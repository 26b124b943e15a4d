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
