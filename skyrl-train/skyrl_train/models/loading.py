"""Load Hugging Face causal LMs and tokenizers from a local path (or the hub where the network allows)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
_DTYPES.update({"float16": torch.float16, "fp16": torch.float16})


def resolve_dtype(name: str | torch.dtype) -> torch.dtype:
    """Map a dtype name ('float32', 'bf16', ...) to a torch dtype; unknown names list the accepted ones."""
    if isinstance(name, torch.dtype):
        return name
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(_DTYPES)}")
    return _DTYPES[name]


def _hub_kwargs(path: str) -> dict:
    local = Path(os.path.expanduser(path))
    if local.exists():
        if not (local / "config.json").exists():
            raise FileNotFoundError(
                f"model path '{local}' exists but has no config.json; expected a Hugging Face model folder"
            )
        return {"local_files_only": True}
    return {}


def _load_error(path: str, exc: Exception) -> OSError:
    return OSError(
        f"could not load '{path}': it is not a local model folder, and fetching it from the hub failed ({exc}). "
        "Pass a local path, or run where the hub is reachable (HF_HUB_OFFLINE must be unset)."
    )


def load_causal_lm(
    path: str,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    trust_remote_code: bool = False,
    attn_implementation: Optional[str] = None,
) -> PreTrainedModel:
    """Load a causal LM from a local folder or a hub id, in `dtype`, on `device`."""
    kwargs = _hub_kwargs(path)
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(
            os.path.expanduser(path), dtype=resolve_dtype(dtype), trust_remote_code=trust_remote_code, **kwargs
        )
    except OSError as exc:
        raise _load_error(path, exc) from exc
    return model.to(device)


_GENERIC_FAST_CLASSES = {"PreTrainedTokenizerFast", "TokenizersBackend"}


def saved_as_generic_fast_tokenizer(path: str) -> bool:
    """True for a local folder whose tokenizer was saved as a plain `tokenizers` tokenizer (like the embedded one)."""
    config = Path(os.path.expanduser(path)) / "tokenizer_config.json"
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("tokenizer_class") in _GENERIC_FAST_CLASSES
    except (OSError, ValueError):
        return False


def load_tokenizer(path: str, padding_side: str = "left", trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """Load a tokenizer; it gets a pad token (the eos token) if it has none, and the requested padding side."""
    try:
        if saved_as_generic_fast_tokenizer(path):
            # AutoTokenizer would pick the tokenizer class of the model's architecture (Qwen2Tokenizer for a qwen2
            # config), which re-tokenizes with that class's rules: it drops the char vocabulary's spaces and newlines.
            tokenizer = PreTrainedTokenizerFast.from_pretrained(os.path.expanduser(path), local_files_only=True)
        else:
            tokenizer = AutoTokenizer.from_pretrained(
                os.path.expanduser(path), trust_remote_code=trust_remote_code, **_hub_kwargs(path)
            )
    except OSError as exc:
        raise _load_error(path, exc) from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = padding_side
    return tokenizer
