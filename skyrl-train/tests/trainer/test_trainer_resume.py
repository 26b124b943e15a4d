"""Checkpoint and resume: stop after step k, resume, and the next step matches an uninterrupted run; a corrupt or
half-written newest checkpoint is detected and the previous one is used.

One uninterrupted 3-step run (checkpoint every step, cosine LR, adaptive KL in the reward, eval before training) is
shared by the tests: each resumes from a copy of its checkpoints, so a module costs four runs instead of seven. A run
"stopped after step 2" is that run's checkpoint directory without step 3: the step-2 checkpoint a run writes does not
depend on whether the run would have gone on, and `latest_valid` finds the newest committed checkpoint by scanning
the directories (the marker file is only a hint).
"""

import os
import shutil
import time

import pytest
import ray

from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.trainer import RayPPOTrainer
from skyrl_train.workers.group import WorkerGroupError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RESUME_TOLERANCE = 1e-5  # step-3 metrics of a resumed run vs an uninterrupted one (same seeds, fp32, 1 thread)
COMPARED = ["reward/mean", "policy/loss", "policy/grad_norm", "policy/approx_kl", "policy/entropy"]
SCHEDULE = [
    "trainer.ckpt_interval=1",
    "trainer.policy.optimizer.scheduler=cosine",
    "trainer.algorithm.use_kl_in_reward=true",
    "trainer.algorithm.kl_ctrl.type=adaptive",
    "trainer.algorithm.kl_ctrl.kl_coef=0.05",
    "trainer.algorithm.kl_ctrl.kl_target=0.001",
    "trainer.algorithm.kl_ctrl.horizon=32",  # 16 trajectories a step: the coefficient moves by up to 10 %
    "trainer.eval_before_train=true",
]


def _at(result, key, step):
    return dict(result.history[key])[step]


@pytest.fixture(scope="module")
def config(make_config, spread_tiny_model_dir, data_dir):
    """`config(out_dir, *overrides)`: the tiny run with the shared schedule, writing to `out_dir`."""
    return lambda out_dir, *extra: make_config(spread_tiny_model_dir, data_dir, out_dir, *SCHEDULE, *extra)


@pytest.fixture(scope="module")
def uninterrupted(ray_cluster, config, tmp_path_factory):
    """The 3-step run every test compares against, and its output folder."""
    out = tmp_path_factory.mktemp("uninterrupted")
    return BasePPOExp(config(out, "trainer.max_training_steps=3")).run(), out


def _stopped_after_step_2(uninterrupted_out, target):
    """A copy of the uninterrupted run's checkpoints as a run that stopped after step 2 would have left them."""
    shutil.copytree(uninterrupted_out / "ckpts", target / "ckpts")
    shutil.rmtree(target / "ckpts" / "global_step_3")
    (target / "ckpts" / "latest_checkpointed_step.txt").write_text("2")
    return target / "ckpts"


def _resume_latest(config, out_dir, full, step, keys=COMPARED):
    """Resumes the run in `out_dir` from its newest valid checkpoint up to `step`: it trains step `step` alone, and
    that step's `keys` match the uninterrupted run's."""
    resumed = BasePPOExp(config(out_dir, f"trainer.max_training_steps={step}", "trainer.resume_mode=latest")).run()
    assert sorted(dict(resumed.history["reward/mean"])) == [step]
    for key in keys:
        assert _at(resumed, key, step) == pytest.approx(_at(full, key, step), abs=RESUME_TOLERANCE), key
    return resumed


def test_resumed_run_matches_uninterrupted_run(uninterrupted, config, tmp_path):
    full, full_out = uninterrupted
    _stopped_after_step_2(full_out, tmp_path)
    resumed = _resume_latest(config, tmp_path, full, 3, COMPARED + ["policy/lr", "reward/kl_penalty_coef"])
    assert resumed.global_step == 3


