"""The rank-side helpers of `LoraRank`, in process: the gradient all-reduce keeps "no gradient" apart from "zero
gradient", the seeded block restores the generator, and checkpoint files survive the trip as bytes. (Two real ranks
are tested through `RayLoraHost` in test_ray_compute.py.)"""

from __future__ import annotations

import pytest
import torch

from skyrl_tx.ray_rank import all_reduce_gradients, cuda_rng_devices, read_files, seeded, write_files


@pytest.fixture
def single_rank_group():
    """A world-size-1 gloo process group in this process."""
    import torch.distributed as dist

    from skyrl_train.workers.distributed import free_port

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield
    if created:
        dist.destroy_process_group()


def test_all_reduce_keeps_gradients_and_leaves_missing_ones_missing(single_rank_group):
    with_grad = torch.nn.Parameter(torch.zeros(2, 3))
    with_grad.grad = torch.arange(6.0).reshape(2, 3)
    zero_grad = torch.nn.Parameter(torch.ones(4))
    zero_grad.grad = torch.zeros(4)
    without = torch.nn.Parameter(torch.ones(5))
    all_reduce_gradients([with_grad, without, zero_grad])
    assert torch.equal(with_grad.grad, torch.arange(6.0).reshape(2, 3))  # one rank: the sum is its own gradient
    assert torch.equal(zero_grad.grad, torch.zeros(4))  # a zero gradient stays a (zero) gradient: AdamW steps on it
    assert without.grad is None  # no rank had one: AdamW skips it, as in one process


def test_seeded_draws_repeat_and_the_generator_state_comes_back():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    with seeded(7):
        first = torch.rand(4)
    with seeded(7):
        second = torch.rand(4)
    assert torch.equal(first, second)
    assert torch.equal(torch.rand(3), expected_next)  # the outer stream continues as if nothing was drawn


def test_seeded_restores_every_generator_manual_seed_reseeds(monkeypatch):
    """`torch.manual_seed` also reseeds each CUDA device's generator, so `seeded` saves and restores those too (the
    device list only: CUDA cannot run here)."""
    assert cuda_rng_devices() == ([] if not torch.cuda.is_available() else list(range(torch.cuda.device_count())))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert cuda_rng_devices() == [0, 1]


def test_files_travel_as_bytes(tmp_path):
    source = tmp_path / "a"
    written = write_files(source, {"x.bin": b"\x00\x01", "meta.json": b"{}"})
    assert written == 4
    assert read_files(source, ("x.bin", "meta.json")) == {"x.bin": b"\x00\x01", "meta.json": b"{}"}
