"""skyrl_gym: Gymnasium-style text environments, tools and an environment registry for RL with LLMs."""

from skyrl_gym import envs as _builtin_envs  # noqa: F401  (registers the built-in environments)
from skyrl_gym.core import Env, EnvStepOutput
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType, check_step_output
from skyrl_gym.envs.registration import EnvSpec, deregister, make, pprint_registry, register, registry, spec
from skyrl_gym.errors import (
    EnvOutputError,
    EnvStateError,
    RegistrationError,
    SkyRLGymError,
    ToolError,
    UnknownEnvError,
)
from skyrl_gym.guard import failed_step, guarded_step

__version__ = "0.1.0+repo"

__all__ = [
    "Env",
    "EnvStepOutput",
    "BaseTextEnv",
    "BaseTextEnvStepOutput",
    "ConversationType",
    "check_step_output",
    "EnvSpec",
    "register",
    "deregister",
    "make",
    "spec",
    "registry",
    "pprint_registry",
    "guarded_step",
    "failed_step",
    "SkyRLGymError",
    "RegistrationError",
    "UnknownEnvError",
    "EnvStateError",
    "EnvOutputError",
    "ToolError",
]
