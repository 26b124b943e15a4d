"""RayPPOTrainer on local Ray with the tiny model and 2 FSDP2 ranks: one step per estimator, both placements,
verified weight sync, trainer/engine logprob agreement, and on-policy distillation from a second tiny model."""

import gc
import math
from pathlib import Path

import pytest
import ray
import torch
from safetensors.torch import load_file

from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.inference.ray_engine import RayEngineProxy
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.trainer import DRIVER_TORCH_THREADS, LOOP_GC_GEN0_THRESHOLD, RayPPOTrainer
from skyrl_train.utils.batch_dump import load_batch_dump
from skyrl_train.weight_sync.shm_blocks import BLOCK_PREFIX, block_owner, pid_namespace
from skyrl_train.workers.group import WorkerGroup

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LOGPROB_AGREEMENT = 1e-4  # fp32: mean |trainer - engine| logprob over generated tokens with equal weights


def _weights(path):
    return load_file(f"{path}/model.safetensors")


def _changed(before, after):
    return any(not torch.equal(before[name], after[name]) for name in before if name in after)


class RecordingExp(BasePPOExp):
    """Records what the worker and engine actors report about their process just before they are released."""

    def shutdown(self) -> None:
        self.group_sizes = {group.role: group.world_size for group in self.groups}
        self.worker_info = [info for group in self.groups for info in group.run_all("runtime_info")]
        self.engine_info = ray.get([engine.handle.engine_info.remote() for engine in self.engines])
        ranks = {info["pid"] for info in self.worker_info}
        self.blocks_in_use = _shm_blocks(ranks)
        super().shutdown()
        self.blocks_left = _shm_blocks(ranks) & self.blocks_in_use


def _shm_blocks(pids: set[int]) -> set[str]:
    """The shm weight senders' blocks made by processes `pids` of this PID namespace, by name. Only this run's ranks
    count: the other test process (pytest-xdist) may be in the middle of its own run, with its own blocks."""
    namespace = pid_namespace()
    return {
        path.name
        for path in Path("/dev/shm").glob(BLOCK_PREFIX + "*")
        if (owner := block_owner(path.name)) is not None and owner[0] == namespace and owner[1] in pids
    }


@pytest.mark.parametrize(
    "estimator, extra",
    [
        ("grpo", []),
        ("rloo", ["trainer.policy_mini_batch_size=4"]),  # one optimizer step: no separate old-logprob forward
        ("reinforce++", ["trainer.placement.num_threads_per_worker=2", "generator.inference_engine.num_threads=2"]),
        ("gae", ["trainer.critic.model.path=${trainer.policy.model.path}", "trainer.dump_data_batch=true"]),
    ],
)
def test_one_step_per_estimator_trains_and_syncs(
    ray_cluster, make_config, spread_tiny_model_dir, data_dir, tmp_path, estimator, extra
):
    extra = [e.replace("${trainer.policy.model.path}", spread_tiny_model_dir) for e in extra]
    cfg = make_config(
        spread_tiny_model_dir, data_dir, tmp_path, f"trainer.algorithm.advantage_estimator={estimator}", *extra
    )
    experiment = RecordingExp(cfg, verify_weight_sync=True)
    result = experiment.run()
    history = result.history
    assert result.global_step == 1
    threads = 2 if "trainer.placement.num_threads_per_worker=2" in extra else 1  # default: the bundle's 1 CPU
    assert {info["torch_threads"] for info in experiment.worker_info} == {threads}
    assert {info["torch_threads"] for info in experiment.engine_info} == {threads}
    loss = history["policy/loss"][-1][1]
    assert math.isfinite(loss)
    assert history["weight_sync/verified_tensors"][-1][1] > 0  # checksums of every engine matched the policy
    assert history["weight_sync/version"][-1][1] == 2.0  # initial sync, then one per step
    assert history["weight_sync/writer_ranks"][-1][1] == 2.0  # shm: each FSDP2 rank wrote its own rows
    # the sender's block is unlinked before its rank is killed (Ray's kill would take the resource tracker along)
    assert experiment.blocks_in_use and not experiment.blocks_left
    assert history["policy/rollout_train_logprob_abs_diff_mean"][-1][1] < LOGPROB_AGREEMENT
    one_update = "trainer.policy_mini_batch_size=4" in extra
    # one optimizer step: all of the batch; two mini-batches: the first one's (its own first pass)
    assert history["policy/old_logprobs_from_update"][-1][1] == (1.0 if one_update else 0.5)
    assert ("policy/rollout_train_logprob_abs_diff_max" in history) != one_update  # only a separate forward has it
    exported = experiment.trainer.checkpoints.exported_paths[-1]
    assert _changed(_weights(spread_tiny_model_dir), _weights(exported)), "the policy's weights did not change"
    dumped = sorted((tmp_path / "exports" / "dumped_data").glob("*")) if estimator == "gae" else []
    assert [path.name for path in dumped] == (["global_step_1_training_input.safetensors"] if dumped else [])
    assert (tmp_path / "exports" / "dumped_data").exists() == (estimator == "gae")  # off by default
    if estimator == "gae":
        assert math.isfinite(history["critic/value_loss"][-1][1])
        tensors, metadata = load_batch_dump(dumped[0])  # the step's 4 prompts x 4 samples, as trained
        assert tensors["input_ids"].shape[0] == 16 and len(set(metadata["uids"])) == 4
        assert float(tensors["token_rewards"].sum(1).mean()) == pytest.approx(history["reward/mean"][-1][1])
        assert tensors["values"].shape == tensors["advantages"].shape == tensors["loss_mask"].shape
        assert torch.isfinite(tensors["advantages"]).all() and tensors["advantages"].abs().sum() > 0


