"""WorkerGroup on local Ray with 2 FSDP2 ranks on CPU: sharded forward, updates, weights, checkpoints, critic."""

import asyncio
import os
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from skyrl_train.algorithms import POLICY_LOSSES, export_user_registrations, register_policy_loss
from skyrl_train.algorithms.masked import masked_mean, zero_masked
from skyrl_train.models.loading import load_causal_lm
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.workers import CriticWorker, PolicyWorker, WorkerGroup
from skyrl_train.workers.group import WorkerGroupError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRAINING_STEPS = 10
"""Length of the cosine LR schedule: the LR changes at every step, so a restored scheduler is visible."""


def _policy_config(tiny_model_dir):
    from skyrl_train.config import SkyRLConfig

    overrides = [
        "trainer.device=cpu",
        f"trainer.policy.model.path={tiny_model_dir}",
        f"trainer.critic.model.path={tiny_model_dir}",
        "trainer.policy.fsdp.mixed_precision.param_dtype=float32",
        "trainer.critic.fsdp.mixed_precision.param_dtype=float32",
        "trainer.policy.optimizer.lr=1e-3",
        "trainer.policy.optimizer.scheduler=cosine",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.micro_train_batch_size_per_gpu=2",
        "trainer.micro_forward_batch_size_per_gpu=2",
    ]
    return SkyRLConfig.from_cli_overrides(overrides, validate=False)


@pytest.fixture(scope="module")
def policy_group(ray_cluster, tiny_model_dir):
    group = WorkerGroup("policy", PolicyWorker, 2, _policy_config(tiny_model_dir))
    group.init_model(num_training_steps=TRAINING_STEPS)
    yield group
    group.shutdown()


def _logits(model, batch):
    with torch.no_grad():
        return model(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids).logits


def _reference_logprobs(model, batch):
    with torch.no_grad():
        logprobs, _ = response_logprobs(
            model, batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width
        )
    return zero_masked(logprobs, batch.response_mask)


def test_sharded_forward_equals_a_single_process_forward(policy_group, tiny_model_dir, make_batch):
    batch = make_batch(rows=5)  # odd: one loss-masked padding row goes to rank 1 and is dropped again
    logprobs = policy_group.run_sharded("forward", batch)
    expected = _reference_logprobs(load_causal_lm(tiny_model_dir).eval(), batch)
    assert logprobs.shape == (5, batch.response_width)
    assert torch.allclose(logprobs, expected, atol=1e-5)
    assert policy_group.run_all("execute", lambda worker, offset: worker.rank + offset, 10) == [10, 11]


async def test_async_sharded_calls_take_the_ranks_channels_and_answer_as_ray_does(
    policy_group, make_batch, grpo_advantages
):
    batch = make_batch(rows=5)
    through_ray = policy_group.run_sharded("forward", batch)
    through_channels = await policy_group.run_sharded_async("forward", batch)
    assert policy_group._channel_state == "open"  # both ranks run on this machine: their channels serve
    assert torch.equal(through_channels, through_ray)
    # a rank's own exception comes back as itself, with the traceback of where the rank raised it
    with pytest.raises(ValueError, match="on_policy=True takes old_logprobs from this pass") as raised:
        await policy_group.run_sharded_async(
            "forward_backward", batch, advantages=grpo_advantages(batch), old_logprobs=through_ray, on_policy=True
        )
    assert any("in forward_backward" in note for note in raised.value.__notes__)
    with pytest.raises(AttributeError, match="no public method '_require_model'"):
        await policy_group.run_sharded_async("_require_model", batch)
    assert torch.equal(await policy_group.run_sharded_async("forward", batch), through_ray)  # still serving
    assert policy_group.run_all("open_channel", "a-node-of-another-machine") == [None, None]  # those stay with Ray


