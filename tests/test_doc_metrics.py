"""Every metric name the docs write in backticks is one a short training step really logs.

Names are `prefix/...` in backticks for the known prefixes. Pattern rule: a `<placeholder>` segment matches one or
more path segments (`eval/<data_source>/pass_at_<n>` matches `eval/synthetic/arithmetic/pass_at_1`), and `*`
matches anything (`policy/ratio_*`). Names of features the short run does not switch on are listed in
NOT_IN_SHORT_RUN with the reason.
"""

import re
from pathlib import Path

import pytest
import ray
import torch

from skyrl_gym.envs.synthetic.generate import write_dataset
from skyrl_train.config import SkyRLConfig
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer

REPO = Path(__file__).resolve().parents[1]
PREFIXES = (
    "policy",
    "critic",
    "reward",
    "generate",
    "timing",
    "trainer",
    "weight_sync",
    "eval",
    "dynamic_sampling",
    "environment",
    "memory",
)
NAME = re.compile(r"`((?:" + "|".join(PREFIXES) + r")/[A-Za-z0-9_<>*./{},-]+)`")
NOT_IN_SHORT_RUN = {
    "dynamic_sampling/": "only with trainer.algorithm.dynamic_sampling.type set (DAPO); logged in skyrl_train/rollouts/",
    "environment/near_miss/": "the custom env of docs/custom-env-training.md, not the arithmetic env of the run",
    "reward/function/": "only with a reward manager (reward.manager != env): tests/rewards/test_managers.py",
    "reward/manager_": "only with a reward manager (reward.manager != env): tests/rewards/test_scorer.py",
    "reward/model_": "only with a reward model (reward.model.path): tests/trainer/test_trainer_rewards.py",
    "reward/rule_score": "only with a reward manager or model: tests/rewards/test_scorer.py",
    "eval/reward/": "only with a reward manager or model: skyrl-train/tests/test_evaluation.py",
    "policy/off_policy/": "only with an off-policy correction on (auto: the async modes); logged by "
    "skyrl_train/algorithms/off_policy.py: skyrl-train/tests/algorithms/test_off_policy.py",
    "timing/trainer_idle": "only with trainer.mode one_step_off / fully_async: tests/trainer/test_trainer_async.py",
    "generate/prefix_cache_hit_rate": "only when prompts carry session ids (multi-turn rollouts); the short run is "
    "single-turn: skyrl-train/tests/inference/test_ray_engine.py",
    "timing/wait_generation": "only with trainer.mode=one_step_off: skyrl_train/rollouts/sources.py",
    "timing/weight_sync": "only when the sync is a call of its own (async modes, an OpenAI endpoint, engines that "
    "sleep while training); this run syncs inside the update call: tests/trainer/test_trainer_endpoint.py",
}


def documented_names() -> dict[str, list[str]]:
    """Metric names in backticks on docs/*.md pages, each with the pages that mention it."""
    found: dict[str, list[str]] = {}
    for page in sorted((REPO / "docs").rglob("*.md")):
        for name in NAME.findall(page.read_text()):
            found.setdefault(name.rstrip("."), []).append(str(page.relative_to(REPO)))
    return found


def name_pattern(name: str) -> re.Pattern:
    """A documented name as a regex: `<x>` spans one or more segments, `*` anything, `{a,b}` either word.

    Names that depend on the run's data rather than the code are generalised first: the `n` of `pass_at_<n>` (a
    page about the quickstart writes `reward/pass_at_8` for its 8 samples) and the data-source segments of
    `eval/<data_source>/<metric>` (a page about a custom env names its own data source).
    """
    name = re.sub(r"pass_at_\d+$", "pass_at_<n>", name)
    if name.startswith("eval/") and not name.startswith("eval/all/") and name.count("/") >= 2:
        name = "eval/<data_source>/" + name.rsplit("/", 1)[1]
    parts = re.split(r"(<[^>]+>|\*|\{[^}]+\})", name)
    regex = ""
    for part in parts:
        if part.startswith("<"):
            regex += r"[^\s]+?"
        elif part == "*":
            regex += r".*"
        elif part.startswith("{"):
            regex += "(?:" + "|".join(re.escape(word.strip()) for word in part[1:-1].split(",")) + ")"
        else:
            regex += re.escape(part)
    return re.compile(regex + "$")


