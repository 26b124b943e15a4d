"""NovaSky-AI/SkyRL's entrypoint modules, run by this project: what each one means here, or which feature it needs.

Upstream's run scripts start training with `python -m <module> <overrides>`: `skyrl_train.entrypoints.main_base`
(legacy layout, this project's own module), `skyrl.train.entrypoints.main_base` (current layout) and example
entrypoints such as `examples.algorithms.dapo.main_dapo`. This project ships those module paths (the `skyrl`
namespace in skyrl-train, thin files under the repo's `examples/`) and each calls `run_upstream_module(name)`,
which runs this project's `main_base` (`main_generate` for generation-only runs) with the settings the upstream
module implies (the async trainers are `trainer.mode` here; the on-policy distillation trainer turns SkyRL's
`use_kl_in_reward=true` into `on_policy_distillation=true`), or refuses the run before anything starts, naming the
feature this project lacks.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class UpstreamModule:
    """What one upstream entrypoint module is here."""

    overrides: tuple[str, ...] = ()
    """Settings the upstream module implies, applied before the command line's."""
    unsupported: str = ""
    """The feature the module needs that this project does not have (the run is refused)."""
    instead: str = ""
    """What does that job here, if anything."""
    entry: str = "skyrl_train.entrypoints.main_base"
    """This project's entrypoint module whose `main` runs it."""
    reads: tuple[tuple[str, str], ...] = ()
    """`(override, override here)`: a command-line override the upstream module reads differently (its value
    compared without case, a leading `+` ignored), replaced before the config is built."""
    renames: tuple[tuple[str, str], ...] = ()
    """`(key, key here)`: a key only the upstream module reads (its generator's own config fields, set with a
    leading `+`), renamed before the config is built."""
    imports: tuple[str, ...] = ()
    """Modules imported before the run (they register what the module's settings name, e.g. a rollout workflow)."""
    environment: Optional[Callable[[Mapping[str, str]], tuple[tuple[str, ...], str, str]]] = None
    """Reads the environment variables the upstream module reads: `(settings, "", "")`, settings applied after
    `overrides`, or `((), feature, setting)` when the variables ask for a feature this project does not have
    (`setting` names the variable and value; the run is refused)."""

    def translate(self, arg: str) -> str:
        """`arg` as this project spells what the module makes of it."""
        key, sep, value = arg.lstrip("+").partition("=")
        for given, here in self.renames:
            if sep and key == given:
                return f"{here}={value}"
        for given, here in self.reads:
            given_key, _, given_value = given.partition("=")
            if sep and key == given_key and value.strip().lower() == given_value:
                return here
        return arg


_DAPO = UpstreamModule()  # DAPO's soft overlong penalty: its `overlong_buffer.len` key switches it on (upstream_keys)
_ONE_STEP_OFF = UpstreamModule(("trainer.mode=one_step_off",))
_FULLY_ASYNC = UpstreamModule(("trainer.mode=fully_async",))
FLASHRL_FP8 = ("fp8_vllm",)
"""`FLASHRL_CONFIG` values that mean vLLM's own online fp8 quantization of the rollout engine's weights."""


def flash_rl_settings(environ: Mapping[str, str]) -> tuple[tuple[str, ...], str, str]:
    """What SkyRL's FlashRL entrypoint makes of `FLASHRL_CONFIG` (its scripts set it with `uv run --env-file`):
    unset or `bf16`, plain rollouts (FlashRL patches vLLM only when it is set); `fp8_vllm`, vLLM's online fp8
    quantization (`quantization=fp8`: weights quantized at load and again at every weight sync, which vLLM's in-place
    reload does for online-quantized layers), corrected off-policy by the script's TIS settings; anything else (a
    FlashRL config file with calibrated int8 profiles, FlashRL's own fp8 kernels) is refused by name."""
    value = environ.get("FLASHRL_CONFIG", "").strip()
    if value in ("", "bf16"):
        return (), "", ""
    if value in FLASHRL_FP8:
        return ("generator.inference_engine.engine_init_kwargs.quantization=fp8",), "", ""
    return (), "FlashRL's calibrated int8 rollouts or its own fp8 kernels", f"FLASHRL_CONFIG={value}"


# DAPO with quantized rollouts: the scripts set DAPO's and TIS's keys themselves
_FLASH_RL = UpstreamModule(
    environment=flash_rl_settings, instead="FLASHRL_CONFIG=fp8_vllm runs vLLM's fp8 rollouts (online quantization)"
)
# SkyRL's mini-swe-agent generator: skyrl-agent's `mini_swe_agent` workflow, which runs each agent itself (upstream's
# generator ignores `generator.batched` too)
_MINI_SWE = UpstreamModule(
    ("generator.workflow=mini_swe_agent",),
    reads=(("generator.batched=true", "generator.batched=auto"),),
    renames=(
        ("generator.miniswe_config_path", "generator.workflow_args.config_path"),
        ("generator.miniswe_traj_dir", "generator.workflow_args.traj_dir"),
    ),
    imports=("skyrl_agent.mini_swe_agent",),
)
_HARBOR = UpstreamModule(unsupported="the Harbor integration (Terminal-Bench, CodeContests)")
_BUILTIN_ENV = UpstreamModule()  # the example registers an env skyrl-gym has built in (llm_as_a_judge, multiply)
_DISTILL_READS = (("trainer.algorithm.use_kl_in_reward=true", "trainer.algorithm.on_policy_distillation=true"),)
# SkyRL's distillation trainer makes KL-in-reward the whole reward (teacher = the ref model, coefficient 1, k1)
_DISTILL = UpstreamModule(reads=_DISTILL_READS)
# its legacy example also registered an importance-sampling loss reduced as seq_mean_token_sum_norm
_DISTILL_LEGACY = UpstreamModule(("trainer.algorithm.loss_reduction=seq_mean_token_sum_norm",), reads=_DISTILL_READS)
_GENERATE = UpstreamModule(entry="skyrl_train.entrypoints.main_generate")
_CUSTOM = UpstreamModule()  # the example files register their estimator / loss with this project's registries

