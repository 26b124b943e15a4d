"""What one request may ask for and what one API key may hold: the per-request budgets (checked when a request is
parsed, before any compute; HTTP 400 naming the limit and the value) and the per-key quotas (HTTP 429 naming the
quota). Every limit is a `skyrl-tx serve` flag; `Limits.add_flags` declares them and `Limits.from_args` reads them.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from skyrl_tx.futures import UserError

if TYPE_CHECKING:
    from skyrl_tx.compute import LoraSpec
    from skyrl_tx.wire import TrainDatum


class QuotaExceeded(Exception):
    """A key already holds as much of something as it may (HTTP 429). `retry` says whether waiting helps (queued
    jobs drain by themselves; sessions, adapters and checkpoints stay until the key frees them)."""

    def __init__(self, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass(frozen=True)
class Limits:
    """Per-request budgets and per-key quotas of one server (defaults suit one shared GPU; lower them for big models)."""

    max_datums: int = 1024
    """Datums in one forward_backward / forward request (the official client splits bigger calls to fit)."""
    max_batch_tokens: int = 131072
    """Padded tokens of one forward_backward / forward request: datums x the longest datum. The logits alone take
    tokens x vocabulary x 8 bytes, so lower it for large vocabularies."""
    max_sample_tokens: int = 262144
    """Tokens one asample request may decode: num_samples x (prompt length + max_tokens)."""
    max_topk_logprobs: int = 20
    """Largest `topk_prompt_logprobs` / `topk_sample_logprobs` (the OpenAI API's cap)."""
    max_stop: int = 16
    """Stop strings and stop token ids per sample request."""
    max_stop_chars: int = 256
    """Characters of one stop string."""
    max_metadata_bytes: int = 16384
    """JSON size of a request's `tags` and of its `user_metadata` (each)."""
    max_lora_rank: int = 512
    """Largest LoRA rank of one adapter."""
    max_sessions_per_key: int = 64
    """Active sessions one key may hold (a session ends on close() or after --session-timeout-s without heartbeat)."""
    max_adapters_per_key: int = 32
    """Live adapters (training clients being created or in memory) one key may hold."""
    max_lora_rank_per_key: int = 2048
    """Sum of the LoRA ranks of one key's live adapters (adapter memory grows with the rank)."""
    max_checkpoints_per_key: int = 512
    """Listed checkpoints (save_state and named sampler weights) one key may keep."""
    max_checkpoint_gb_per_key: float = 50.0
    """Bytes of one key's listed checkpoints, in GB (10^9 bytes)."""
    max_queued_per_key: int = 256
    """Requests of one key waiting for the compute thread (the official client retries a 429 for this quota)."""

    FLAGS = {
        "max_datums": "--max-datums",
        "max_batch_tokens": "--max-batch-tokens",
        "max_sample_tokens": "--max-sample-tokens",
        "max_topk_logprobs": "--max-topk-logprobs",
        "max_stop": "--max-stop",
        "max_stop_chars": "--max-stop-chars",
        "max_metadata_bytes": "--max-metadata-bytes",
        "max_lora_rank": "--max-lora-rank",
        "max_sessions_per_key": "--max-sessions-per-key",
        "max_adapters_per_key": "--max-adapters-per-key",
        "max_lora_rank_per_key": "--max-lora-rank-per-key",
        "max_checkpoints_per_key": "--max-checkpoints-per-key",
        "max_checkpoint_gb_per_key": "--max-checkpoint-gb-per-key",
        "max_queued_per_key": "--max-queued-per-key",
    }
    """The `skyrl-tx serve` flag of each limit."""

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if not value > 0:
                raise ValueError(f"{self.FLAGS[item.name]} must be > 0, got {value}")
        if self.max_lora_rank > 512:
            raise ValueError(
                f"--max-lora-rank must be at most 512 (the compute hosts' limit), got {self.max_lora_rank}"
            )

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        """Declare one flag per limit on `parser` (help: the field's docstring, shown with its default)."""
        docs = _field_docs()
        for item in fields(cls):
            parser.add_argument(
                cls.FLAGS[item.name],
                dest=item.name,
                type=type(item.default),
                default=item.default,
                help=f"{docs[item.name]} (default {item.default})",
            )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Limits:
        """The limits the parsed flags set; a limit <= 0 is refused naming its flag (SystemExit)."""
        try:
            return cls(**{item.name: getattr(args, item.name) for item in fields(cls)})
        except ValueError as exc:
            raise SystemExit(str(exc)) from None

    @property
    def max_checkpoint_bytes_per_key(self) -> int:
        """`max_checkpoint_gb_per_key` in bytes."""
        return int(self.max_checkpoint_gb_per_key * 1e9)

    def check_metadata(self, body: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
        """A body's `tags` (a list of strings) and `user_metadata` (an object, values stored as strings), each under
        `max_metadata_bytes` of JSON; anything else is refused naming the field."""
        tags = body.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            raise UserError(f"tags must be a list of strings, got {_preview(tags)}")
        metadata = body.get("user_metadata") or {}
        if not isinstance(metadata, dict):
            raise UserError(f"user_metadata must be an object of string values, got {_preview(metadata)}")
        for name, value in (("tags", tags), ("user_metadata", metadata)):
            size = len(json.dumps(value))
            if size > self.max_metadata_bytes:
                raise UserError(
                    f"{name} is {size} bytes of JSON; this server takes at most {self.max_metadata_bytes} "
                    "(--max-metadata-bytes)"
                )
        return list(tags), {str(key): str(value) for key, value in metadata.items()}

    def check_topk(self, name: str, value: Any) -> int:
        """A top-k logprobs count: an int in [0, max_topk_logprobs]."""
        count = strict_int(name, value if value is not None else 0)
        if not 0 <= count <= self.max_topk_logprobs:
            raise UserError(f"{name} must be in [0, {self.max_topk_logprobs}] (--max-topk-logprobs), got {count}")
        return count

    def lora_spec(self, lora: Any) -> LoraSpec:
        """A `lora_config` checked now (rank an integer in [1, max_lora_rank], seed an integer in [0, 2^63), the
        train_* flags booleans), so a bad value is a 400 and never a queued job."""
        from skyrl_tx.compute import LoraSpec

        lora = {} if lora is None else lora
        if not isinstance(lora, dict):
            raise UserError("lora_config must be an object")
        rank = strict_int("lora_config.rank", lora.get("rank", 32))
        if not 1 <= rank <= self.max_lora_rank:
            raise UserError(f"lora_config.rank must be in [1, {self.max_lora_rank}] (--max-lora-rank), got {rank}")
        seed = lora.get("seed")
        if seed is not None and not 0 <= strict_int("lora_config.seed", seed) < 2**63:
            raise UserError(f"lora_config.seed must be in [0, 2^63), got {seed}")
        flags = {}
        for name in ("train_mlp", "train_attn", "train_unembed"):
            value = lora.get(name, True)
            if not isinstance(value, bool):
                raise UserError(f"lora_config.{name} must be true or false, got {_preview(value)}")
            flags[name] = value
        return LoraSpec(rank=rank, seed=seed, **flags)

    def check_batch(self, data: list[TrainDatum], max_context: int) -> None:
        """The budgets of a forward(_backward) request: 1 to `max_datums` datums, none longer than `max_context`,
        and datums x the longest datum (the padded batch the forward runs on) at most `max_batch_tokens`."""
        if not data:
            raise UserError("forward_backward: data is empty")
        if len(data) > self.max_datums:
            raise UserError(
                f"forward_backward: {len(data)} datums; this server takes at most {self.max_datums} per request "
                "(--max-datums)"
            )
        longest = max(len(datum.tokens) for datum in data)
        if longest > max_context:
            raise UserError(f"forward_backward: a datum has {longest} tokens; the model takes at most {max_context}")
        padded = len(data) * longest
        if padded > self.max_batch_tokens:
            raise UserError(
                f"forward_backward: {len(data)} datums x {longest} tokens (the longest) = {padded} padded tokens; "
                f"this server takes at most {self.max_batch_tokens} per request (--max-batch-tokens): send fewer "
                "datums per call, or datums of more even lengths"
            )


def strict_int(name: str, value: Any) -> int:
    """`value` if it is a JSON integer (not a bool, float or string), else a `UserError` naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{name} must be an integer, got {_preview(value)}")
    return value


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _field_docs() -> dict[str, str]:
    """Each `Limits` field's docstring (the attribute docstrings above), read from the source."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(Limits))
    docs: dict[str, str] = {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    for node, following in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr):
            docs[node.target.id] = " ".join(str(following.value.value).split())  # type: ignore[union-attr]
    return docs
