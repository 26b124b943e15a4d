"""NovaSky-AI/SkyRL's entrypoint module paths run this project: `skyrl.train.entrypoints.main_base` (the `skyrl`
namespace skyrl-train ships), `skyrl_train.entrypoints.main_base`, and the example entrypoints under the repo's
`examples/` (run from the repo root, as upstream's scripts are); modules needing a feature this project lacks refuse
by name before anything starts."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from skyrl_train.entrypoints.upstream_modules import UPSTREAM_MODULES, run_upstream_module

REPO = Path(__file__).resolve().parents[3]
UPSTREAM_SCRIPT = [  # overrides as SkyRL's current gsm8k script writes them, shrunk to one CPU worker
    "trainer.strategy=fsdp",
    "trainer.max_prompt_length=256",
    "trainer.policy.optimizer_config.lr=2.0e-6",
    "trainer.resume_mode=null",
    "generator.inference_engine.run_engines_locally=true",
    "generator.inference_engine.weight_sync_backend=nccl",
    "trainer.train_batch_size=8",
    "trainer.policy_mini_batch_size=8",
]


def dry_run(module: str, *args: str, capsys) -> tuple[int, str, str]:
    code = 0
    try:
        run_upstream_module(module, [*args, "--dry-run"])
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _python_m(*command: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m <command>` in a fresh interpreter started in `cwd`, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", *command], capture_output=True, text=True, timeout=300, cwd=cwd, check=False
    )


def test_every_upstream_module_path_exists_and_runs_its_own_entry():
    sys.path.insert(0, str(REPO))
    try:
        for name in UPSTREAM_MODULES:
            spec = importlib.util.find_spec(name)
            assert spec is not None and spec.origin, name
            assert f'run_upstream_module("{name}"' in Path(spec.origin).read_text(), name
    finally:
        sys.path.remove(str(REPO))


def test_the_async_example_entrypoints_set_the_trainer_mode(capsys):
    for module, mode in (
        ("examples.async.main_async", "one_step_off"),
        ("examples.train.fully_async.main_fully_async", "fully_async"),
    ):
        code, out, err = dry_run(module, "trainer.placement.colocate_all=false", capsys=capsys)
        assert code == 0, err
        assert f'mode: "{mode}"' in out


def test_dapo_entrypoint_with_the_legacy_buffer_keys_turns_the_penalty_on(capsys):
    code, out, err = dry_run(
        "examples.algorithms.dapo.main_dapo",
        "+trainer.algorithm.overlong_buffer.len=512",
        "+trainer.algorithm.overlong_buffer.penalty_factor=1.0",
        capsys=capsys,
    )
    assert code == 0, err
    buffer = OmegaConf.create(out.split("# resolved SkyRL config\n", 1)[1]).trainer.algorithm.overlong_buffer
    assert buffer.enabled is True and buffer.length == 512


def test_the_judge_and_multiply_examples_run_their_built_in_envs_with_skyrls_env_section(capsys):
    def environment(module, *args):
        code, out, err = dry_run(module, *args, capsys=capsys)
        assert code == 0, err
        return OmegaConf.create(out.split("# resolved SkyRL config\n", 1)[1]).environment

    judge = environment(
        "examples.llm_as_a_judge.main_llm_judge",
        "environment.env_class=llm_as_a_judge",
        "environment.skyrl_gym.llm_as_a_judge.model=judge",
    )
    assert judge.env_class == "llm_as_a_judge" and judge.env_configs == {"llm_as_a_judge": {"model": "judge"}}
    assert (
        environment("examples.train.multiply.main_multiply", "environment.env_class=multiply").env_class == "multiply"
    )


def test_the_distillation_modules_read_kl_in_reward_as_the_teacher_reward(capsys):
    def algorithm(module, *args):
        code, out, err = dry_run(
            module, "trainer.ref.model.path=teacher", "trainer.algorithm.use_kl_loss=false", *args, capsys=capsys
        )
        assert code == 0, err
        return OmegaConf.create(out.split("# resolved SkyRL config\n", 1)[1]).trainer.algorithm

    current = algorithm(
        "examples.train.on_policy_distillation.main_on_policy_distill", "trainer.algorithm.use_kl_in_reward=True"
    )
    assert current.on_policy_distillation is True and current.use_kl_in_reward is False
    assert current.loss_reduction == "token_mean"
    # SkyRL's legacy example also reduced its importance-sampling loss as Dr. GRPO does; its scripts' legacy keys
    # (generator.backend) imply the legacy layout's normaliser
    legacy = algorithm(
        "examples.on_policy_distillation.main_on_policy_distill",
        "+trainer.algorithm.use_kl_in_reward=true",
        "generator.backend=vllm",
    )
    assert legacy.on_policy_distillation is True and legacy.loss_reduction == "seq_mean_token_sum_norm"
    assert legacy.max_seq_len > 0
    # without KL in the reward SkyRL's distillation trainer never replaces the rewards: neither does this one
    module = UPSTREAM_MODULES["examples.train.on_policy_distillation.main_on_policy_distill"]
    for arg in ("trainer.algorithm.use_kl_in_reward=false", "trainer.algorithm.use_kl_loss=true"):
        assert module.translate(arg) == arg


@pytest.mark.parametrize("module", [name for name, module in UPSTREAM_MODULES.items() if module.unsupported])
def test_modules_needing_a_missing_feature_refuse_by_name(module, capsys):
    code, out, err = dry_run(module, "trainer.seed=1", capsys=capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"config error: {module} needs ") and "which is not supported here" in err


@pytest.mark.integration
def test_python_m_skyrl_train_main_base_runs_ours_and_says_what_it_translated(tmp_path):
    result = _python_m("skyrl.train.entrypoints.main_base", *UPSTREAM_SCRIPT, "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("config note: trainer.strategy=fsdp: runs FSDP2") == 1
    assert "config warning: trainer.hf_save_interval=-1" in result.stderr
    header, resolved = result.stdout.split("# resolved SkyRL config\n", 1)
    assert "#   trainer.max_prompt_length=256 -> data.max_prompt_length=256" in header
    assert "#   trainer.policy.optimizer_config.lr=2.0e-6 -> trainer.policy.optimizer.lr=2.0e-6" in header
    cfg = OmegaConf.create(resolved)
    assert cfg.trainer.strategy == "fsdp2" and cfg.trainer.resume_mode == "none"
    assert cfg.data.max_prompt_length == 256 and cfg.trainer.policy.optimizer.lr == 2.0e-6
    assert cfg.generator.inference_engine.weight_sync_backend == "auto"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_an_example_module_path_runs_from_the_repo_root_and_a_missing_feature_exits_2():
    ok = _python_m("examples.train.algorithms.dapo.main_dapo", *UPSTREAM_SCRIPT, "--dry-run", cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    refused = _python_m("examples.harbor.entrypoints.main_harbor", "--dry-run", cwd=REPO)
    assert refused.returncode == 2 and "Harbor" in refused.stderr and "not supported here" in refused.stderr


def test_the_flash_rl_module_reads_flashrl_config_as_flashrl_does(monkeypatch, capsys):
    """Unset (or `bf16`): plain rollouts; `fp8_vllm`: vLLM's online fp8 quantization; a FlashRL config file (its
    calibrated int8 profiles): refused by name, naming the value and the fp8 way."""
    module, args = "examples.flash_rl.main_dapo_flashrl", ("generator.backend=vllm", "trainer.resume_mode=null")

    def engine_kwargs(value):
        if value is None:
            monkeypatch.delenv("FLASHRL_CONFIG", raising=False)
        else:
            monkeypatch.setenv("FLASHRL_CONFIG", value)
        code, out, err = dry_run(module, *args, capsys=capsys)
        assert code == 0, err
        resolved = OmegaConf.create(out.split("# resolved SkyRL config\n", 1)[1])
        return dict(resolved.generator.inference_engine.engine_init_kwargs)

    assert engine_kwargs(None) == {} and engine_kwargs("bf16") == {}
    assert engine_kwargs("fp8_vllm") == {"quantization": "fp8"}
    monkeypatch.setenv("FLASHRL_CONFIG", "LiyuanLucasLiu/Qwen2.5-0.5B-quantized.w8a8/flashrl_config.yaml")
    code, out, err = dry_run(module, *args, capsys=capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"config error: {module} with FLASHRL_CONFIG=LiyuanLucasLiu/Qwen2.5-0.5B-quantized.w8a8/")
    assert "needs FlashRL's calibrated int8 rollouts or its own fp8 kernels, which is not supported here" in err
    assert err.rstrip().endswith("FLASHRL_CONFIG=fp8_vllm runs vLLM's fp8 rollouts (online quantization)")


def test_the_custom_estimator_and_loss_examples_register_what_their_scripts_select(capsys):
    sys.path.insert(0, str(REPO))
    try:
        from examples.algorithm.custom_advantage_estimator.main_custom_adv_est import simple_baseline
        from examples.algorithm.custom_policy_loss.main_custom_policy_loss import reinforce_loss
    finally:
        sys.path.remove(str(REPO))
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    advantages, _ = simple_baseline(token_level_rewards=rewards, response_mask=mask)
    # scores 1, 0, 3 -> mean 4/3 -> -1/3, -4/3, 5/3 on the valid tokens
    expected = torch.tensor([[-1 / 3, -1 / 3, 0.0], [-4 / 3] * 3, [5 / 3] * 3])
    assert torch.allclose(advantages, expected)
    log_probs = torch.tensor([[-1.0, -2.0, -9.0]], requires_grad=True)
    loss, _ = reinforce_loss(
        log_probs=log_probs,
        old_log_probs=None,
        advantages=torch.tensor([[2.0, 2.0, 2.0]]),
        loss_mask=torch.tensor([[1.0, 1.0, 0.0]]),
        config={"loss_reduction": "token_mean"},
    )
    assert loss.item() == pytest.approx(3.0)  # -(-1 * 2 + -2 * 2) / 2 valid tokens
    for module, key, name in (
        (
            "examples.train.algorithms.custom_advantage_estimator.main_custom_adv_est",
            "advantage_estimator",
            "simple_baseline",
        ),
        ("examples.algorithm.custom_policy_loss.main_custom_policy_loss", "policy_loss_type", "reinforce"),
    ):
        code, out, err = dry_run(module, f"trainer.algorithm.{key}={name}", capsys=capsys)
        assert code == 0, err
        assert f'{key}: "{name}"' in out


def test_the_mini_swe_agent_module_runs_the_mini_swe_agent_workflow_with_its_generator_keys(capsys):
    """SkyRL's mini-swe-agent generator reads `+generator.miniswe_config_path` / `miniswe_traj_dir` and runs each
    agent itself (it ignores `generator.batched`): here they are the `mini_swe_agent` workflow's arguments."""
    pytest.importorskip("skyrl_agent")
    args = (
        "generator.backend=vllm",
        "trainer.resume_mode=null",
        "generator.batched=true",
        "generator.max_turns=20",
        "+generator.miniswe_config_path=examples/mini_swe_agent/swebench.yaml",
        "+generator.miniswe_traj_dir=/trajs",
    )
    for module in ("examples.mini_swe_agent.main_mini_swe", "examples.train.mini_swe_agent.main_mini_swe"):
        code, out, err = dry_run(module, *args, capsys=capsys)
        assert code == 0, err
        generator = OmegaConf.create(out.split("# resolved SkyRL config\n", 1)[1]).generator
        assert generator.workflow == "mini_swe_agent" and generator.batched is False
        assert dict(generator.workflow_args) == {
            "config_path": "examples/mini_swe_agent/swebench.yaml",
            "traj_dir": "/trajs",
        }
    # the keys are the module's own: the plain entrypoint still refuses them as unknown
    code, out, err = dry_run("skyrl.train.entrypoints.main_base", "+generator.miniswe_traj_dir=/t", capsys=capsys)
    assert code == 2 and "generator.miniswe_traj_dir" in err
