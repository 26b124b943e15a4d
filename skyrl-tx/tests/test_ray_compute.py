"""`RayLoraHost` (2 CPU ranks over gloo, a skyrl_train `WorkerGroup` of `MultiLoraWorker`s) against an in-process
`LoraHost` on the same tiny model: the same logprobs and metrics, replicas that stay identical through optim_step,
sampling in job order, checkpoints that move between the two, a dead rank named by the group, and
`skyrl-tx serve --compute ray` driven by the official tinker client. (The metric merge is
checked against hand-computed values first, and in skyrl-train's test_dispatch.py.)"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np
import pytest

from skyrl_tx.compute import ADAPTER_FILE, META_FILE, OPTIMIZER_FILE, LoraHost, LoraSpec, SampleJob
from skyrl_tx.losses import loss_spec, mean_metric_count, tinker_loss
from skyrl_tx.ray_compute import merge_shard_metrics, resolve_ray_device
from skyrl_tx.wire import TrainDatum, WireError

LR = 1e-3
ADAM = {"learning_rate": LR, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "grad_clip_norm": 1.0}
LOGPROB_ATOL = 1e-5
"""Both hosts run the same fp32 weights on the same rows; only the padded batch shape (a shard's [k, T_k] against the
whole [B, T]) and the thread count differ, which changes the order BLAS sums the 128- to 384-term dot products of the
size-2 tiny model in. Each rounding is ~6e-8 relative (fp32 eps / 2) of values of order 1-10, so logprobs (|lp| < ~6
here) move by a few 1e-7; 1e-5 leaves a 20x margin and still catches a token taken from the wrong row or position."""
SUM_REL = 1e-5
"""`loss:sum` adds ~50 such logprobs (each within 1e-5 absolute) in a different order: relative 1e-5 of a sum of
order 50-150 allows ~1e-3, far above the ~5e-5 worst case and far below any real difference."""


# ----- the metric merge (no Ray) ------------------------------------------------------------------------------------
def test_shard_metrics_merge_into_the_whole_batch_metrics():
    # shard 1 averaged 1 token with mean 2.0, shard 2 three tokens with mean 4.0: the whole mean is (2 + 12) / 4
    parts = [
        {"loss:sum": 1.0, "ratio_mean:mean": 2.0, "ratio_min:min": 0.5, "ratio_max:max": 1.5},
        {"loss:sum": 2.0, "ratio_mean:mean": 4.0, "ratio_min:min": 0.3, "ratio_max:max": 1.2},
    ]
    assert merge_shard_metrics(parts, [1, 3]) == {
        "loss:sum": 3.0,
        "ratio_mean:mean": 3.5,
        "ratio_min:min": 0.3,
        "ratio_max:max": 1.5,
    }
    # a shard that averaged over no token (its masked mean and min/max are 0 placeholders) does not count
    assert merge_shard_metrics([{"x:mean": 0.0, "y:min": 0.0}, {"x:mean": 5.0, "y:min": 2.0}], [0, 2]) == {
        "x:mean": 5.0,
        "y:min": 2.0,
    }
    assert merge_shard_metrics([{"x:mean": 0.0, "l:sum": 0.0}] * 2, [0, 0]) == {"x:mean": 0.0, "l:sum": 0.0}
    with pytest.raises(ValueError, match="metric 'x:median': no rule to combine it"):
        merge_shard_metrics([{"x:median": 1.0}], [1])


def test_merged_metrics_of_a_split_batch_equal_the_whole_batchs():
    """`tinker_loss` on two row shards of a batch, merged, gives the whole batch's metrics (ppo: the summed loss,
    means re-weighted by their token counts, extremes)."""
    import torch

    logprobs = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -4.0, -1.0]])
    valid = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    inputs = {"logprobs": torch.tensor([[-1.2, -1.0, -0.5], [-0.3, -4.5, -9.0]]), "advantages": torch.ones(2, 3)}
    _, resolved = loss_spec("ppo", {})
    whole = tinker_loss("ppo", resolved, logprobs, inputs, valid)[1]
    parts, counts = [], []
    for rows in (slice(0, 1), slice(1, 2)):
        shard = {key: value[rows] for key, value in inputs.items()}
        parts.append(tinker_loss("ppo", resolved, logprobs[rows], shard, valid[rows])[1])
        counts.append(mean_metric_count("ppo", {}, int(valid[rows].sum())))
    assert set(parts[0]) == set(whole) and whole["ratio_mean:mean"] != pytest.approx(parts[0]["ratio_mean:mean"])
    assert merge_shard_metrics(parts, counts) == pytest.approx(whole, rel=1e-6)


# ----- the Ray host -------------------------------------------------------------------------------------------------
def _data(seed: int, lengths: tuple[int, ...] = (7, 12, 5, 9, 3, 11)) -> list[TrainDatum]:
    """Cross-entropy data with random tokens and weights, plus sampler logprobs and advantages for the RL losses."""
    rng = np.random.default_rng(seed)
    data = []
    for length in lengths:
        tokens = rng.integers(3, 40, length).tolist()
        inputs = {
            "target_tokens": np.array(tokens[1:] + [3]),
            "weights": (rng.random(length) > 0.3).astype(np.float32),
            "logprobs": -rng.uniform(2.5, 5.0, length).astype(np.float32),
            "advantages": rng.normal(size=length).astype(np.float32),
        }
        data.append(TrainDatum(tokens=tokens, inputs=inputs))
    return data


def _adapter_weights(host: LoraHost, name: str) -> dict[str, np.ndarray]:
    return {key: p.detach().float().numpy() for key, p in host.model.named_parameters() if f".{name}." in key}


@pytest.fixture(scope="module")
def model_dir(save_tiny_model):
    return save_tiny_model(size=2)


@pytest.fixture(scope="module", params=["replicate", "fsdp2"])
def ray_host(request, ray_cluster, model_dir):
    """Two ranks holding the whole base model each, or an FSDP2 shard of it each."""
    from skyrl_tx.ray_compute import RayLoraHost

    host = RayLoraHost("org/tiny", model_dir, workers=2, sharding=request.param)
    yield host
    host.close()


@pytest.fixture(scope="module")
def local_host(ray_host, model_dir):
    """The in-process reference, one per Ray host (the tests create the same adapter names on both)."""
    return LoraHost("org/tiny", model_dir)


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "ppo"])
@pytest.mark.integration
@pytest.mark.slow
def test_forward_backward_matches_one_process(ray_host, local_host, loss_fn):
    name = f"fb-{loss_fn}"
    for host in (ray_host, local_host):
        host.add_adapter(name, LoraSpec(rank=4, seed=3))
    data = _data(0)
    ray_outputs, ray_metrics = ray_host.forward_backward(name, data, loss_fn, {}, forward_only=True)
    local_outputs, local_metrics = local_host.forward_backward(name, data, loss_fn, {}, forward_only=True)
    assert [len(out["logprobs"]) for out in ray_outputs] == [len(datum.tokens) for datum in data]
    for ray_out, local_out in zip(ray_outputs, local_outputs):
        np.testing.assert_allclose(ray_out["logprobs"], local_out["logprobs"], rtol=0, atol=LOGPROB_ATOL)
    assert set(ray_metrics) == set(local_metrics)
    assert ray_metrics["loss:sum"] == pytest.approx(local_metrics["loss:sum"], rel=SUM_REL)
    for key, value in local_metrics.items():  # ppo: ratio mean/min/max, approx_kl, clip fractions re-weighted
        assert ray_metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    if loss_fn == "ppo":
        assert {"ratio_mean:mean", "ratio_min:min", "clip_frac:mean"} <= set(ray_metrics)
    bad = _data(0)
    bad[4].tokens[0] = 10_000  # refused here, naming the datum, before any rank runs (and accumulates) its shard
    with pytest.raises(WireError, match=r"data\[4\].model_input: token ids must be in"):
        ray_host.forward_backward(name, bad, loss_fn, {}, forward_only=False)


@pytest.mark.integration
@pytest.mark.slow
def test_fsdp2_ranks_hold_a_shard_of_the_base_and_still_run_calls_with_fewer_items_than_ranks(ray_host, local_host):
    full = sum(param.numel() for key, param in local_host.model.named_parameters() if "lora_" not in key)
    held = ray_host.base_numels()
    if ray_host.sharded:
        assert all(count < 0.6 * full for count in held) and sum(held) >= full
    else:
        assert held == [full, full]
    for host in (ray_host, local_host):
        host.add_adapter("one-datum", LoraSpec(rank=4, seed=5))
    data = _data(4, lengths=(9,))  # one datum for two ranks: the second (sharded) rank joins without data
    got = ray_host.forward_backward("one-datum", data, "cross_entropy", {}, forward_only=True)[0]
    want = local_host.forward_backward("one-datum", data, "cross_entropy", {}, forward_only=True)[0]
    np.testing.assert_allclose(got[0]["logprobs"], want[0]["logprobs"], rtol=0, atol=LOGPROB_ATOL)
    steps = []
    for host in (ray_host, local_host):
        host.forward_backward("one-datum", data, "cross_entropy", {}, forward_only=False)
        steps.append(host.optim_step("one-datum", ADAM)["grad_norm:mean"])
    assert steps[0] == pytest.approx(steps[1], rel=1e-5) and steps[1] > 0  # the idle rank added a zero gradient
    job = SampleJob(
        prompt=[5, 9], num_samples=1, max_tokens=4, temperature=0.0, top_k=-1, top_p=1.0, seed=None, stop=[]
    )
    assert ray_host.sample(None, [job])[0].sequences[0].tokens == local_host.sample(None, [job])[0].sequences[0].tokens


@pytest.mark.integration
@pytest.mark.slow
def test_a_ranks_user_error_arrives_as_itself(ray_host):
    # the ranks refuse the spec (the host does not check it first): the client must see the WireError, not Ray's
    # wrapper with a remote traceback in its type name and message
    with pytest.raises(WireError) as caught:
        ray_host.add_adapter("bad-rank", LoraSpec(rank=0))
    assert type(caught.value) is WireError and str(caught.value) == "lora_config.rank must be in [1, 512], got 0"
    assert "bad-rank" not in ray_host.adapters


@pytest.mark.integration
@pytest.mark.slow
def test_a_dead_rank_fails_the_call_naming_it(ray_cluster, model_dir):
    import ray

    from skyrl_train.workers.group import WorkerGroupError
    from skyrl_tx.ray_compute import RayLoraHost

    host = RayLoraHost("org/tiny", model_dir, workers=1)
    try:
        ray.kill(host.group.actors[0])
        # the kill takes effect asynchronously: a call sent right after it may still be answered
        with pytest.raises(WorkerGroupError, match=r"policy rank 0 of 1 failed in base_numel: \w+Error"):
            for _ in range(100):
                host.base_numels()
                time.sleep(0.05)
    finally:
        host.close()


def test_the_ray_device_is_the_users_choice_and_auto_follows_the_clusters_gpus():
    """No Ray: the resolution `ray_device` applies to the cluster's GPU count, both kinds of cluster."""
    assert resolve_ray_device("cpu", cluster_gpus=4) == "cpu"  # CPU ranks on a GPU cluster, as chosen
    assert resolve_ray_device("cuda", cluster_gpus=4) == "cuda"
    assert resolve_ray_device("auto", cluster_gpus=4) == "cuda"
    assert resolve_ray_device("auto", cluster_gpus=0) == "cpu"
    assert resolve_ray_device("auto", cluster_gpus=0.5) == "cpu"  # no rank can get a whole GPU
    with pytest.raises(ValueError, match="device must be one of .* got 'cuda:1'"):
        resolve_ray_device("cuda:1", cluster_gpus=4)