def test_update_then_gathered_weights_reproduce_the_trained_model(
    policy_group, make_batch, grpo_advantages, tiny_model_dir, tmp_path
):
    batch = make_batch(rows=6, seed=4)
    before = dict(policy_group.run_all("get_weights")[0])
    old = policy_group.run_sharded("forward", batch)
    metrics = policy_group.run_sharded("forward_backward", batch, advantages=grpo_advantages(batch), old_logprobs=old)
    assert all(torch.isfinite(torch.tensor(value)) for value in metrics.values())
    assert {"policy/loss", "policy/clip_frac", "policy/approx_kl", "policy/entropy", "policy/lr"} <= set(metrics)
    assert "policy/logprob_diff_vs_rollout" in metrics
    grad_norms = policy_group.run_all("optim_step")
    assert grad_norms[0] == grad_norms[1] and grad_norms[0] > 0  # one global norm across the shards
    weights = policy_group.run_all("get_weights")
    assert weights[1] == [] and {name for name, _ in weights[0]} == set(before)
    assert any(not torch.equal(before[name], tensor) for name, tensor in weights[0])

    fresh = AutoModelForCausalLM.from_pretrained(tiny_model_dir, local_files_only=True).eval()
    fresh.load_state_dict(dict(weights[0]))
    trained = policy_group.run_sharded("forward", batch)
    assert torch.allclose(_reference_logprobs(fresh, batch), trained, atol=1e-5)

    export = tmp_path / "hf"
    policy_group.run_all("save_hf_model", str(export))
    exported = AutoModelForCausalLM.from_pretrained(export, local_files_only=True).eval()
    assert torch.allclose(_logits(exported, batch), _logits(fresh, batch), atol=1e-6)
    assert (export / "tokenizer.json").exists()


@pytest.mark.parametrize("as_url", [False, True], ids=["local-path", "fsspec-url"])
def test_checkpoint_restores_the_next_step_exactly(
    policy_group, ray_cluster, make_batch, grpo_advantages, tiny_model_dir, tmp_path, as_url
):
    batch = make_batch(rows=4, seed=5)
    advantages = grpo_advantages(batch, seed=1)

    def step(group):
        group.run_sharded("forward_backward", batch, advantages=advantages, old_logprobs=batch.rollout_logprobs)
        group.run_all("optim_step")
        return dict(group.run_all("get_weights")[0]), group.run_all("get_lr")

    # an fsspec URL (file:// here: the worker processes cannot share an in-memory filesystem) takes the
    # write-locally-then-upload and download-then-read path that s3:// or gs:// would
    where = f"file://{tmp_path / 'ckpt'}" if as_url else str(tmp_path / "ckpt")
    step(policy_group)  # moment estimates and scheduler state are non-trivial before saving
    policy_group.run_all("save_checkpoint", where)
    expected_weights, expected_lr = step(policy_group)

    restored = WorkerGroup("policy", PolicyWorker, 2, _policy_config(tiny_model_dir))
    try:
        restored.init_model(num_training_steps=TRAINING_STEPS)
        restored.run_all("load_checkpoint", where)
        weights, lr = step(restored)
    finally:
        restored.shutdown()
    assert lr == expected_lr and lr[0] < 1e-3
    assert all(torch.equal(weights[name], expected_weights[name]) for name in expected_weights)


def _doubled_ppo(**kwargs):
    loss, metrics = POLICY_LOSSES.get("regular")(**kwargs)
    return 2.0 * loss, {**metrics, "doubled": torch.tensor(1.0)}


def test_user_registered_loss_reaches_the_workers(policy_group, make_batch, grpo_advantages):
    batch = make_batch(rows=2, seed=6)
    register_policy_loss("doubled_ppo_for_test")(_doubled_ppo)
    try:
        policy_group.run_all("import_registries", export_user_registrations())
    finally:
        POLICY_LOSSES.unregister("doubled_ppo_for_test")
    kwargs = {"advantages": grpo_advantages(batch), "old_logprobs": batch.rollout_logprobs}
    plain = policy_group.run_sharded("forward_backward", batch, **kwargs)
    doubled = policy_group.run_sharded("forward_backward", batch, loss_fn="doubled_ppo_for_test", **kwargs)
    policy_group.run_all("optim_step")  # clears the accumulated gradients
    assert doubled["policy/doubled"] == 1.0
    assert doubled["policy/loss"] == pytest.approx(2.0 * plain["policy/loss"], rel=1e-5)


