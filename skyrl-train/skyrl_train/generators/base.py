"""`GeneratorInterface`: the one extension point between the trainer and whatever produces rollouts."""

from __future__ import annotations

import abc

from skyrl_train.generators.types import GeneratorInput, GeneratorOutput


class GeneratorInterface(abc.ABC):
    """Turns prompts into trajectories. Implement `generate` to plug in any agent harness."""

    @abc.abstractmethod
    async def generate(self, generator_input: GeneratorInput) -> GeneratorOutput:
        """Roll out every prompt once (the trainer repeats prompts for n samples) and return trajectories."""
