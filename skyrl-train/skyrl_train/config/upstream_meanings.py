"""Keys NovaSky-AI/SkyRL spells like this project but reads differently: take upstream's meaning or say so.

A run that speaks SkyRL's dialect (any upstream key, value or module path was used; see `upstream.Translation`)
gets upstream's meaning where that costs nothing (`add_implied_meanings`: evaluation generates as long as training;
the legacy layout's Dr. GRPO normaliser), and a start-up warning naming both meanings where this project keeps its
own (`dialect_warnings`: checkpoint and export intervals, evaluation switches, TIS in the async modes, the legacy
token mean). Two mismatches matter with any dialect and are ordinary config warnings (`WARNING_CHECKS`): DAPO's
overlong buffer set without `enabled`, and the KL-in-reward coefficient.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from skyrl_train.config.overrides import Override

if TYPE_CHECKING:
    from skyrl_train.config.root import SkyRLConfig
    from skyrl_train.config.upstream import Translation

_TRAIN_LENGTH = "generator.sampling_params.max_generate_length"
_EVAL_LENGTH = "generator.eval_sampling_params.max_generate_length"


def _last_value(overrides: list[Override], key: str) -> Any:
    for override in reversed(overrides):
        if override.key == key and override.action != "delete":
            return override.value
    return None


def _default(key: str) -> Any:
    from skyrl_train.config.root import SkyRLConfig
    from skyrl_train.config.validation import get_path

    return get_path(SkyRLConfig(), key)


def add_implied_meanings(translation: Translation, given: set[str]) -> None:
    """Add the settings that give a SkyRL-dialect run upstream's meaning where this project's defaults differ."""
    from skyrl_train.config.upstream import Applied, hydra_value

    if not translation.speaks_skyrl:
        return

    def imply(key: str, value: Any, why: str) -> None:
        text = f"{key}={hydra_value(value)}"
        translation.overrides.append(Override(key=key, value=value, action="set", text=text))
        translation.applied.append(Applied(f"(not given) {key}", (text,), why))

    length = _last_value(translation.overrides, _TRAIN_LENGTH)
    if length is not None and _EVAL_LENGTH not in given:
        imply(_EVAL_LENGTH, length, "SkyRL's evaluation generates as long as training unless told otherwise")
    reduction = _last_value(translation.overrides, "trainer.algorithm.loss_reduction")
    if translation.legacy and reduction == "seq_mean_token_sum_norm" and "trainer.algorithm.max_seq_len" not in given:
        prompt = _last_value(translation.overrides, "generator.max_input_length")
        if prompt is None:
            prompt = _last_value(translation.overrides, "data.max_prompt_length") or _default("data.max_prompt_length")
        response = length if length is not None else _default(_TRAIN_LENGTH)
        imply(
            "trainer.algorithm.max_seq_len",
            int(prompt) + int(response),
            "SkyRL's legacy layout normalises Dr. GRPO by max_input_length + max_generate_length",
        )


def dialect_warnings(cfg: SkyRLConfig, translation: Translation) -> list[str]:
    """Warnings for keys whose value means something else here than in SkyRL, for a run that speaks its dialect."""
    if not translation.speaks_skyrl:
        return []
    trainer = cfg.trainer
    messages = []
    if trainer.ckpt_interval < 0:
        messages.append(
            f"trainer.ckpt_interval={trainer.ckpt_interval}: here a checkpoint is still saved at the end of the run;"
            " in SkyRL a value <= 0 saves none. Set trainer.ckpt_interval=0 to save none."
        )
    if trainer.hf_save_interval <= 0:
        messages.append(
            f"trainer.hf_save_interval={trainer.hf_save_interval}: here the final model is still exported to"
            " trainer.export_path at the end of the run; in SkyRL a value <= 0 exports none."
        )
    evaluates = trainer.eval_before_train or bool(cfg.data.val_data)
    if trainer.eval_interval <= 0 and evaluates:
        messages.append(
            f"trainer.eval_interval={trainer.eval_interval}: here only the periodic evaluation is off; the evaluation"
            " before training (trainer.eval_before_train) and the final one still run on data.val_data. In SkyRL a"
            " value <= 0 turns every evaluation off. Set data.val_data=[] for none."
        )
    correction = trainer.algorithm.off_policy_correction
    if trainer.mode != "sync" and correction.tis_ratio_type == "auto":
        messages.append(
            f"trainer.algorithm.off_policy_correction.tis_ratio_type is auto: in trainer.mode={trainer.mode} that"
            " applies token-level TIS here; SkyRL's default (null) applies none. Set it to null for none."
        )
    if translation.legacy and trainer.algorithm.loss_reduction == "token_mean":
        messages.append(
            "trainer.algorithm.loss_reduction=token_mean: here it averages over every token of the mini-batch (what"
            " SkyRL's current layout calls token_mean); SkyRL's legacy layout averaged each micro-batch on its own"
            " (its later token_mean_legacy), which is not supported here."
        )
    return messages


def warn_inert_overlong_buffer(cfg: SkyRLConfig) -> Iterator[str]:
    """DAPO's buffer length or penalty set without `enabled`: no penalty is applied (SkyRL's DAPO entrypoint applies
    it whenever a length is set)."""
    from skyrl_train.config.algorithm import OverlongBufferConfig

    buffer, default = cfg.trainer.algorithm.overlong_buffer, OverlongBufferConfig()
    changed = [name for name in ("length", "penalty_factor") if getattr(buffer, name) != getattr(default, name)]
    if changed and not buffer.enabled:
        keys = ", ".join(f"trainer.algorithm.overlong_buffer.{name}" for name in changed)
        yield (
            f"{keys} set but trainer.algorithm.overlong_buffer.enabled=false: no overlong penalty is applied (SkyRL's"
            " DAPO entrypoint applies it whenever a buffer length is set). Set enabled=true to apply it."
        )


def warn_kl_in_reward_coefficient(cfg: SkyRLConfig) -> Iterator[str]:
    """KL in the reward reads `kl_ctrl.kl_coef` here; SkyRL reads `kl_loss_coef` for it."""
    algorithm = cfg.trainer.algorithm
    if algorithm.use_kl_in_reward and algorithm.kl_loss_coef != algorithm.kl_ctrl.kl_coef:
        yield (
            f"trainer.algorithm.use_kl_in_reward=true uses trainer.algorithm.kl_ctrl.kl_coef={algorithm.kl_ctrl.kl_coef}"
            f" here; SkyRL uses trainer.algorithm.kl_loss_coef ({algorithm.kl_loss_coef}), which this run ignores."
            " Set kl_ctrl.kl_coef to the coefficient you want."
        )
