"""Trainer state round trip and RNG capture/restore: restoring reproduces the next random draws."""

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from skyrl_train.utils.checkpoint_io import begin_checkpoint, commit_checkpoint, latest_valid
from skyrl_train.utils.plain_values import to_jsonable
from skyrl_train.utils.rng_state import capture_rng_state, restore_rng_state
from skyrl_train.utils.trainer_state import load_trainer_state, save_trainer_state


def draws():
    return (
        [random.random() for _ in range(3)],
        [random.gauss(0, 1) for _ in range(3)],
        np.random.rand(3).tolist(),
        np.random.standard_normal(3).tolist(),
        torch.rand(3).tolist(),
        torch.randint(0, 1000, (3,)).tolist(),
    )


def test_restore_reproduces_next_draws():
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    draws()  # move every generator off its seed state
    random.gauss(0, 1)  # leaves a cached second gaussian in Python's state
    np.random.standard_normal()  # and in NumPy's
    saved = capture_rng_state()
    expected = draws()
    assert draws() != expected  # the generators really advance
    restore_rng_state(saved)
    assert draws() == expected


def test_restore_rejects_foreign_state():
    with pytest.raises(ValueError, match=r"missing \['numpy', 'torch'\]"):
        restore_rng_state({"version": 1, "python": {}})


@dataclass
class TinySection:
    lr: float = 1e-6
    path: Path = Path("/data/x.parquet")


def test_trainer_state_round_trip_through_committed_checkpoint(tmp_path):
    root = str(tmp_path)
    torch.manual_seed(0)
    tmp = begin_checkpoint(root, 12)
    dataloader_state = {"version": 1, "epoch": 2, "position": 48, "seed": 42}
    config = {"trainer": TinySection(), "tags": ("a", "b"), "np_value": np.float32(0.5)}
    save_trainer_state(tmp, 12, dataloader_state, config, extra={"kl_coef": 0.01})
    expected_next = torch.rand(4).tolist()
    commit_checkpoint(root, 12, tmp)

    torch.rand(10)  # the run goes on, then "crashes"
    state = load_trainer_state(latest_valid(root))

    assert state.global_step == 12
    assert state.dataloader == dataloader_state
    assert state.config == {
        "trainer": {"lr": 1e-6, "path": "/data/x.parquet"},
        "tags": ["a", "b"],
        "np_value": 0.5,
    }
    assert state.extra == {"kl_coef": 0.01}
    assert torch.rand(4).tolist() == expected_next  # RNG restored on load


def test_unserialisable_config_names_the_key():
    with pytest.raises(TypeError, match=r"config\.trainer\.fn has type function, which is not a plain"):
        to_jsonable({"trainer": {"fn": lambda: None}}, "config")


def test_missing_trainer_state_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no trainer_state.json"):
        load_trainer_state(str(tmp_path))
