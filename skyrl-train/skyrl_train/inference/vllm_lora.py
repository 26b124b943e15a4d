"""LoRA adapters for the `vllm` engine: collect the adapter tensors of a weight sync and write them as a peft adapter
folder that vLLM's LoRA API loads (`LoRARequest(name, id, path)`), one folder per weight version.

No vLLM import here: the folder format is peft's (`adapter_config.json` + `adapter_model.safetensors` with keys like
`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`), which is what vLLM's loader reads.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors.torch import save_file

from skyrl_train.models.lora_state import parse_adapter_name, unnamed_adapter_key

VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM accepts for `max_lora_rank`."""


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds adapters of `rank`."""
    for allowed in VLLM_MAX_LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise ValueError(f"LoRA rank {rank} is larger than vLLM's largest max_lora_rank ({VLLM_MAX_LORA_RANKS[-1]})")


class AdapterFolders:
    """Received adapter tensors, written as one peft folder per version under a private temporary directory.

    `add(named)` keeps the adapter tensors of the sync under way (and returns the other tensors); `write(version)`
    writes them and returns the folder; `received` keeps the latest tensor per name (for checksums).
    """

    def __init__(self, alpha: float, base_model_path: str) -> None:
        self.alpha = float(alpha)
        self.base_model_path = base_model_path
        self.root = Path(tempfile.mkdtemp(prefix="skyrl-vllm-lora-"))
        self.received: dict[str, torch.Tensor] = {}
        self._pending: dict[str, torch.Tensor] = {}

    def add(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
        """Keep the adapter tensors; return the rest (full weights) unchanged."""
        rest = []
        for name, tensor in named_tensors:
            if parse_adapter_name(name) is None:
                rest.append((name, tensor))
            else:
                self._pending[name] = tensor.detach().to("cpu", copy=True)
        return rest

    @property
    def has_pending(self) -> bool:
        """True when adapter tensors arrived since the last `write`."""
        return bool(self._pending)

    def write(self, version: int) -> Path:
        """Write the pending adapter (merged over the previous one, so a partial sync keeps the other modules) as the
        peft folder of `version`; older folders are removed."""
        self.received.update(self._pending)
        self._pending = {}
        modules = {}
        for name, tensor in self.received.items():
            parsed = parse_adapter_name(name)
            modules.setdefault(parsed.module, {})[parsed.part] = tensor
        incomplete = sorted(module for module, pair in modules.items() if set(pair) != {"A", "B"})
        if incomplete:
            raise ValueError(f"LoRA adapter update lacks lora_A or lora_B of {incomplete[:4]}")
        ranks = {pair["A"].shape[0] for pair in modules.values()}
        if len(ranks) != 1:
            raise ValueError(f"LoRA adapter matrices have different ranks {sorted(ranks)}; expected one rank")
        folder = self.root / f"v{version}"
        folder.mkdir(parents=True, exist_ok=False)
        tensors = {unnamed_adapter_key(name): tensor.contiguous() for name, tensor in self.received.items()}
        save_file(tensors, str(folder / "adapter_model.safetensors"))
        config = {
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "r": ranks.pop(),
            "lora_alpha": self.alpha,
            "lora_dropout": 0.0,
            "bias": "none",
            "target_modules": sorted({module.rsplit(".", 1)[-1] for module in modules}),
            "modules_to_save": None,
            "fan_in_fan_out": False,
            "use_rslora": False,
            "use_dora": False,
            "base_model_name_or_path": self.base_model_path,
        }
        (folder / "adapter_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        for old in self.root.iterdir():
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)
        return folder

    def close(self) -> None:
        """Remove the temporary folders."""
        shutil.rmtree(self.root, ignore_errors=True)