def test_name_pattern_rule():
    assert name_pattern("eval/<data_source>/pass_at_<n>").match("eval/synthetic/arithmetic/pass_at_1")
    assert not name_pattern("eval/<data_source>/pass_at_<n>").match("eval/all/mean_reward")
    assert name_pattern("policy/ratio_*").match("policy/ratio_max")
    assert not name_pattern("critic/loss").match("critic/value_loss")
    assert name_pattern("reward/pass_at_8").match("reward/pass_at_2")
    assert name_pattern("eval/custom/near_miss/pass_at_1").match("eval/synthetic/arithmetic/pass_at_1")
    assert not name_pattern("eval/custom/near_miss/mean_rewardz").match("eval/synthetic/arithmetic/mean_reward")


@pytest.fixture(scope="module")
def logged_names(tmp_path_factory) -> set[str]:
    """Names logged by one step of the tiny trainer with a critic (GAE), a KL loss and evaluation."""
    root = tmp_path_factory.mktemp("metrics")
    model = root / "model"
    build_tiny_model(TinyModelSpec(size=1), seed=0).save_pretrained(model)
    build_char_tokenizer().save_pretrained(str(model))
    write_dataset(root / "data", "arithmetic", train_size=16, test_size=4, difficulty=1, seed=3)
    overrides = [
        "trainer.device=cpu",
        f"trainer.policy.model.path={model}",
        f"trainer.critic.model.path={model}",
        f"data.train_data=['{root / 'data' / 'train.parquet'}']",
        f"data.val_data=['{root / 'data' / 'test.parquet'}']",
        "data.max_prompt_length=64",
        "environment.env_class=arithmetic",
        "trainer.placement.colocate_all=true",
        "trainer.placement.policy_num_gpus_per_node=1",
        "trainer.placement.ref_num_gpus_per_node=1",
        "trainer.placement.critic_num_gpus_per_node=1",
        "trainer.placement.num_cpus_per_worker=1",
        "generator.inference_engine.backend=hf",
        "generator.inference_engine.num_engines=1",
        "generator.inference_engine.model_dtype=float32",
        "generator.inference_engine.weight_sync_backend=shm",
        "trainer.policy.fsdp.mixed_precision.param_dtype=float32",
        "trainer.ref.fsdp.mixed_precision.param_dtype=float32",
        "trainer.critic.fsdp.mixed_precision.param_dtype=float32",
        "trainer.policy.gradient_checkpointing=false",
        "trainer.critic.gradient_checkpointing=false",
        "trainer.algorithm.advantage_estimator=gae",
        "trainer.algorithm.use_kl_loss=true",
        "trainer.train_batch_size=4",
        "trainer.policy_mini_batch_size=2",
        "trainer.critic_mini_batch_size=2",
        "trainer.micro_train_batch_size_per_gpu=4",
        "trainer.micro_forward_batch_size_per_gpu=4",
        "generator.n_samples_per_prompt=2",
        "generator.sampling_params.max_generate_length=6",
        "generator.eval_sampling_params.max_generate_length=6",
        "trainer.max_training_steps=1",
        "trainer.eval_before_train=true",
        "trainer.eval_interval=1",
        "trainer.ckpt_interval=0",
        "trainer.resume_mode=none",
        f"trainer.ckpt_path={root / 'ckpts'}",
        f"trainer.export_path={root / 'exports'}",
        f"trainer.log_path={root / 'logs'}",
        "trainer.logger=['console']",
    ]
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    torch.set_num_threads(1)
    try:
        result = BasePPOExp(SkyRLConfig.from_cli_overrides(overrides)).run()
    finally:
        if started:
            ray.shutdown()
    return set(result.history)


@pytest.mark.integration
@pytest.mark.slow
def test_documented_metric_names_are_logged(logged_names):
    missing = []
    for name, where in sorted(documented_names().items()):
        if any(name.startswith(prefix) for prefix in NOT_IN_SHORT_RUN):
            continue
        pattern = name_pattern(name)
        if not any(pattern.match(logged) for logged in logged_names):
            missing.append(f"`{name}` ({', '.join(sorted(set(where)))})")
    assert not missing, (
        "documented metrics that no step logs:\n"
        + "\n".join(missing)
        + ("\n\nlogged: " + ", ".join(sorted(logged_names)))
    )
