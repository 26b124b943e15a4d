"""Parse an `asample` request body into the compute thread's `SampleJob`, refusing what the server cannot honour.

Every field is checked here, before the request can join a batch with other keys' requests: a value the engine would
choke on fails only its own request, with a 400 naming the field, instead of the whole batch.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from skyrl_tx.compute import ComputeHost, SampleJob
from skyrl_tx.futures import UserError
from skyrl_tx.limits import Limits, _preview, strict_int

MAX_SEED = 2**63
"""Seeds are integers in [0, 2^63)."""


def _number(name: str, value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserError(f"sampling_params.{name} must be a finite number, got {_preview(value)}")
    return float(value)


def _flag(name: str, value: Any) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise UserError(f"{name} must be true or false, got {_preview(value)}")
    return value


def _prompt(body: dict[str, Any]) -> list[int]:
    prompt_body = body.get("prompt") or {}
    if not isinstance(prompt_body, dict) or not isinstance(prompt_body.get("chunks") or [], list):
        raise UserError("prompt must be an object with a list of chunks")
    prompt: list[int] = []
    for index, chunk in enumerate(prompt_body.get("chunks") or []):
        if not isinstance(chunk, dict):
            raise UserError(f"prompt.chunks[{index}] must be an object")
        if chunk.get("type", "encoded_text") != "encoded_text":
            raise UserError(f"prompt.chunks[{index}]: {chunk.get('type')} chunks are not supported (text only)")
        tokens = chunk.get("tokens") or []
        if not isinstance(tokens, list) or any(isinstance(t, bool) or not isinstance(t, int) for t in tokens):
            raise UserError(f"prompt.chunks[{index}].tokens must be a list of integers")
        prompt.extend(tokens)
    return prompt


def _stop(value: Any, host: ComputeHost, limits: Limits) -> Any:
    """`stop`: None (stop at EOS), a string, or a list of strings and/or token ids, within the limits."""
    if value is None:
        return None
    entries = [value] if isinstance(value, str) else value
    if not isinstance(entries, list):
        raise UserError(f"sampling_params.stop must be a string or a list, got {_preview(value)}")
    if len(entries) > limits.max_stop:
        raise UserError(
            f"sampling_params.stop has {len(entries)} entries; this server takes at most {limits.max_stop} (--max-stop)"
        )
    for index, entry in enumerate(entries):
        if isinstance(entry, str):
            if not entry or len(entry) > limits.max_stop_chars:
                raise UserError(
                    f"sampling_params.stop[{index}] has {len(entry)} characters; it must have 1 to "
                    f"{limits.max_stop_chars} (--max-stop-chars)"
                )
        elif isinstance(entry, bool) or not isinstance(entry, int) or not 0 <= entry < host.vocab_size:
            raise UserError(
                f"sampling_params.stop[{index}] must be a string or a token id in [0, {host.vocab_size}), "
                f"got {_preview(entry)}"
            )
    return value


def _seed(value: Any) -> Optional[int]:
    if value is None:
        return None
    seed = strict_int("sampling_params.seed", value)
    if not 0 <= seed < MAX_SEED:
        raise UserError(f"sampling_params.seed must be in [0, 2^63), got {seed}")
    return seed


def parse_sample_request(body: dict[str, Any], host: ComputeHost, limits: Optional[Limits] = None) -> SampleJob:
    """The `SampleJob` of an asample body, checked now against `host` and `limits` (prompt ids, lengths, seed,
    sampling params, stop rules, top-k counts, decode budget), so a bad request gets a 400 naming the field instead of
    failing inside a shared batch."""
    limits = limits or Limits()
    prompt = _prompt(body)
    host.check_prompt(prompt)
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise UserError("sampling_params must be an object")
    num_samples = strict_int("num_samples", body.get("num_samples", 1))
    if not 1 <= num_samples <= 1024:
        raise UserError(f"num_samples must be in [1, 1024], got {num_samples}")
    for unsupported in ("target_prompt_logprobs", "prompt_logprobs_last_n"):
        if body.get(unsupported) is not None:
            raise UserError(f"{unsupported} is not supported by this server yet")
    if body.get("prompt_alt_tokens_k"):
        raise UserError("prompt_alt_tokens_k is not supported by this server yet")
    max_tokens = params.get("max_tokens")
    if max_tokens is not None and strict_int("sampling_params.max_tokens", max_tokens) < 1:
        raise UserError(f"sampling_params.max_tokens must be >= 1, got {max_tokens}")
    top_k = params.get("top_k")
    job = SampleJob(
        prompt=prompt,
        num_samples=num_samples,
        max_tokens=max_tokens,
        temperature=_number("temperature", params.get("temperature"), 1.0),
        top_k=-1 if top_k is None else strict_int("sampling_params.top_k", top_k),
        top_p=_number("top_p", params.get("top_p"), 1.0),
        seed=_seed(params.get("seed")),
        stop=_stop(params.get("stop"), host, limits),
        prompt_logprobs=_flag("prompt_logprobs", body.get("prompt_logprobs")),
        topk_prompt_logprobs=limits.check_topk("topk_prompt_logprobs", body.get("topk_prompt_logprobs")),
        topk_sample_logprobs=limits.check_topk("topk_sample_logprobs", body.get("topk_sample_logprobs")),
    )
    try:
        engine_params = host.sampling_params(job)  # validates temperature, top_p and top_k now, naming the field
    except (TypeError, ValueError) as exc:
        raise UserError(f"sampling_params: {exc}") from None
    decoded = num_samples * (len(prompt) + engine_params.max_tokens)
    if decoded > limits.max_sample_tokens:
        raise UserError(
            f"asample: num_samples x (prompt + max_tokens) = {num_samples} x ({len(prompt)} + "
            f"{engine_params.max_tokens}) = {decoded} tokens; this server decodes at most {limits.max_sample_tokens} "
            "per request (--max-sample-tokens)"
        )
    return job


def sample_cost(job: SampleJob, host: ComputeHost) -> int:
    """The tokens a sample job may decode (its share of a batch): num_samples x (prompt + max_tokens)."""
    return job.num_samples * (len(job.prompt) + host.sampling_params(job).max_tokens)
