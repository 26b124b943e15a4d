"""The refusals the Megatron workers give when they load a model, found before Ray starts.

`MegatronStrategy.prepare` refuses, by name, a model family with no Megatron weight mapping, parallel sizes the model
cannot be split by, router settings other than the model's own, and LoRA adapters on layers it cannot adapt. On a
GPU cluster those come after the placement groups, the actors and the model loads. When the model's `config.json` is
on the driver's machine (a local folder or the Hugging Face cache), `megatron_model_problems` runs the same checks
on the config alone (LoRA's through peft on a model built on the meta device: no weights are read or allocated), so
`BasePPOExp.prepare` fails in seconds. A hub id not in the cache is left to the workers.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

import torch

from skyrl_train.config.root import SkyRLConfig
from skyrl_train.models.lora import LoRASettings, apply_lora
from skyrl_train.models.lora_state import parse_adapter_name
from skyrl_train.models.megatron_convert import GPTArch, arch_from_hf_config, check_tensor_parallel
from skyrl_train.workers.strategy.megatron_lora import check_adapted_modules
from skyrl_train.workers.strategy.megatron_model import check_router_settings

logger = logging.getLogger(__name__)


def local_hf_config(path: Optional[str]) -> Optional[Any]:
    """The transformers config of the model at `path` when it is on this machine (no network), else None."""
    if not path:
        return None
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(os.path.expanduser(path), local_files_only=True)
    except (OSError, ValueError) as exc:  # not here, or a model_type this transformers does not know
        logger.debug("megatron preflight: no local config for %s (%s); the workers check the model", path, exc)
        return None


def meta_causal_lm(hf_config: Any) -> torch.nn.Module:
    """The causal LM of `hf_config` built on the meta device (no weights read or allocated)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(hf_config)


def adapted_modules(hf_config: Any, lora: Any) -> list[str]:
    """The Hugging Face module names peft puts adapters on for `lora` (a `trainer.policy.model.lora` section),
    found on a model built on the meta device."""
    peft_model = apply_lora(meta_causal_lm(hf_config), LoRASettings.from_config(lora))
    parsed = (parse_adapter_name(name) for name, _ in peft_model.named_parameters())
    return sorted({entry.module for entry in parsed if entry is not None})


def _role_problems(cfg: SkyRLConfig, role: str, arch: GPTArch) -> list[str]:
    megatron, prefix = getattr(cfg.trainer, role).megatron, f"trainer.{role}.megatron"
    problems = []
    try:
        check_tensor_parallel(arch, megatron.tensor_model_parallel_size, megatron.expert_tensor_parallel_size or 0)
    except ValueError as exc:
        problems.append(str(exc).replace("trainer.<role>.", f"trainer.{role}."))
    if megatron.expert_model_parallel_size > 1 and not arch.is_moe:
        problems.append(
            f"{prefix}.expert_model_parallel_size={megatron.expert_model_parallel_size} needs a mixture-of-experts"
            f" model; {arch.model_type} is dense"
        )
    try:
        check_router_settings(
            arch, megatron.moe_router_score_function, megatron.moe_router_enable_expert_bias, prefix=prefix
        )
    except ValueError as exc:
        problems.append(str(exc))
    return problems


def megatron_model_problems(cfg: SkyRLConfig) -> list[str]:
    """What the Megatron workers would refuse about the policy's (and the reference's) model, for every model whose
    config is on this machine; empty for another strategy or when no config is here."""
    if cfg.trainer.strategy != "megatron":
        return []
    roles = {"policy": cfg.trainer.policy.model.path}
    if cfg.needs_ref_model and not cfg.ref_is_policy_base:  # else the policy's base serves as the reference
        roles["ref"] = cfg.ref_model_path
    problems: list[str] = []
    for role, path in roles.items():
        hf_config = local_hf_config(path)
        if hf_config is None:
            continue
        try:
            arch = arch_from_hf_config(hf_config)
        except ValueError as exc:
            problems.append(
                f"trainer.{role}.model.path={path}: {exc}; trainer.strategy=fsdp2 loads it through transformers"
            )
            continue
        problems += _role_problems(cfg, role, arch)
        lora = cfg.trainer.policy.model.lora
        if role == "policy" and lora.rank > 0:
            try:
                modules = adapted_modules(hf_config, lora)
            except ValueError:  # apply_lora's own refusal: `lora_model_problems` names it, for every strategy
                continue
            try:
                check_adapted_modules(modules)
            except ValueError as exc:
                problems.append(str(exc))
    return problems
