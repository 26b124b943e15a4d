"""Generators: the `GeneratorInterface` and the multi-turn `SkyRLGymGenerator`."""

from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.skyrl_gym_generator import GeneratorSettings, SkyRLGymGenerator
from skyrl_train.generators.types import GeneratorInput, GeneratorOutput, Trajectory

__all__ = [
    "GeneratorInterface",
    "SkyRLGymGenerator",
    "GeneratorSettings",
    "GeneratorInput",
    "GeneratorOutput",
    "Trajectory",
]
