"""The `tinker` backend: a `tinker` SamplingClient (e.g. against skyrl-tx, or Tinker itself), token ids in and out."""

from __future__ import annotations

from typing import Any

from skyrl_agent.backends.base import AgentBackend, Generation, TurnRequest


class TinkerBackend(AgentBackend):
    """Generates with `await sampling_client.sample(prompt=ModelInput.from_ints(ids), num_samples=1, ...)`.

    `sampling_client` is a `tinker.SamplingClient` or the future of one that `ServiceClient.create_sampling_client`
    and `TrainingClient.save_weights_and_get_sampling_client` return: the future is awaited at the first turn (the
    tinker SDK deprecates using the future itself as the client), so building the backend never blocks an event
    loop. `service`, when given, is the `tinker.ServiceClient` that made the client: `close()` finishes its session
    and stops its heartbeats (`build_backend` passes the one it creates)."""

    name = "tinker"

    def __init__(self, sampling_client: Any, tokenizer: Any, service: Any = None) -> None:
        self.sampling_client, self.tokenizer, self.service = sampling_client, tokenizer, service

    async def _client(self) -> Any:
        """The SamplingClient, the future's result once it is awaited (kept for the next turns)."""
        from tinker import APIFuture

        if isinstance(self.sampling_client, APIFuture):
            self.sampling_client = await self.sampling_client.result_async()
        return self.sampling_client

    async def generate(self, request: TurnRequest) -> Generation:
        """One sample request; Tinker takes stop strings or stop token ids, strings first."""
        from tinker import types

        params = request.params
        stop: Any = list(params.stop) if params.stop else list(params.stop_token_ids) or None
        sampling = types.SamplingParams(
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            seed=request.seed,
            stop=stop,
        )
        client = await self._client()
        response = await client.sample(
            prompt=types.ModelInput.from_ints(list(request.prompt_ids)), num_samples=1, sampling_params=sampling
        )
        sequence = response.sequences[0]
        ids = list(sequence.tokens)
        logprobs = list(sequence.logprobs) if sequence.logprobs is not None else None
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Generation(ids, text, "length" if sequence.stop_reason == "length" else "stop", logprobs)

    async def close(self) -> None:
        """Finish the session of the ServiceClient this backend was given (once); a caller's own client stays open."""
        service, self.service = self.service, None
        if service is not None:
            await service.close("success")