def test_separate_placement_with_broadcast_sync(
    ray_cluster, make_config, spread_tiny_model_dir, data_dir, tmp_path, monkeypatch
):
    frozen_during_steps, thresholds_during_steps = [], []
    thresholds = gc.get_threshold()
    after_step = RayPPOTrainer.after_step

    async def recording_after_step(self, metrics, max_steps):
        frozen_during_steps.append(gc.get_freeze_count())
        thresholds_during_steps.append(gc.get_threshold())
        return await after_step(self, metrics, max_steps)

    monkeypatch.setattr(RayPPOTrainer, "after_step", recording_after_step)
    cfg = make_config(spread_tiny_model_dir, data_dir, tmp_path, colocate=False)
    experiment = BasePPOExp(cfg, verify_weight_sync=True)
    result = experiment.run()
    assert result.global_step == 1
    # set-up objects sit in the GC's permanent generation during the loop only
    assert frozen_during_steps and frozen_during_steps[0] > 0 and gc.get_freeze_count() == 0
    # and the loop's garbage waits for bigger batches before a collection: the thresholds are back after it
    assert thresholds_during_steps[0] == (LOOP_GC_GEN0_THRESHOLD, *thresholds[1:]) and gc.get_threshold() == thresholds
    assert result.history["weight_sync/verified_tensors"][-1][1] > 0
    assert result.history["weight_sync/writer_ranks"][-1][1] == 1.0  # broadcast: rank 0 gathers and sends
    assert result.history["policy/rollout_train_logprob_abs_diff_mean"][-1][1] < LOGPROB_AGREEMENT


def test_a_step_makes_one_call_per_policy_rank_and_asks_no_engine_for_its_version(
    ray_cluster, make_config, spread_tiny_model_dir, data_dir, tmp_path, monkeypatch
):
    """2 mini-batches x 2 epochs: the policy update (with its old-log-prob forward) and the weight sync after it are
    one call per rank, and the sync is confirmed from the engines' acknowledgements, not by asking them again. The
    driver trains with `DRIVER_TORCH_THREADS` torch threads."""
    calls, version_requests, generated, ahead = [], [], [], []
    run_all, call_each = WorkerGroup.run_all, WorkerGroup._call_each_async
    fetch, step, generate = RayEngineProxy.fetch_weight_version, RayPPOTrainer.step, RayEngineProxy.generate
    install_ahead = RayEngineProxy.install_ahead

    def recording_run_all(self, method, *args, **kwargs):
        calls.append((self.role, method, self.world_size))
        return run_all(self, method, *args, **kwargs)

    async def recording_call_each(self, method, per_actor):  # the sharded calls, through channels or Ray
        calls.append((self.role, method, len(per_actor)))
        return await call_each(self, method, per_actor)

    async def recording_install_ahead(self, chunk, sent=None):
        ahead.append((chunk.version, sent is not None))
        return await install_ahead(self, chunk, sent)

    async def recording_fetch(self):
        version_requests.append(self)
        return await fetch(self)

    async def recording_step(self):
        calls.append(("step", self.global_step + 1, torch.get_num_threads()))
        return await step(self)

    async def recording_generate(self, request):
        pending = self.pending_weights
        output = await generate(self, request)
        generated.append((None if pending is None else pending.version, output.weight_version, self.pending_weights))
        return output

    monkeypatch.setattr(WorkerGroup, "run_all", recording_run_all)
    monkeypatch.setattr(WorkerGroup, "_call_each_async", recording_call_each)
    monkeypatch.setattr(RayEngineProxy, "install_ahead", recording_install_ahead)
    monkeypatch.setattr(RayEngineProxy, "fetch_weight_version", recording_fetch)
    monkeypatch.setattr(RayPPOTrainer, "step", recording_step)
    monkeypatch.setattr(RayEngineProxy, "generate", recording_generate)
    cfg = make_config(
        spread_tiny_model_dir, data_dir, tmp_path, "trainer.max_training_steps=2", "trainer.update_epochs_per_batch=2"
    )
    threads = torch.get_num_threads()
    result = BasePPOExp(cfg).run()
    assert result.global_step == 2
    assert torch.get_num_threads() == threads  # the driver's count is back after the run
    first_step = calls.index(("step", 1, DRIVER_TORCH_THREADS))  # small tensor work: one thread while training
    # the ranks' channels open once, at the first sharded call; nothing else reaches the ranks during the steps
    in_steps = [call for call in calls[first_step:] if call[0] != "step" and call[1] != "open_channel"]
    assert [call for call in calls if call[1] == "open_channel"] == [("policy", "open_channel", 2)]
    assert in_steps[:2] == [("policy", "train_mini_batches", 2)] * 2
    assert [method for _, method, _ in in_steps[2:]] == ["save_hf_model"]  # the export at the end of the run
    assert version_requests == []
    history = result.history
    assert [value for _, value in history["weight_sync/in_update"]] == [1.0, 1.0]
    assert [value for _, value in history["weight_sync/version"]] == [2.0, 3.0]  # after the initial sync's 1
    # no engine acknowledged the syncs: each sync's last chunk went to both engines' proxies, which sent it ahead
    # through the local channel, and step 2's generate calls (then the final evaluation's) sampled with it
    assert [value for _, value in history["weight_sync/installed_at_generate"]] == [1.0, 1.0]
    # each written to the engine at once (`sent`), not when the training loop next yielded to its event loop
    assert ahead == [(2, True), (2, True), (3, True), (3, True)]
    served = [served for _, served, _ in generated]
    assert served == sorted(served) and {2, 3} <= set(served)
    # a generate call that still carried the chunk (it raced the install ahead) served its version
    assert all(served >= pending for pending, served, _ in generated if pending is not None)
    assert all(left is None for _, _, left in generated)  # installed once: later calls carry nothing
    assert "timing/weight_sync" not in history
    assert history["policy/old_logprobs_from_update"][-1][1] == 0.5  # the first of 2 mini-batches
    # the update's call computed the old log-probs before its first optimizer step and put them back in row order
    assert history["policy/rollout_train_logprob_abs_diff_mean"][-1][1] < LOGPROB_AGREEMENT
    assert history["policy/rollout_train_logprob_abs_diff_max"][-1][1] < 100 * LOGPROB_AGREEMENT


