"""Registry names in the config are checked against the live registries, with close matches, before anything runs."""

import pytest

import skyrl_gym
from skyrl_train.algorithms.registry import ADVANTAGE_ESTIMATORS, register_advantage_estimator
from skyrl_train.config import ConfigValidationError, SkyRLConfig
from skyrl_train.config.cli import run_cli
from skyrl_train.config.registered_names import check_registered_names, named_values, registered_name_problems
from skyrl_train.inference.ray_engine import ENGINE_BUILDERS
from skyrl_train.utils.tracking import TRACKING_BACKENDS, TrackingBackend, register_tracking_backend
from skyrl_train.weight_sync.strategy import WEIGHT_SYNC_STRATEGIES, WeightSyncStrategy, register_weight_sync_strategy

BAD_NAMES = {
    "trainer.algorithm.advantage_estimator=grpoo": ("advantage estimator", "'grpo'"),
    "trainer.algorithm.policy_loss_type=regulr": ("policy loss", "'regular'"),
    "trainer.algorithm.loss_reduction=token_meen": ("loss reduction", "'token_mean'"),
    "trainer.algorithm.kl_estimator_type=k4": ("KL estimator", "'k1'"),
    "environment.env_class=gsm8kk": ("environment", "'gsm8k'"),
    "generator.inference_engine.backend=vlm": ("engine backend", "'vllm'"),
    "generator.inference_engine.weight_sync_backend=broadcst": ("weight sync strategy", "'broadcast'"),
    "trainer.logger=[console,tensorbord]": ("tracking backend", "'tensorboard'"),
    "trainer.policy.optimizer.scheduler=cosin": ("learning-rate schedule", "'cosine'"),
    "generator.chat_template.name_or_path=chatmll": ("chat template", "'chatml'"),
}


@pytest.mark.parametrize("override", list(BAD_NAMES))
def test_each_unregistered_name_is_named_with_its_close_matches(override):
    kind, close = BAD_NAMES[override]
    key, value = override.split("=")
    value = value.strip("[]").split(",")[-1]
    problems = registered_name_problems(SkyRLConfig.from_cli_overrides([override]))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{key}={value!r} is not a registered {kind}. Did you mean ")
    assert close in problems[0].split("?")[0] and "Registered: [" in problems[0]


def test_defaults_and_every_builtin_name_pass():
    assert registered_name_problems(SkyRLConfig()) == []
    kinds = {kind for _, kind, _ in named_values(SkyRLConfig())}
    assert {"advantage estimator", "policy loss", "environment", "engine backend", "tracking backend"} <= kinds
    for override in ["generator.inference_engine.backend=vllm", "generator.inference_engine.weight_sync_backend=shm"]:
        assert registered_name_problems(SkyRLConfig.from_cli_overrides([override])) == []


def test_names_registered_at_run_time_are_seen():
    class Recorder(TrackingBackend):
        def log(self, metrics, step):
            pass

        def finish(self):
            pass

    class NoSync(WeightSyncStrategy):
        pass

    overrides = [
        "trainer.algorithm.advantage_estimator=my_estimator",
        "environment.env_class=my_env",
        "trainer.logger=[console,my_logger]",
        "generator.inference_engine.backend=my_engine",
        "generator.inference_engine.weight_sync_backend=my_sync",
    ]
    cfg = SkyRLConfig.from_cli_overrides(overrides)
    assert len(registered_name_problems(cfg)) == 5
    register_advantage_estimator("my_estimator")(lambda **kwargs: None)
    skyrl_gym.register("my_env", "skyrl_gym.envs.gsm8k.env:GSM8kEnv")
    register_tracking_backend("my_logger")(Recorder)
    ENGINE_BUILDERS.add("my_engine", lambda settings: None)
    register_weight_sync_strategy("my_sync")(NoSync)
    try:
        assert registered_name_problems(cfg) == []
    finally:
        ADVANTAGE_ESTIMATORS.unregister("my_estimator")
        skyrl_gym.deregister("my_env")
        del TRACKING_BACKENDS["my_logger"]
        ENGINE_BUILDERS.unregister("my_engine")
        WEIGHT_SYNC_STRATEGIES.unregister("my_sync")


def test_dataset_env_classes_are_checked_with_where_they_were_seen():
    with pytest.raises(ConfigValidationError) as info:
        check_registered_names(SkyRLConfig(), {"arithmetik": "train data, 3 row(s), first uid 0:4"})
    (problem,) = info.value.problems
    assert problem.startswith(
        "env_class 'arithmetik' of the dataset rows (train data, 3 row(s), first uid 0:4) is not a registered"
        " environment. Did you mean 'arithmetic'"
    )


def test_dry_run_refuses_an_unregistered_name_and_sees_one_registered_before_it(capsys):
    with pytest.raises(SystemExit) as info:
        run_cli(None, ["trainer.algorithm.advantage_estimator=grpoo", "--dry-run"])
    assert info.value.code == 2
    assert "trainer.algorithm.advantage_estimator='grpoo' is not a registered advantage estimator" in (
        capsys.readouterr().err
    )
    register_advantage_estimator("grpoo")(lambda **kwargs: None)
    try:
        run_cli(None, ["trainer.algorithm.advantage_estimator=grpoo", "--dry-run"])
    finally:
        ADVANTAGE_ESTIMATORS.unregister("grpoo")
    assert 'advantage_estimator: "grpoo"' in capsys.readouterr().out