@pytest.mark.integration
@pytest.mark.slow
def test_the_ray_device_follows_the_clusters_resources(ray_cluster):
    import ray

    from skyrl_tx.ray_compute import ray_device

    gpus, cpus = int(ray.cluster_resources().get("GPU", 0)), int(ray.cluster_resources()["CPU"])
    assert ray_device("auto", 1) == ("cuda" if gpus else "cpu")
    with pytest.raises(SystemExit, match=f"needs {gpus + 1} GPUs; the Ray cluster has {gpus} "):
        ray_device("cuda", gpus + 1)
    with pytest.raises(SystemExit, match=rf"--ray-workers {cpus} x 2 base model\(s\) on cpu needs {2 * cpus} CPUs"):
        ray_device("cpu", cpus, base_models=2)
    with pytest.raises(SystemExit, match=rf"--ray-workers {cpus} \+ 1 vLLM sampler x 1 base model\(s\) on cpu needs"):
        ray_device("cpu", cpus, samplers=1)  # --sampler vllm: one actor per base model next to the ranks


@pytest.mark.integration
@pytest.mark.slow
def test_optim_step_keeps_the_replicas_identical_and_matches_one_process(ray_host, local_host):
    for host in (ray_host, local_host):
        host.add_adapter("m-train", LoraSpec(rank=4, seed=5))
    states = ray_host.adapter_states("m-train")
    assert all(np.array_equal(states[0][key], states[1][key]) for key in states[0])  # same seed, same init
    data = _data(1)
    for step in range(2):
        for host in (ray_host, local_host):
            host.forward_backward("m-train", data[:4], "cross_entropy", {}, forward_only=False)
            host.forward_backward("m-train", data[4:], "cross_entropy", {}, forward_only=False)  # chunks accumulate
        ray_step, local_step = ray_host.optim_step("m-train", ADAM), local_host.optim_step("m-train", ADAM)
        # the norm of the summed gradient (an average over ranks would halve it): only summation order differs
        assert ray_step["grad_norm:mean"] == pytest.approx(local_step["grad_norm:mean"], rel=1e-5)
        assert ray_step["step:max"] == local_step["step:max"] == step + 1
    states = ray_host.adapter_states("m-train")
    local = _adapter_weights(local_host, "m-train")
    assert set(states[0]) == set(local)
    for key in local:
        assert np.array_equal(states[0][key], states[1][key]), key  # bit-identical replicas
        # Each AdamW step moves an element by lr * m_hat / (sqrt(v_hat) + eps): at most lr at step 1 and 1.002 lr at
        # step 2 for these betas (Cauchy-Schwarz on the bias-corrected moments), whatever the gradient's scale.
        # Summation-order noise can flip the sign of a near-zero gradient, so two correct runs may differ by up to
        # ~2 lr per step on such elements (~4 lr after two); 5 lr leaves slack. Every other element agrees to float
        # precision, so all but a few must be within lr / 100.
        diff = np.abs(states[0][key] - local[key])
        assert diff.max() <= 5 * LR, (key, diff.max())
        assert np.mean(diff > LR / 100) <= 0.01, (key, np.mean(diff > LR / 100))
    after_ray = ray_host.forward_backward("m-train", data, "cross_entropy", {}, forward_only=True)[1]["loss:sum"]
    after_local = local_host.forward_backward("m-train", data, "cross_entropy", {}, forward_only=True)[1]["loss:sum"]
    assert after_ray == pytest.approx(after_local, rel=1e-4)
    # a step without gradients (only forward passes since the last one) moves nothing, as in one process
    before = ray_host.adapter_states("m-train")
    assert ray_host.optim_step("m-train", ADAM)["grad_norm:mean"] == 0.0
    for rank, state in enumerate(ray_host.adapter_states("m-train")):
        assert all(np.array_equal(before[rank][key], value) for key, value in state.items())


