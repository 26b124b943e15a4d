"""LoRA adapters through peft: wrap a model, merge the adapters back, and export the merged model."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.tuners_utils import BaseTunerLayer
from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class LoRASettings:
    """LoRA hyper-parameters: rank 0 means LoRA is off."""

    rank: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: Union[str, list[str]] = "all-linear"
    exclude_modules: Optional[list[str]] = field(default=None)

    @classmethod
    def from_config(cls, lora: Any) -> LoRASettings:
        """The settings of a `trainer.<role>.model.lora` section (`LoraConfig`)."""
        return cls(
            rank=lora.rank,
            alpha=lora.alpha,
            dropout=lora.dropout,
            target_modules=lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules),
            exclude_modules=None if lora.exclude_modules is None else list(lora.exclude_modules),
        )

    @property
    def enabled(self) -> bool:
        """True when the rank is positive."""
        return self.rank > 0


def tied_embedding_modules(model: PreTrainedModel) -> list[str]:
    """Names of the input and output embedding modules when they share one weight (`tie_word_embeddings`), else
    empty. Works on a model built on the meta device (tying shares the parameter object)."""
    try:
        output, inputs = model.get_output_embeddings(), model.get_input_embeddings()
    except (AttributeError, NotImplementedError):  # a model class without one of them has nothing tied
        return []
    weight = getattr(output, "weight", None)
    if weight is None or weight is not getattr(inputs, "weight", None):
        return []
    return [name for name, module in model.named_modules() if module is output or module is inputs]


def apply_lora(
    model: PreTrainedModel,
    settings: LoRASettings,
    task_type: str = "CAUSAL_LM",
    modules_to_save: Optional[list[str]] = None,
    setting: str = "target_modules",
) -> PeftModel:
    """Wrap `model` with LoRA adapters; only the adapter weights stay trainable, plus the modules named in
    `modules_to_save`, which train whole (a critic's freshly initialised value head: `TOKEN_CLS`, `["score"]`).

    Refuses adapters on embeddings the model ties together (input and output share one weight): every merge of such
    an adapter (the hf engine's weight sync, `merge_on_export`) writes its delta into the shared weight, so the
    merged model changes at both ends and is not the model that was trained. `setting` names the target-modules key
    in that error (e.g. `trainer.policy.model.lora.target_modules`)."""
    if not settings.enabled:
        raise ValueError(f"LoRA rank must be > 0 to apply adapters, got {settings.rank}")
    if settings.dropout < 0 or settings.dropout >= 1:
        raise ValueError(f"LoRA dropout must be in [0, 1), got {settings.dropout}")
    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        exclude_modules=settings.exclude_modules,
        task_type=task_type,
        modules_to_save=modules_to_save,
    )
    tied = tied_embedding_modules(model)
    peft_model = get_peft_model(model, config)
    adapted = [name for name in tied if isinstance(model.get_submodule(name), BaseTunerLayer)]
    if adapted:
        raise ValueError(
            f"{setting}={settings.target_modules!r} puts LoRA adapters on {', '.join(adapted)}, but this model ties its "
            f"input and output embeddings ({' and '.join(tied)} share one weight, tie_word_embeddings=true): merging "
            "the adapter (the hf engine's weight sync, merge_on_export) would write it into both ends, and the merged "
            f"model would not be the one trained. Leave {', '.join(adapted)} out of {setting}, or train a model with "
            "untied embeddings"
        )
    return peft_model


def merge_lora(model: PeftModel) -> PreTrainedModel:
    """Fold the adapters into the base weights and return the plain model."""
    return model.merge_and_unload()


def export_merged(
    model: PreTrainedModel, tokenizer: Optional[PreTrainedTokenizerBase], directory: Union[str, Path]
) -> Path:
    """Save a model (merging LoRA adapters first if present) and its tokenizer as a Hugging Face folder."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    plain = merge_lora(model) if isinstance(model, PeftModel) else model
    plain.save_pretrained(directory, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(directory))
    return directory