UPSTREAM_MODULES: dict[str, UpstreamModule] = {
    "skyrl.train.entrypoints.main_base": UpstreamModule(),
    "skyrl.train.entrypoints.main_generate": _GENERATE,
    **{
        f"examples.{layout}{path}": module
        for layout in ("", "train.")
        for path, module in (
            ("algorithms.dapo.main_dapo", _DAPO),
            ("tis_correction.main_tis_dapo", _DAPO),
            ("async.main_async", _ONE_STEP_OFF),
            ("fully_async.main_fully_async", _FULLY_ASYNC),
            ("mini_swe_agent.main_mini_swe", _MINI_SWE),
            ("llm_as_a_judge.main_llm_judge", _BUILTIN_ENV),
            ("multiply.main_multiply", _BUILTIN_ENV),
        )
    },
    "examples.on_policy_distillation.main_on_policy_distill": _DISTILL_LEGACY,
    "examples.train.on_policy_distillation.main_on_policy_distill": _DISTILL,
    "examples.flash_rl.main_dapo_flashrl": _FLASH_RL,
    "examples.harbor.entrypoints.main_harbor": _HARBOR,
    "examples.harbor.entrypoints.main_harbor_generate": _HARBOR,
    "examples.algorithm.custom_advantage_estimator.main_custom_adv_est": _CUSTOM,
    "examples.algorithm.custom_policy_loss.main_custom_policy_loss": _CUSTOM,
    "examples.train.algorithms.custom_advantage_estimator.main_custom_adv_est": _CUSTOM,
    "examples.train.algorithms.custom_policy_loss.main_custom_policy_loss": _CUSTOM,
    "examples.train.algorithms.dapo.main_dapo_fully_async": _FULLY_ASYNC,
    "examples.train.fully_async.main_fully_async_sim": UpstreamModule(
        unsupported="simulated training (SkyRL's generation benchmark)"
    ),
    "examples.train.rlm.main_rlm": UpstreamModule(unsupported="SkyRL's recursive-LM (RLM) environments"),
}
"""Every upstream entrypoint module an upstream run script calls, by module path."""


def refusal(name: str, module: UpstreamModule, feature: str = "", setting: str = "") -> str:
    """The message refusing a run of `name`, naming the feature it needs (`feature`: one its environment asks for
    with `setting`)."""
    subject = f"{name} with {setting}" if setting else name
    message = f"config error: {subject} needs {feature or module.unsupported}, which is not supported here"
    return message + (f"; {module.instead}" if module.instead else "")


def run_upstream_module(name: str, argv: Optional[Sequence[str]] = None) -> None:
    """Run upstream module `name` here on the command line `argv` (default: the process arguments)."""
    from skyrl_train.config.cli import CONFIG_ERROR_EXIT_CODE

    module = UPSTREAM_MODULES[name]
    settings, unsupported, setting = module.environment(os.environ) if module.environment else ((), "", "")
    if module.unsupported or unsupported:
        print(refusal(name, module, unsupported, setting), file=sys.stderr)
        raise SystemExit(CONFIG_ERROR_EXIT_CODE)
    for name_to_import in module.imports:
        importlib.import_module(name_to_import)
    args = [module.translate(arg) for arg in (sys.argv[1:] if argv is None else argv)]
    extra = (*module.overrides, *settings)
    importlib.import_module(module.entry).main(args, upstream_module=True, extra_overrides=extra)


def render_modules_markdown() -> str:
    """The module-path section of `docs/reference/skyrl-keys.md` (rendered by `scripts/gen_config_docs.py`)."""
    lines = [
        "## Entrypoint modules",
        "",
        "Run from this repo's root (the `examples.*` paths are files under `examples/`).",
        "",
        "| SkyRL module | here |",
        "|---|---|",
        "| `skyrl_train.entrypoints.main_base` | this project's `main_base` |",
        "| `skyrl_train.entrypoints.main_generate` | this project's `main_generate` (generation only) |",
    ]
    for name, module in UPSTREAM_MODULES.items():
        if module.unsupported:
            here = f"refused: needs {module.unsupported}" + (f"; {module.instead}" if module.instead else "")
        else:
            here = f"`{module.entry.rsplit('.', 1)[1]}`"
            here += f" with `{' '.join(module.overrides)}`" if module.overrides else ""
            here += "".join(f"; `{given}` means `{means}`" for given, means in module.reads)
            here += "".join(f"; `{given}` is `{means}`" for given, means in module.renames)
            here += "; reads `FLASHRL_CONFIG` (`fp8_vllm`: vLLM's fp8 rollouts)" if module.environment else ""
        lines.append(f"| `{name}` | {here.replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"
