"""The LoRA refusals the workers give when they wrap the policy, found before Ray starts (every strategy).

`apply_lora` refuses settings such as adapters on embeddings the model ties together. The workers find that only after
the placement groups, the actors and the model loads. When the policy's `config.json` is on the driver's machine,
`lora_model_problems` wraps the same model built on the meta device (no weights read or allocated), so
`BasePPOExp.prepare` fails in seconds with the same message.
"""

from __future__ import annotations

import logging

from skyrl_train.config.root import SkyRLConfig
from skyrl_train.models.lora import LoRASettings, apply_lora
from skyrl_train.workers.strategy.megatron_preflight import local_hf_config, meta_causal_lm

logger = logging.getLogger(__name__)

POLICY_TARGET_MODULES = "trainer.policy.model.lora.target_modules"
"""The key the policy's LoRA refusals name."""


def lora_model_problems(cfg: SkyRLConfig) -> list[str]:
    """What `apply_lora` would refuse about the policy's LoRA settings on its model; empty without LoRA or when the
    model's config is not on this machine (the workers then check it)."""
    lora = cfg.trainer.policy.model.lora
    if lora.rank <= 0:
        return []
    hf_config = local_hf_config(cfg.trainer.policy.model.path)
    if hf_config is None:
        return []
    try:
        model = meta_causal_lm(hf_config)
    except Exception as exc:  # noqa: BLE001 - a model transformers cannot build here is the workers' to report
        logger.debug("LoRA preflight: cannot build %s on the meta device (%s); the workers check it", hf_config, exc)
        return []
    try:
        apply_lora(model, LoRASettings.from_config(lora), setting=POLICY_TARGET_MODULES)
    except ValueError as exc:  # ours name their key; peft's (e.g. a target module the model lacks) get the section
        message = str(exc)
        return [message if message.startswith("trainer.") else f"trainer.policy.model.lora: {message}"]
    return []