def test_corrupt_newest_checkpoint_falls_back_to_previous(uninterrupted, config, tmp_path):
    full, full_out = uninterrupted
    ckpts = _stopped_after_step_2(full_out, tmp_path)
    assert sorted(os.listdir(ckpts)) == ["global_step_1", "global_step_2", "latest_checkpointed_step.txt"]
    # half-written: the policy shard directory of step 2 loses a file after the manifest was written
    policy_files = sorted((ckpts / "global_step_2" / "policy").rglob("*"))
    victim = next(p for p in policy_files if p.is_file())
    victim.write_bytes(victim.read_bytes()[: max(1, victim.stat().st_size // 2)])
    # and a leftover temporary directory of a step 3 that never committed
    shutil.copytree(ckpts / "global_step_1", ckpts / "global_step_3.tmp-crashed")
    # resumed from step 1 (step 2 is corrupt), so step 2 ran again, as the uninterrupted run ran it
    _resume_latest(config, tmp_path, full, 2)


def test_resume_keeps_the_lr_schedule_kl_coefficient_and_eval_before(uninterrupted, config, tmp_path):
    """A run resumed with a longer `max_training_steps` continues the checkpoint's cosine schedule, its adaptive KL
    coefficient, and reports the eval it ran before training."""
    full, full_out = uninterrupted
    resume_path = f"trainer.resume_path={full_out / 'ckpts' / 'global_step_2'}"
    resumed = BasePPOExp(
        config(tmp_path, "trainer.max_training_steps=5", "trainer.resume_mode=path", resume_path)
    ).run()
    assert resumed.initial_eval == full.initial_eval and "eval/all/pass_at_1" in resumed.initial_eval
    # step 1 sees KL 0 (policy == ref), so the controller lowers the coefficient: at step 3 it is no longer kl_coef
    assert _at(full, "reward/kl_penalty_coef", 1) == pytest.approx(0.05)
    assert _at(full, "reward/kl_penalty_coef", 3) != pytest.approx(0.05, rel=1e-3)
    for key in ("policy/lr", "reward/kl_penalty_coef", "reward/mean", "policy/loss"):
        assert _at(resumed, key, 3) == pytest.approx(_at(full, key, 3), abs=RESUME_TOLERANCE), key
    # lr 1e-3, 2 optimizer steps per training step: step 3 runs optimizer steps 4 and 5. The checkpoint's 6-step
    # cosine gives (0.25 + 0.067) / 2 * 1e-3 = 1.6e-4 there; a rebuilt 10-step one would give 5.8e-4.
    assert _at(resumed, "policy/lr", 3) == pytest.approx(1.58e-4, rel=0.02)


class RankDiesTrainer(RayPPOTrainer):
    """Kills policy rank 1 as step 2's policy update starts: rank 0 is then alone in an FSDP collective."""

    async def update_policy(self, *args, **kwargs):
        if self.global_step == 2:
            ray.kill(self.policy.group.actors[1])
        return await super().update_policy(*args, **kwargs)


class RankDiesExp(BasePPOExp):
    def get_trainer(self, **parts):
        return RankDiesTrainer(self.cfg, verify_weight_sync=self.verify_weight_sync, **parts)


def _free_cpus_settle(expected, seconds=60.0):
    """Free CPUs of the cluster once released actors and placement groups are returned (Ray frees them async)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and ray.available_resources().get("CPU", 0.0) < expected:
        time.sleep(0.5)
    return ray.available_resources().get("CPU", 0.0)


def test_a_dead_rank_stops_the_run_naming_it_and_resume_continues_exactly(uninterrupted, config, tmp_path):
    full, _ = uninterrupted
    free_before = ray.available_resources().get("CPU", 0.0)
    with pytest.raises(WorkerGroupError, match=r"policy rank 1 of 2 failed in train_mini_batches: \w*ActorDiedError"):
        # the uninterrupted run's length: the cosine schedule depends on it
        RankDiesExp(config(tmp_path, "trainer.max_training_steps=3")).run()
    # rank 0, blocked in a collective with the dead rank, the engines and the placement groups are all released
    assert _free_cpus_settle(free_before) >= free_before
    assert sorted(os.listdir(tmp_path / "ckpts")) == ["global_step_1", "latest_checkpointed_step.txt"]
    _resume_latest(config, tmp_path, full, 2)
