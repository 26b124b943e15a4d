"""Parse an `asample` request body into the compute thread's `SampleJob`, refusing what the server cannot honour."""

from __future__ import annotations

from typing import Any

from skyrl_tx.compute import ComputeHost, SampleJob
from skyrl_tx.futures import UserError


def parse_sample_request(body: dict[str, Any], host: ComputeHost) -> SampleJob:
    """The `SampleJob` of an asample body, checked now against `host` (prompt ids, lengths, sampling params), so a
    bad request gets a 400 naming the field instead of failing inside a shared batch."""
    chunks = (body.get("prompt") or {}).get("chunks") or []
    prompt: list[int] = []
    for index, chunk in enumerate(chunks):
        if chunk.get("type", "encoded_text") != "encoded_text":
            raise UserError(f"prompt.chunks[{index}]: {chunk.get('type')} chunks are not supported (text only)")
        prompt.extend(int(token) for token in chunk.get("tokens") or [])
    host.check_prompt(prompt)
    params = body.get("sampling_params") or {}
    num_samples = int(body.get("num_samples", 1))
    if not 1 <= num_samples <= 1024:
        raise UserError(f"num_samples must be in [1, 1024], got {num_samples}")
    for unsupported in ("target_prompt_logprobs", "prompt_logprobs_last_n"):
        if body.get(unsupported) is not None:
            raise UserError(f"{unsupported} is not supported by this server yet")
    if int(body.get("prompt_alt_tokens_k") or 0) > 0:
        raise UserError("prompt_alt_tokens_k is not supported by this server yet")
    try:
        job = SampleJob(
            prompt=prompt,
            num_samples=num_samples,
            max_tokens=params.get("max_tokens"),
            temperature=float(params.get("temperature", 1.0)),
            top_k=int(params.get("top_k", -1)),
            top_p=float(params.get("top_p", 1.0)),
            seed=params.get("seed"),
            stop=params.get("stop"),
            prompt_logprobs=bool(body.get("prompt_logprobs")),
            topk_prompt_logprobs=int(body.get("topk_prompt_logprobs") or 0),
            topk_sample_logprobs=int(body.get("topk_sample_logprobs") or 0),
        )
        host.sampling_params(job)  # validates temperature, top_p, top_k and stop now, naming the field
    except (TypeError, ValueError) as exc:
        raise UserError(f"sampling_params: {exc}") from None
    return job