@pytest.mark.integration
@pytest.mark.slow
def test_sample_returns_every_job_in_order_from_saved_weights_and_the_base(ray_host, local_host, tmp_path):
    for host in (ray_host, local_host):
        host.add_adapter("m-sampler", LoraSpec(rank=4, seed=7))
    data = _data(2)
    for host in (ray_host, local_host):
        host.forward_backward("m-sampler", data, "cross_entropy", {}, forward_only=False)
        host.optim_step("m-sampler", {**ADAM, "learning_rate": 5e-2})
    folder = tmp_path / "m-sampler"
    ray_host.save("m-sampler", folder, with_optimizer=False)
    prompts = [[5, 9, 12], [7, 7], [20, 3, 4, 8], [11]]
    jobs = [
        SampleJob(prompt=p, num_samples=n, max_tokens=5, temperature=0.0, top_k=-1, top_p=1.0, seed=None, stop=[])
        for p, n in zip(prompts, [2, 1, 3, 1])
    ]
    for sampler_dir in (folder, folder, None):  # the second call finds the weights already on the ranks
        results = ray_host.sample(sampler_dir, jobs)
        expected = local_host.sample(sampler_dir, jobs)
        assert [len(result.sequences) for result in results] == [2, 1, 3, 1]
        assert [[s.tokens for s in r.sequences] for r in results] == [[s.tokens for s in r.sequences] for r in expected]
        assert all(len(s.tokens) == 5 for r in results for s in r.sequences)  # stop=[]: every sample runs to length


