"""Typed run configuration of skyrl_train: one dataclass per section, YAML defaults, overrides and validation.

    from skyrl_train.config import SkyRLConfig
    cfg = SkyRLConfig.from_cli_overrides(["trainer.train_batch_size=64", "generator.n_samples_per_prompt=8"])

Every field is documented by the docstring under it; `docs/reference/configuration.md` is generated from them.
"""

from skyrl_train.config.algorithm import (
    AlgorithmConfig,
    CISPOConfig,
    ClipCovConfig,
    DynamicSamplingConfig,
    KLControllerConfig,
    KLCovConfig,
    OffPolicyCorrectionConfig,
    OverlongBufferConfig,
    SAPOConfig,
)
from skyrl_train.config.data import DataConfig
from skyrl_train.config.environment import EnvironmentConfig
from skyrl_train.config.errors import (
    ConfigError,
    ConfigTypeError,
    ConfigValidationError,
    ConfigWarning,
    OverrideSyntaxError,
    UnknownConfigKeyError,
)
from skyrl_train.config.generator import ChatTemplateConfig, GeneratorConfig, InferenceEngineConfig, SamplingConfig
from skyrl_train.config.health import HealthConfig
from skyrl_train.config.reward import RewardConfig, RewardModelConfig
from skyrl_train.config.roles import (
    CriticConfig,
    FSDPConfig,
    LoraConfig,
    MixedPrecisionConfig,
    ModelConfig,
    OptimizerConfig,
    PolicyConfig,
    RefConfig,
)
from skyrl_train.config.root import SkyRLConfig
from skyrl_train.config.trainer import PlacementConfig, TrainerConfig
from skyrl_train.config.validation import ERROR_CHECKS, WARNING_CHECKS, role_data_parallel_size, role_world_size

__all__ = [
    "ERROR_CHECKS",
    "WARNING_CHECKS",
    "AlgorithmConfig",
    "CISPOConfig",
    "ChatTemplateConfig",
    "ClipCovConfig",
    "ConfigError",
    "ConfigTypeError",
    "ConfigValidationError",
    "ConfigWarning",
    "CriticConfig",
    "DataConfig",
    "DynamicSamplingConfig",
    "EnvironmentConfig",
    "FSDPConfig",
    "GeneratorConfig",
    "HealthConfig",
    "InferenceEngineConfig",
    "KLControllerConfig",
    "KLCovConfig",
    "LoraConfig",
    "MixedPrecisionConfig",
    "ModelConfig",
    "OffPolicyCorrectionConfig",
    "OptimizerConfig",
    "OverlongBufferConfig",
    "OverrideSyntaxError",
    "PlacementConfig",
    "PolicyConfig",
    "RefConfig",
    "RewardConfig",
    "RewardModelConfig",
    "SAPOConfig",
    "SamplingConfig",
    "SkyRLConfig",
    "TrainerConfig",
    "UnknownConfigKeyError",
    "role_data_parallel_size",
    "role_world_size",
]