def test_critic_group_forward_and_update(ray_cluster, tiny_model_dir, make_batch):
    group = WorkerGroup("critic", CriticWorker, 2, _policy_config(tiny_model_dir))
    try:
        group.init_model()
        batch = make_batch(rows=3, seed=7)
        values = group.run_sharded("forward", batch)
        assert values.shape == (3, batch.response_width)
        assert values[batch.response_mask == 0].abs().sum() == 0
        returns = torch.ones_like(values)
        metrics = group.run_sharded("forward_backward", batch, returns=returns, old_values=values)
        assert metrics["critic/value_loss"] > 0 and torch.isfinite(torch.tensor(metrics["critic/value_loss"]))
        grad_norm = group.run_all("optim_step")[0]
        after = group.run_sharded("forward", batch)
        assert grad_norm > 0
        mask = batch.loss_mask
        assert masked_mean((after - returns) ** 2, mask) < masked_mean((values - returns) ** 2, mask)
    finally:
        group.shutdown()


def _fail_as_a_collective_with_a_dead_peer_does(worker):
    time.sleep(0.2)
    raise RuntimeError("[gloo] Connection closed by peer")


def _die_a_moment_later(worker):
    time.sleep(1.0)
    os._exit(1)


def _return_rank(worker):
    return worker.rank


@pytest.mark.parametrize("path", ["channels", "ray"])
async def test_a_live_ranks_error_that_echoes_a_dead_peer_names_the_dead_rank(ray_cluster, tiny_model_dir, path):
    """Rank 0's collective fails the moment rank 1 dies; which failure arrives first is a race, and the dead rank is
    the one to report. A method error with no death behind it still comes back as itself."""
    group = WorkerGroup("policy", PolicyWorker, 2, _policy_config(tiny_model_dir))
    group.dead_peer_grace_s = 30.0  # rank 1 dies ~0.8 s after rank 0 raises: room for a slow machine, no cost
    call_each = group._call_each_async if path == "channels" else lambda *a: asyncio.to_thread(group._call_each, *a)
    try:
        assert group.run_all("execute", _return_rank) == [0, 1]  # both started: no rank is busy importing
        with pytest.raises(RuntimeError, match="Connection closed by peer") as raised:
            await call_each("execute", [((_fail_as_a_collective_with_a_dead_peer_does,), {}), ((_return_rank,), {})])
        assert not isinstance(raised.value, WorkerGroupError)
        with pytest.raises(WorkerGroupError, match=r"policy rank 1 of 2 failed in execute: \w*ActorDiedError"):
            await call_each(
                "execute", [((_fail_as_a_collective_with_a_dead_peer_does,), {}), ((_die_a_moment_later,), {})]
            )
    finally:
        group.shutdown()


class _PidWorker:
    """The smallest class WorkerGroup can host: it writes its process id to the config's `pid_folder`, nothing else
    (no model, no process group)."""

    def __init__(self, role, rank, num_workers, master_addr, master_port, cfg, threads):
        Path(cfg["pid_folder"], str(rank)).write_text(str(os.getpid()))

    def master_address(self):
        return "127.0.0.1", 1


def test_a_group_that_fails_to_start_a_rank_stops_the_ranks_it_started(ray_cluster, tiny_model_dir, tmp_path):
    """Rank 1 asks for a placement-group bundle that does not exist (Ray refuses it at submission), after rank 0
    was already running: the group's constructor raises and rank 0's process is gone, not left holding its CPU while
    the caller keeps the error (its traceback holds the constructor's frame, and with it rank 0's handle)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    cfg = {**_policy_config(tiny_model_dir).to_dict(), "pid_folder": str(tmp_path)}
    bundles = placement_group([{"CPU": 1}])
    ray.get(bundles.ready())
    try:
        with pytest.raises(ValueError, match="bundle index 1 is invalid") as kept:
            WorkerGroup("policy", _PidWorker, 2, cfg, placement_group=bundles)
        assert sorted(path.name for path in tmp_path.iterdir()) == ["0"]  # rank 0 ran, rank 1 never started
        pid = int((tmp_path / "0").read_text())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
    finally:
        remove_placement_group(bundles)  # which would stop rank 0 too: checked before
    pytest.fail(f"rank 0 (pid {pid}) is still running after the group failed to start ({kept.value})")