@pytest.mark.integration
@pytest.mark.slow
def test_a_checkpoint_saved_by_the_ray_host_loads_in_either_host(ray_host, local_host, tmp_path):
    ray_host.add_adapter("m-saved", LoraSpec(rank=4, seed=11))
    data = _data(3)
    ray_host.forward_backward("m-saved", data, "cross_entropy", {}, forward_only=False)
    ray_host.optim_step("m-saved", {**ADAM, "learning_rate": 5e-2})
    folder = tmp_path / "state"
    size = ray_host.save("m-saved", folder, with_optimizer=True)
    assert {path.name for path in folder.iterdir()} >= {ADAPTER_FILE, META_FILE, OPTIMIZER_FILE}
    assert size == sum(path.stat().st_size for path in folder.iterdir())
    local_host.load("m-loaded", folder, with_optimizer=True)
    ray_host.load("m-reloaded", folder, with_optimizer=True)
    reference = ray_host.forward_backward("m-saved", data, "cross_entropy", {}, forward_only=True)[0]
    for host, name in ((local_host, "m-loaded"), (ray_host, "m-reloaded")):
        outputs = host.forward_backward(name, data, "cross_entropy", {}, forward_only=True)[0]
        for got, want in zip(outputs, reference):
            np.testing.assert_allclose(got["logprobs"], want["logprobs"], rtol=0, atol=LOGPROB_ATOL)
    saved, reloaded = ray_host.adapter_states("m-saved"), ray_host.adapter_states("m-reloaded")
    for rank in range(2):
        for key, value in saved[rank].items():
            assert np.array_equal(reloaded[rank][key.replace(".m-saved.", ".m-reloaded.")], value), key


