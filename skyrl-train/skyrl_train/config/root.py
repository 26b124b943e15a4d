"""`SkyRLConfig`, the whole run configuration, and the ways to build it: dict, YAML file, CLI overrides."""

import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyrl_train.config.allocation import AllocationModeError, apply_allocation_mode
from skyrl_train.config.data import DataConfig
from skyrl_train.config.docgen import dump_yaml
from skyrl_train.config.environment import EnvironmentConfig
from skyrl_train.config.errors import ConfigTypeError, ConfigValidationError, ConfigWarning
from skyrl_train.config.generator import GeneratorConfig
from skyrl_train.config.overrides import apply_overrides, parse_overrides, resolve_interpolations
from skyrl_train.config.reward import RewardConfig
from skyrl_train.config.trainer import TrainerConfig
from skyrl_train.config.typecheck import build_dataclass, describe_value, to_plain_dict
from skyrl_train.config.upstream import Translation, translate_mapping, translate_overrides
from skyrl_train.config.upstream_meanings import dialect_warnings
from skyrl_train.config.validation import validate_config

logger = logging.getLogger(__name__)


@dataclass
class SkyRLConfig:
    """The whole run configuration: `data`, `trainer`, `generator`, `environment` and `reward` sections.

    Build it with `from_cli_overrides(["trainer.seed=1", ...])`, `from_yaml_file(path)` or `from_dict(d)`; all of
    them type-check every key and run the cross-field checks of `validate()`.
    """

    data: DataConfig = field(default_factory=DataConfig)
    """Prompt datasets and their loading."""

    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    """Training side: placement, models, algorithm, batch sizes, checkpoints, logging, evaluation."""

    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    """Rollout side: inference engines, sampling, the agent loop."""

    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    """skyrl-gym environments and their settings."""

    reward: RewardConfig = field(default_factory=RewardConfig)
    """Reward managers (user scoring functions) and the reward model, and how their scores combine."""

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], validate: bool = True, translation: Translation | None = None
    ) -> "SkyRLConfig":
        """Build from a (possibly partial) nested dict; missing keys keep their defaults, unknown keys are rejected.

        Keys and values in NovaSky-AI/SkyRL's spelling are translated to this project's first (`config/upstream.py`);
        every unknown key and badly typed value is reported in one error. `translation` is the one an override
        list already went through (its checks and warnings then apply too)."""
        data, found = translate_mapping(data, cls)
        found.raise_problems()
        translation = _merge(translation, found)
        cfg = build_dataclass(cls, data)
        try:
            apply_allocation_mode(cfg)
        except AllocationModeError as exc:
            raise ConfigValidationError([str(exc)]) from exc
        for note in translation.notes:
            logger.info("config: %s", note)
        if validate:
            deferred = translation.check_built(cfg)
            try:
                cfg.validate()
            except ConfigValidationError as exc:
                raise ConfigValidationError(deferred + exc.problems) from None
            if deferred:
                raise ConfigValidationError(deferred)
            for message in dialect_warnings(cfg, translation):
                warnings.warn(message, ConfigWarning, stacklevel=2)
        return cfg

    @classmethod
    def from_yaml_file(
        cls, path: str | os.PathLike[str], overrides: Sequence[str] = (), validate: bool = True
    ) -> "SkyRLConfig":
        """Build from a YAML file (read like Hydra reads it, partial files allowed), then apply CLI `overrides`."""
        from omegaconf import OmegaConf

        loaded = OmegaConf.to_container(OmegaConf.load(os.fspath(path)), resolve=True)
        if not isinstance(loaded, dict):
            raise ConfigTypeError(
                f"{os.fspath(path)}: expected a mapping of config sections, got {describe_value(loaded)}"
            )
        base = cls.from_dict(loaded, validate=False)
        return cls.from_cli_overrides(overrides, base=base, validate=validate)

    @classmethod
    def from_cli_overrides(
        cls, overrides: Sequence[str], base: "SkyRLConfig | None" = None, validate: bool = True
    ) -> "SkyRLConfig":
        """Apply `a.b.c=value` overrides (Hydra syntax, see `overrides.py`) to `base` (default: the defaults).

        Overrides in NovaSky-AI/SkyRL's spelling are translated first; every unknown key and bad value of the list
        is reported in one error."""
        translation = translate_overrides(parse_overrides(overrides), cls)
        translation.raise_problems()
        data = apply_overrides((base or cls()).to_dict(), translation.overrides, cls)
        return cls.from_dict(resolve_interpolations(data), validate=validate, translation=translation)

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict of every value; `from_dict(cfg.to_dict()) == cfg`."""
        return to_plain_dict(self)

    def to_yaml(self) -> str:
        """The config as YAML text that `from_yaml_file` reads back to an equal config."""
        return dump_yaml(self.to_dict())

    def validate(self) -> list[str]:
        """Type-check every field and run the cross-field checks; raise on problems, return (and emit) warnings."""
        build_dataclass(type(self), self.to_dict())  # catches wrongly typed values assigned after construction
        return validate_config(self)

    @property
    def needs_ref_model(self) -> bool:
        """True when a reference model is built: KL is used as a loss or as a reward penalty, or the reference is
        on-policy distillation's teacher."""
        algorithm = self.trainer.algorithm
        return algorithm.use_kl_loss or algorithm.use_kl_in_reward or algorithm.on_policy_distillation

    @property
    def ref_is_policy_base(self) -> bool:
        """True when the reference log-probs come from the LoRA policy with its adapters switched off (KL is used,
        the policy trains LoRA adapters and `trainer.ref.model.path` is unset or the policy's): no ref workers are
        built and no second copy of the weights is held."""
        ref_path = self.trainer.ref.model.path
        same_model = ref_path is None or ref_path == self.trainer.policy.model.path
        return self.needs_ref_model and self.trainer.policy.model.lora.rank > 0 and same_model

    @property
    def needs_critic(self) -> bool:
        """True when a critic is built: `trainer.critic.model.path` is set."""
        return bool(self.trainer.critic.model.path)

    @property
    def needs_reward_model(self) -> bool:
        """True when a reward-model worker group is built: `reward.model.path` is set."""
        return bool(self.reward.model.path)

    @property
    def max_input_length(self) -> int:
        """`generator.max_input_length`, or `data.max_prompt_length` when that is null."""
        configured = self.generator.max_input_length
        return self.data.max_prompt_length if configured is None else configured

    @property
    def ref_model_path(self) -> str | None:
        """The reference model's weights: `trainer.ref.model.path`, else the policy's model."""
        return self.trainer.ref.model.path or self.trainer.policy.model.path

    def in_flight_weight_updates(self) -> bool:
        """True when weight syncs land between two tokens of running rollouts: an async `trainer.mode` with
        `trainer.async_rl.weight_update_boundary` token, or auto on the hf engine and on vllm without LoRA."""
        boundary = self.trainer.async_rl.weight_update_boundary
        if boundary == "auto":
            backend = self.generator.inference_engine.backend
            lora = self.trainer.policy.model.lora.rank > 0
            boundary = "token" if backend == "hf" or (backend == "vllm" and not lora) else "turn"
        return self.trainer.mode != "sync" and boundary == "token"

    def resolved_device(self) -> str:
        """`trainer.device` with `auto` resolved: `cuda` when torch sees a GPU, else `cpu`."""
        if self.trainer.device != "auto":
            return self.trainer.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"


def _merge(first: Translation | None, second: Translation) -> Translation:
    """One translation holding what both found (the second is the dict's, usually empty)."""
    if first is None:
        return second
    first.applied.extend(second.applied)
    first.deferred.extend(second.deferred)
    first.legacy = first.legacy or second.legacy
    return first
