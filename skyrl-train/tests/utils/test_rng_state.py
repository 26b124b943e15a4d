"""`torch_seeded`: a seeded block repeats its draws and leaves torch's generator as if it had not run."""

import torch

from skyrl_train.utils.rng_state import cuda_rng_devices, torch_seeded


def test_seeded_draws_repeat_and_the_generator_state_comes_back():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    with torch_seeded(7):
        first = torch.rand(4)
    with torch_seeded(7):
        second = torch.rand(4)
    assert torch.equal(first, second)
    assert torch.equal(torch.rand(3), expected_next)  # the outer stream continues as if nothing was drawn


def test_no_seed_leaves_the_generator_running():
    torch.manual_seed(5)
    expected = torch.rand(6)
    torch.manual_seed(5)
    with torch_seeded(None):
        inside = torch.rand(2)
    assert torch.equal(torch.cat([inside, torch.rand(4)]), expected)


def test_seeded_restores_every_generator_manual_seed_reseeds(monkeypatch):
    """`torch.manual_seed` also reseeds each CUDA device's generator, so `torch_seeded` saves and restores those too
    (the device list only: CUDA cannot run here)."""
    assert cuda_rng_devices() == ([] if not torch.cuda.is_available() else list(range(torch.cuda.device_count())))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert cuda_rng_devices() == [0, 1]
