"""The embedded tiny model: a Qwen2/Qwen3-architecture causal LM whose whole shape comes from one size dial."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from transformers import PreTrainedModel, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from skyrl_train.utils.rng_state import torch_seeded

HEAD_DIM = 32  # vLLM's CPU attention accepts head_dim 32, 64 or 128


@dataclass(frozen=True)
class TinyModelSpec:
    """The tiny model's settings. `size` is the dial: layers = size, width = 64 * size, heads of 32 dims.

    size 2 is about 0.5 M parameters, 3 about 1.5 M, 4 about 3.5 M, 6 about 11 M (with a ~100-token vocabulary).
    """

    size: int = 3
    architecture: Literal["qwen2", "qwen3"] = "qwen2"
    vocab_size: int = 128
    max_position_embeddings: int = 512
    mlp_ratio: int = 3

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"TinyModelSpec.size must be >= 1, got {self.size}")
        if self.architecture not in ("qwen2", "qwen3"):
            raise ValueError(f"TinyModelSpec.architecture must be 'qwen2' or 'qwen3', got {self.architecture!r}")

    @property
    def hidden_size(self) -> int:
        """Model width derived from the dial."""
        return 64 * self.size

    @property
    def num_layers(self) -> int:
        """Depth derived from the dial."""
        return self.size

    def to_dict(self) -> dict:
        """The settings as a plain dict (used in cache keys)."""
        return asdict(self)


def tiny_model_config(spec: TinyModelSpec, pad_token_id: int = 0, eos_token_id: int = 4) -> Qwen2Config | Qwen3Config:
    """The Hugging Face config for `spec`."""
    heads = spec.hidden_size // HEAD_DIM
    common = dict(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.mlp_ratio * spec.hidden_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=spec.max_position_embeddings,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        torch_dtype="float32",
    )
    if spec.architecture == "qwen3":
        return Qwen3Config(head_dim=HEAD_DIM, **common)
    return Qwen2Config(**common)


def build_tiny_model(
    spec: TinyModelSpec, seed: int = 0, pad_token_id: int = 0, eos_token_id: int = 4
) -> PreTrainedModel:
    """A freshly initialised tiny model, deterministic for a given seed."""
    config = tiny_model_config(spec, pad_token_id=pad_token_id, eos_token_id=eos_token_id)
    with torch_seeded(seed):
        model = Qwen3ForCausalLM(config) if spec.architecture == "qwen3" else Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = pad_token_id
    model.generation_config.eos_token_id = eos_token_id
    return model
