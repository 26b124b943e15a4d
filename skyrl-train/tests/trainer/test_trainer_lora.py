"""A LoRA policy through the whole trainer (Ray, 2 FSDP2 ranks, 2 colocated hf engines, shm weight sync): syncs send
only the adapters and verify by checksum, the KL reference is the base model with adapters off (no ref workers), and
a run resumed from the step-2 adapter checkpoint matches the uninterrupted run at step 3."""

import shutil

import pytest

from skyrl_gym.envs.synthetic.generate import write_dataset
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.recipes.embedded import get_embedded_model
from skyrl_train.recipes.warm_start import WarmStartSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUICKSTART_MODEL = WarmStartSettings(task="addition", difficulty=2, size=2, seed=0, train_examples=8192)
"""The quickstart's warm-started model (built once into the shared cache): it answers some sums right, so GRPO has
rewards that differ within a group and the adapters move from the first step."""

LORA = [
    "environment.env_class=addition",
    "trainer.policy.model.lora.rank=4",
    "trainer.policy.model.lora.alpha=8",
    "trainer.policy.optimizer.lr=1e-2",
    "trainer.algorithm.use_kl_loss=true",
    "trainer.algorithm.kl_loss_coef=0.1",
    "trainer.ckpt_interval=1",
    "trainer.max_training_steps=3",
]
RESUME_TOLERANCE = 1e-5  # same seeds, fp32: the resumed step 3 repeats the same float sums
COMPARED = ["reward/mean", "policy/loss", "policy/kl_loss", "policy/grad_norm", "policy/entropy"]


def _at(result, key, step):
    return dict(result.history[key])[step]


def _adapter_bytes(model_dir, rank):
    from skyrl_train.models.loading import load_causal_lm
    from skyrl_train.models.lora import LoRASettings, apply_lora

    adapted = apply_lora(load_causal_lm(model_dir), LoRASettings(rank=rank))
    return sum(p.numel() * 4 for name, p in adapted.named_parameters() if "lora_" in name), sum(
        p.numel() * 4 for name, p in adapted.named_parameters() if "lora_" not in name
    )


@pytest.fixture(scope="module")
def addition(tmp_path_factory):
    """(model folder, data folder): the quickstart's model and a small addition dataset."""
    data = tmp_path_factory.mktemp("addition")
    write_dataset(data, "addition", train_size=64, test_size=8, difficulty=2, seed=3)
    return str(get_embedded_model(QUICKSTART_MODEL, progress=False)), data


def test_lora_run_syncs_adapters_uses_the_base_as_reference_and_resumes_exactly(
    ray_cluster, make_config, addition, tmp_path
):
    spread_tiny_model_dir, data_dir = addition
    experiment = BasePPOExp(
        make_config(spread_tiny_model_dir, data_dir, tmp_path / "full", *LORA), verify_weight_sync=True
    )
    assert experiment.roles() == ["policy"]  # KL is on, but the reference is the policy's base model
    full = experiment.run()
    adapter_bytes, base_bytes = _adapter_bytes(spread_tiny_model_dir, rank=4)
    for step in (1, 2, 3):
        assert _at(full, "weight_sync/megabytes", step) == pytest.approx(adapter_bytes / 1e6)
        assert _at(full, "weight_sync/verified_tensors", step) > 0
    assert base_bytes > 5 * adapter_bytes  # what a full sync would have moved
    assert _at(full, "policy/grad_norm", 1) > 0
    assert _at(full, "policy/kl_loss", 3) > 0  # the adapters moved the policy away from its base

    shutil.copytree(tmp_path / "full" / "ckpts", tmp_path / "resumed" / "ckpts")
    shutil.rmtree(tmp_path / "resumed" / "ckpts" / "global_step_3")
    (tmp_path / "resumed" / "ckpts" / "latest_checkpointed_step.txt").write_text("2")
    resumed_cfg = make_config(
        spread_tiny_model_dir, data_dir, tmp_path / "resumed", *LORA, "trainer.resume_mode=latest"
    )
    resumed = BasePPOExp(resumed_cfg).run()
    assert sorted(dict(resumed.history["reward/mean"])) == [3]
    for key in COMPARED:
        assert _at(resumed, key, 3) == pytest.approx(_at(full, key, 3), abs=RESUME_TOLERANCE), key