@pytest.mark.parametrize("sharding", ["replicate", "fsdp2"])
@pytest.mark.integration
@pytest.mark.slow
def test_serve_with_ray_compute_drives_the_tinker_client(ray_cluster, model_dir, tmp_path, sharding):
    import tinker
    from tinker import types

    from skyrl_tx.local_server import LocalServer

    server = LocalServer(
        Path(tmp_path),
        ["--base-model", f"org/tiny={model_dir}", "--device", "cpu", "--compute", "ray", "--ray-workers", "2"]
        + ["--ray-sharding", sharding]
        + ["--ray-address", ray_cluster],
    )
    server.start(timeout_s=300)
    service = tinker.ServiceClient(base_url=server.url, api_key=server.api_key)
    try:
        training = service.create_lora_training_client(base_model="org/tiny", rank=4, seed=0).result()
        assert training.get_info().model_data.model_name == "org/tiny"
        data = [
            types.Datum(
                model_input=types.ModelInput.from_ints(datum.tokens),
                loss_fn_inputs={"target_tokens": datum.inputs["target_tokens"].tolist(), "weights": [1.0] * n},
            )
            for datum, n in ((datum, len(datum.tokens)) for datum in _data(4))
        ]
        losses = []
        for _ in range(3):
            result = training.forward_backward(data, "cross_entropy").result()
            training.optim_step(types.AdamParams(learning_rate=2e-3)).result()
            losses.append(result.metrics["loss:sum"])
            assert [len(out["logprobs"].tolist()) for out in result.loss_fn_outputs] == [
                d.model_input.length for d in data
            ]
        assert losses[-1] < losses[0], losses
        sampler = training.save_weights_and_get_sampling_client().result()
        sampled = sampler.sample(
            types.ModelInput.from_ints([5, 9, 12]), 3, types.SamplingParams(max_tokens=4, temperature=1.0, seed=1)
        ).result()
        assert len(sampled.sequences) == 3 and all(1 <= len(s.tokens) <= 4 for s in sampled.sequences)
        state = training.save_state("ray-step3").result().path
        restored = service.create_training_client_from_state_with_optimizer(state).result()
        reference = training.forward(data, "cross_entropy").result().metrics["loss:sum"]
        assert restored.forward(data, "cross_entropy").result().metrics["loss:sum"] == pytest.approx(
            reference, rel=1e-5
        )
    finally:
        with contextlib.suppress(Exception):  # ends the session (its heartbeats) while the server still answers
            service.close("success")
        server.stop()
    log = server.log_path.read_text() if server.log_path else ""
    assert f"2 Ray ranks ({sharding}) on cpu" in log, log[-3000:]
