"""`MultiLoraWorker` in process (world size 1, no Ray): whole or FSDP2-sharded by skyrl_train's strategy, it computes
what an in-process `LoraHost` computes, and the gradient sum keeps "no gradient" apart from "zero gradient". (Two real
ranks are tested through `RayLoraHost` in test_ray_compute.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skyrl_tx.compute import LoraHost, LoraSpec, SampleJob
from skyrl_tx.lora_worker import MultiLoraWorker, sum_gradients, worker_config
from skyrl_tx.wire import TrainDatum

ADAM = {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "grad_clip_norm": 1.0}


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


@pytest.fixture(scope="module")
def model_dir(save_tiny_model):
    return save_tiny_model(size=1)


def test_the_gradient_sum_keeps_gradients_and_leaves_missing_ones_missing(single_rank_group):
    with_grad = torch.nn.Parameter(torch.zeros(2, 3))
    with_grad.grad = torch.arange(6.0).reshape(2, 3)
    zero_grad = torch.nn.Parameter(torch.ones(4))
    zero_grad.grad = torch.zeros(4)
    without = torch.nn.Parameter(torch.ones(5))
    sum_gradients([with_grad, without, zero_grad])
    assert torch.equal(with_grad.grad, torch.arange(6.0).reshape(2, 3))  # one rank: the sum is its own gradient
    assert torch.equal(zero_grad.grad, torch.zeros(4))  # a zero gradient stays a (zero) gradient: AdamW steps on it
    assert without.grad is None  # no rank had one: AdamW skips it, as in one process


def _data() -> list[TrainDatum]:
    rng = np.random.default_rng(0)
    data = []
    for length in (6, 9, 4):
        tokens = rng.integers(5, 40, length).tolist()
        inputs = {"target_tokens": np.array(tokens[1:] + [3]), "weights": (rng.random(length) > 0.3).astype(np.float32)}
        data.append(TrainDatum(tokens=tokens, inputs=inputs))
    return data


@pytest.mark.parametrize("sharded", [False, True], ids=["replicate", "fsdp2"])
def test_a_worker_computes_what_an_in_process_host_computes(model_dir, sharded):
    from torch.distributed.tensor import DTensor

    worker = MultiLoraWorker("policy", 0, 1, None, None, worker_config(model_dir, "cpu", "bfloat16", sharded))
    try:
        worker.init_model(name="org/tiny", dtype="bfloat16")
        local = LoraHost("org/tiny", model_dir, dtype="bfloat16")
        info = worker.host_info()
        assert (info["vocab_size"], info["pad_id"], info["device"]) == (local.vocab_size, local.pad_id, "cpu")
        base = [param for key, param in worker.host.model.named_parameters() if "lora_" not in key]
        assert all(isinstance(param, DTensor) == sharded for param in base)
        assert {param.dtype for param in base} == {torch.bfloat16}  # sharded in the dtype it was loaded in
        worker.add_adapter("m1", LoraSpec(rank=4, seed=3), init_seed=0)
        local.add_adapter("m1", LoraSpec(rank=4, seed=3))
        data = _data()
        for _ in range(2):
            got, got_metrics = worker.forward_backward("m1", data, "cross_entropy", {}, forward_only=False)
            want, want_metrics = local.forward_backward("m1", data, "cross_entropy", {}, forward_only=False)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g["logprobs"], w["logprobs"], rtol=0, atol=1e-5)
            assert got_metrics["loss:sum"] == pytest.approx(want_metrics["loss:sum"], rel=1e-5)
            assert worker.optim_step("m1", ADAM) == pytest.approx(local.optim_step("m1", ADAM), rel=1e-5)
        job = SampleJob(
            prompt=[5, 9], num_samples=1, max_tokens=4, temperature=0.0, top_k=-1, top_p=1.0, seed=None, stop=[]
        )
        assert (
            worker.sample(None, None, [job])[0].sequences[0].tokens == local.sample(None, [job])[0].sequences[0].tokens
        )
        if sharded:  # a rank the data did not reach still joins the collectives, with a zero gradient
            assert worker.forward_backward("m1", [], "cross_entropy", {}, forward_only=False) == ([], {})
        else:
            with pytest.raises(ValueError, match="without data on a rank that is not sharded"):
                worker.forward_backward("m1", [], "cross_entropy", {}, forward_only=False)
    finally:
        worker.close()
