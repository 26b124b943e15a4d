"""The `skyrl_train` backend: the trainer's `InferenceEngineClient` (or any engine), token ids in and out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from skyrl_agent.backends.base import AgentBackend, Generation, TurnRequest
from skyrl_train.inference.types import InferenceEngineInput


class SkyRLTrainBackend(AgentBackend):
    """Generates through skyrl_train engines: `client.generate(InferenceEngineInput)` with the context's token ids;
    the turn reports the engine's tokens, logprobs and the weight version that produced them."""

    name = "skyrl_train"

    def __init__(self, client: Any, tokenizer: Any) -> None:
        self.client, self.tokenizer = client, tokenizer

    async def generate(self, request: TurnRequest) -> Generation:
        """One engine call for one prompt."""
        params = replace(request.params, logprobs=True, n=1)
        output = await self.client.generate(
            InferenceEngineInput(
                prompt_token_ids=[list(request.prompt_ids)], sampling_params=params, seeds=[request.seed]
            )
        )
        ids = list(output.response_ids[0])
        logprobs = list(output.response_logprobs[0]) if output.response_logprobs is not None else None
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Generation(ids, text, output.stop_reasons[0], logprobs, weight_version=output.weight_version)