def test_on_policy_distillation_trains_on_the_teacher_gap_from_the_ref_workers(
    ray_cluster, make_config, spread_tiny_model_dir, data_dir, tmp_path
):
    teacher = tmp_path / "teacher"  # the student's architecture and tokenizer, other weights
    model = build_tiny_model(TinyModelSpec(size=1), seed=1)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.3, generator=torch.Generator().manual_seed(1))
    model.save_pretrained(teacher)
    build_char_tokenizer().save_pretrained(str(teacher))
    cfg = make_config(
        spread_tiny_model_dir,
        data_dir,
        tmp_path,
        "trainer.algorithm.on_policy_distillation=true",
        f"trainer.ref.model.path={teacher}",
        "trainer.algorithm.advantage_estimator=no_op",
        "trainer.algorithm.policy_loss_type=importance_sampling",
    )
    experiment = BasePPOExp(cfg)
    result = experiment.run()
    history = result.history
    # two unrelated models: the student's samples are far less likely under the teacher
    assert history["distillation/teacher_gap_token_mean"][-1][1] < -0.5
    assert history["policy/old_logprobs_from_update"][-1][1] == 0.0  # given: the forward before the rewards
    assert "reward/mean" in history  # the env's rewards are still computed and logged
    exported = experiment.trainer.checkpoints.exported_paths[-1]
    assert _changed(_weights(spread_tiny_model_dir), _weights(exported)), "the policy's weights did not change"


def test_a_colocated_critic_on_fewer_ranks_than_the_policy_trains_on_the_first_bundle(
    ray_cluster, make_config, spread_tiny_model_dir, data_dir, tmp_path
):
    """SkyRL's colocated LoRA PPO example leaves the critic on 1 GPU beside a wider policy: the critic's one rank
    runs in bundle 0 of the shared group, next to policy rank 0 and engine 0, and values and their update still
    cover the whole batch."""
    cfg = make_config(
        spread_tiny_model_dir,
        data_dir,
        tmp_path,
        "trainer.algorithm.advantage_estimator=gae",
        f"trainer.critic.model.path={spread_tiny_model_dir}",
        "trainer.placement.critic_num_gpus_per_node=1",
    )
    assert cfg.trainer.placement.colocate_all and cfg.trainer.placement.policy_num_gpus_per_node == 2
    experiment = RecordingExp(cfg)
    result = experiment.run()
    assert experiment.group_sizes == {"policy": 2, "critic": 1}
    assert math.isfinite(result.history["critic/value_loss"][-1][1])
    assert math.isfinite(result.history["policy/loss"][-1][1])
