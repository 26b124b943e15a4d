"""`scripts/count_upstream_scripts.py` sorts a failed `--dry-run` by what validation really says: a problem refusing
a feature by name says "not supported here" (validation words every such refusal that way, `yet` or not), anything
else is a plain config error. The messages below come from this project's own validation, not from strings written
here, so a refusal reworded without the phrase fails this test instead of being counted as an "other failure"."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.validation import find_problems

REPO = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("count_upstream_scripts", REPO / "scripts" / "count_upstream_scripts.py")
counter = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(counter)

MEGATRON = [
    "trainer.strategy=megatron",
    "trainer.device=cuda",
    "trainer.placement.policy_num_gpus_per_node=4",
    "trainer.placement.ref_num_gpus_per_node=4",
    "generator.inference_engine.num_engines=4",
]

REFUSALS = {  # overrides -> the feature the counter reports
    "LoRA dropout on megatron": (
        [*MEGATRON, "trainer.policy.model.lora.rank=8", "trainer.policy.model.lora.dropout=0.1"],
        "LoRA dropout on the Megatron workers",
    ),
    "context parallelism": (
        [*MEGATRON, "trainer.policy.megatron.context_parallel_size=2"],
        "trainer.<role>.megatron.context_parallel_size (not supported yet)",
    ),
    "tensor parallelism on the hf engine": (
        ["generator.inference_engine.tensor_parallel_size=2", "generator.inference_engine.num_engines=1"],
        "generator.inference_engine.tensor_parallel_size=2 with backend=hf",
    ),
    "vllm tensor parallelism on CPU": (
        [
            "trainer.device=cpu",
            "generator.inference_engine.backend=vllm",
            "generator.inference_engine.tensor_parallel_size=2",
            "generator.inference_engine.num_engines=1",
        ],
        "generator.inference_engine.tensor_parallel_size=2 with backend=vllm on trainer.device=cpu",
    ),
    "colocated sglang tensor parallelism": (
        [
            "trainer.device=cuda",
            "generator.inference_engine.backend=sglang",
            "generator.inference_engine.tensor_parallel_size=2",
            "generator.inference_engine.num_engines=1",
        ],
        "generator.inference_engine.tensor_parallel_size=2 with backend=sglang and trainer.placement.colocate_all=true",
    ),
}


def _message(overrides: list[str]) -> tuple[str, list[str]]:
    """The `config error:` text `--dry-run` prints for these overrides, and its problems."""
    base = ["trainer.placement.policy_num_gpus_per_node=2", "trainer.placement.ref_num_gpus_per_node=2"]
    problems = find_problems(SkyRLConfig.from_cli_overrides([*base, *overrides], validate=False))
    return "config error:\n" + "\n".join(f"- {problem}" for problem in problems), problems


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_feature_refusal_counts_as_refused_by_name_with_its_feature(case):
    overrides, feature = REFUSALS[case]
    message, problems = _message(overrides)
    assert problems, f"{case}: validation found nothing"
    assert counter._refused_by_name(message), problems
    assert feature in {counter.feature_of(problem) for problem in counter.problems_of(message)}


def test_a_plain_config_error_beside_a_refusal_is_another_failure():
    overrides, _ = REFUSALS["LoRA dropout on megatron"]
    message, _ = _message([*overrides, "trainer.policy_mini_batch_size=7"])
    assert not counter._refused_by_name(message)
    call = counter.Call("skyrl_train.entrypoints.main_base", [], exit_code=2, message=message)
    assert not counter.ScriptResult("x.sh", [call]).refused_by_name


def test_a_refused_upstream_override_with_hydras_plus_prefix_is_counted_by_its_feature():
    """SkyRL's scripts add keys with Hydra's `+key=value`; the refusal quotes the override, and the counter reports
    the feature, so every script with that override lands under one blocker."""
    from skyrl_train.config.errors import UnsupportedFeatureError

    key = "+trainer.policy.megatron_config.moe_router_dtype"
    features = set()
    for value in ("fp16", "bf16"):
        with pytest.raises(UnsupportedFeatureError) as refused:
            SkyRLConfig.from_cli_overrides([f"{key}={value}"])
        message = f"config error:\n- {refused.value}"
        assert counter._refused_by_name(message)
        features |= {counter.feature_of(problem) for problem in counter.problems_of(message)}
    assert features == {"other MoE router dtypes"}


def test_the_variables_of_uv_run_env_file_reach_the_replayed_call(tmp_path):
    """SkyRL's FlashRL scripts choose the rollout quantization in a file they hand `uv run --env-file`: the stub
    records it (run through bash, as the counter runs it) and the replay sets its variables, as uv would."""
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / ".env.fp8").write_text(
        '# the quantization\nFLASHRL_CONFIG="fp8_vllm"\nexport LEVEL=DEBUG # optional\nEMPTY=\n# OFF=1'
    )
    script = tmp_path / "run.sh"
    script.write_text(
        "uv run --isolated --env-file cfg/.env.fp8 --with x -- python -m examples.flash_rl.main_dapo_flashrl a=1\n"
        "uv run --env-file=cfg/.env.fp8 -m other.module\n"
        "python -m plain.module b=2\n"
    )
    stubs, home = tmp_path / "stubs", tmp_path / "home"
    stubs.mkdir()
    home.mkdir()
    for name in ("uv", "python"):
        (stubs / name).write_text(counter._STUB)
        (stubs / name).chmod(0o755)
    first, second, third = counter.record_calls(script, tmp_path, home, stubs)
    expected = {"FLASHRL_CONFIG": "fp8_vllm", "LEVEL": "DEBUG", "EMPTY": ""}
    assert (first.module, first.args, first.env) == ("examples.flash_rl.main_dapo_flashrl", ["a=1"], expected)
    assert (second.module, second.env) == ("other.module", expected)
    assert (third.module, third.args, third.env) == ("plain.module", ["b=2"], {})
