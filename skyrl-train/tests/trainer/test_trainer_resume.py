"""Checkpoint and resume: stop after step k, resume, and the next step matches an uninterrupted run; a corrupt or
half-written newest checkpoint is detected and the previous one is used."""

import os
import shutil

import pytest

from skyrl_train.entrypoints.main_base import BasePPOExp

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RESUME_TOLERANCE = 1e-5  # step-3 metrics of a resumed run vs an uninterrupted one (same seeds, fp32, 1 thread)
COMPARED = ["reward/mean", "policy/loss", "policy/grad_norm", "policy/approx_kl", "policy/entropy"]


def _run(make_config, model_dir, data_dir, out_dir, *extra):
    return BasePPOExp(make_config(model_dir, data_dir, out_dir, "trainer.ckpt_interval=1", *extra)).run()


def _at(result, key, step):
    return dict(result.history[key])[step]


def test_resumed_run_matches_uninterrupted_run(ray_cluster, make_config, tiny_model_dir, data_dir, tmp_path):
    full = _run(make_config, tiny_model_dir, data_dir, tmp_path / "full", "trainer.max_training_steps=3")
    _run(make_config, tiny_model_dir, data_dir, tmp_path / "split", "trainer.max_training_steps=2")
    resumed = _run(
        make_config,
        tiny_model_dir,
        data_dir,
        tmp_path / "split",
        "trainer.max_training_steps=3",
        "trainer.resume_mode=latest",
    )
    assert resumed.global_step == 3 and sorted(dict(resumed.history["reward/mean"])) == [3]
    for key in COMPARED:
        assert _at(resumed, key, 3) == pytest.approx(_at(full, key, 3), abs=RESUME_TOLERANCE), key


def test_corrupt_newest_checkpoint_falls_back_to_previous(ray_cluster, make_config, tiny_model_dir, data_dir, tmp_path):
    _run(make_config, tiny_model_dir, data_dir, tmp_path, "trainer.max_training_steps=2")
    ckpts = tmp_path / "ckpts"
    assert sorted(os.listdir(ckpts)) == ["global_step_1", "global_step_2", "latest_checkpointed_step.txt"]
    # half-written: the policy shard directory of step 2 loses a file after the manifest was written
    policy_files = sorted((ckpts / "global_step_2" / "policy").rglob("*"))
    victim = next(p for p in policy_files if p.is_file())
    victim.write_bytes(victim.read_bytes()[: max(1, victim.stat().st_size // 2)])
    # and a leftover temporary directory of a step 3 that never committed
    shutil.copytree(ckpts / "global_step_1", ckpts / "global_step_3.tmp-crashed")
    resumed = _run(
        make_config, tiny_model_dir, data_dir, tmp_path, "trainer.max_training_steps=2", "trainer.resume_mode=latest"
    )
    # resumed from step 1 (step 2 is corrupt), so step 2 ran again
    assert sorted(dict(resumed.history["reward/mean"])) == [2]


def test_resume_keeps_the_lr_schedule_kl_coefficient_and_eval_before(
    ray_cluster, make_config, tiny_model_dir, data_dir, tmp_path
):
    """A run resumed with a longer `max_training_steps` continues the checkpoint's cosine schedule, its adaptive KL
    coefficient, and reports the eval it ran before training."""
    schedule = [
        "trainer.policy.optimizer.scheduler=cosine",
        "trainer.algorithm.use_kl_in_reward=true",
        "trainer.algorithm.kl_ctrl.type=adaptive",
        "trainer.algorithm.kl_ctrl.kl_coef=0.05",
        "trainer.algorithm.kl_ctrl.kl_target=0.001",
        "trainer.algorithm.kl_ctrl.horizon=32",  # 16 trajectories a step: the coefficient moves by up to 10 %
        "trainer.eval_before_train=true",
    ]
    full = _run(make_config, tiny_model_dir, data_dir, tmp_path / "full", "trainer.max_training_steps=3", *schedule)
    checkpoint = tmp_path / "full" / "ckpts" / "global_step_2"
    resumed = _run(
        make_config,
        tiny_model_dir,
        data_dir,
        tmp_path / "resumed",
        "trainer.max_training_steps=5",
        "trainer.resume_mode=path",
        f"trainer.resume_path={checkpoint}",
        *schedule,
    )
    assert resumed.initial_eval == full.initial_eval and "eval/all/pass_at_1" in resumed.initial_eval
    # step 1 sees KL 0 (policy == ref), so the controller lowers the coefficient: at step 3 it is no longer kl_coef
    assert _at(full, "reward/kl_penalty_coef", 1) == pytest.approx(0.05)
    assert _at(full, "reward/kl_penalty_coef", 3) != pytest.approx(0.05, rel=1e-3)
    for key in ("policy/lr", "reward/kl_penalty_coef", "reward/mean", "policy/loss"):
        assert _at(resumed, key, 3) == pytest.approx(_at(full, key, 3), abs=RESUME_TOLERANCE), key
    # lr 1e-3, 2 optimizer steps per training step: step 3 runs optimizer steps 4 and 5. The checkpoint's 6-step
    # cosine gives (0.25 + 0.067) / 2 * 1e-3 = 1.6e-4 there; a rebuilt 10-step one would give 5.8e-4.
    assert _at(resumed, "policy/lr", 3) == pytest.approx(1.58e-4, rel=0.02)
