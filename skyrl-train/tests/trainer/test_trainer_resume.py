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
