"""Checkpoints and Hugging Face exports of the Megatron strategy (`MegatronCheckpointing`, a base of
`MegatronStrategy`).

Checkpoints go through `megatron.core.dist_checkpointing` (model and optimizer) plus one JSON file per rank with the
LR schedule and RNG states; its format pickles, so every pickle in a checkpoint is checked against an allowlist of
plain data classes before Megatron loads it (`utils.pickle_guard`). Exports write a Hugging Face model folder, or for a
LoRA model peft's adapter folder (and optionally the merged model).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

from skyrl_train.models.lora_state import PEFT_PREFIX, merge_peft_state
from skyrl_train.utils.checkpoint_io import local_directory_for_reading, local_directory_for_writing
from skyrl_train.utils.pickle_guard import check_pickled_checkpoint
from skyrl_train.utils.plain_values import to_jsonable
from skyrl_train.utils.rng_state import capture_rng_state, restore_rng_state
from skyrl_train.workers.strategy.optimizer import build_scheduler

EXTRA_STATE_FILE = "megatron_extra_state_rank{rank}.json"
"""Per-rank JSON file of a Megatron checkpoint: LR schedule, RNG states and caller extras."""

OPTIMIZER_CHECKPOINT_METADATA = {"distrib_optim_sharding_type": "dp_reshardable"}
"""How the distributed optimizer's state is laid out in a checkpoint: `dp_reshardable` saves and loads in parallel
without gathers (resharding only across data-parallel ranks). megatron-core's default when none is named,
`fully_sharded_model_space`, is listed as deprecated there."""


class MegatronCheckpointing:
    """`save_checkpoint` / `load_checkpoint` / `save_hf_model` of `MegatronStrategy`, which provides the model
    (`_gpt`), the optimizer, the LR schedule, `full_state_dict`, `trainable_state_dict` and the LoRA settings."""

    def _sharded_state(self, is_loading: bool = False) -> dict[str, Any]:
        model_state = self._gpt().sharded_state_dict()
        state: dict[str, Any] = {"model": model_state}
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.sharded_state_dict(
                model_state, is_loading=is_loading, metadata=OPTIMIZER_CHECKPOINT_METADATA
            )
        return state

    def save_checkpoint(self, directory: str | os.PathLike[str], extra: Optional[dict[str, Any]] = None) -> None:
        """Write the sharded model and optimizer with `megatron.core.dist_checkpointing`, plus this rank's
        scheduler/RNG/`extra` JSON file. Every rank must call this."""
        from megatron.core import dist_checkpointing

        with local_directory_for_writing(directory) as local:
            path = Path(local)
            if self.optimizer_offloaded:
                self.reload_optimizer()
            if self.rank == 0:
                path.mkdir(parents=True, exist_ok=True)
            dist.barrier()
            dist_checkpointing.save(self._sharded_state(), str(path))
            own: dict[str, Any] = {"rng": capture_rng_state(), "extra": extra or {}}
            if self.scheduler is not None:
                own["scheduler"] = self.scheduler.state_dict()
                own["num_training_steps"] = self.num_training_steps
            text = json.dumps(to_jsonable(own, "extra_state"))
            (path / EXTRA_STATE_FILE.format(rank=self.rank)).write_text(text, encoding="utf-8")
            dist.barrier()
        dist.barrier()

    def load_checkpoint(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """Restore what `save_checkpoint` wrote; returns the saved `extra`. A checkpoint whose pickles name anything
        but plain data classes is refused before Megatron unpickles them (`check_pickled_checkpoint`)."""
        from megatron.core import dist_checkpointing

        with local_directory_for_reading(directory) as local:
            path = Path(local)
            own_file = path / EXTRA_STATE_FILE.format(rank=self.rank)
            if not own_file.exists():
                raise FileNotFoundError(
                    f"{directory}/{own_file.name} is missing: not a Megatron checkpoint of this group"
                )
            own = json.loads(own_file.read_text(encoding="utf-8"))
            check_pickled_checkpoint(path, directory)
            if self.optimizer_offloaded:
                self.reload_optimizer()
            state = dist_checkpointing.load(self._sharded_state(is_loading=True), str(path))
            self._gpt().load_state_dict(state["model"])
            if self.optimizer is not None:
                self.optimizer.load_state_dict(state["optimizer"])
            if self.scheduler is not None and "scheduler" in own:
                if own.get("num_training_steps") != self.num_training_steps:
                    self.scheduler = build_scheduler(self._lr_holder, self.optimizer_config, own["num_training_steps"])
                    self.num_training_steps = own["num_training_steps"]
                self.scheduler.load_state_dict(own["scheduler"])
            restore_rng_state(own["rng"])
            dist.barrier()
            return own["extra"]

    def save_hf_model(self, directory: str | os.PathLike[str], tokenizer: Any = None) -> None:
        """Gather the weights and write a Hugging Face model folder (config, safetensors, tokenizer) from rank 0.

        A LoRA model writes its adapter instead, as peft does (`adapter_config.json` + `adapter_model.safetensors`,
        loadable with `PeftModel.from_pretrained(base, directory)`), and with `merge_adapters_on_export` also the merged
        full model into `directory/merged`."""
        if self.is_adapter_model:
            self._save_adapter(directory, tokenizer)
            return
        state = self.full_state_dict()
        if self.rank == 0:
            with local_directory_for_writing(directory) as local:
                self._save_full_model(local, state, tokenizer)
        dist.barrier()

    def _save_full_model(
        self, directory: str | os.PathLike[str], state: dict[str, torch.Tensor], tokenizer: Any
    ) -> None:
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(self.hf_config)
        skeleton.save_pretrained(directory, state_dict=state, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(directory)

    def _save_adapter(self, directory: str | os.PathLike[str], tokenizer: Any) -> None:
        from safetensors.torch import save_file

        from skyrl_train.models.lora_state import unnamed_adapter_key

        adapters = self.trainable_state_dict()
        merged = self.full_state_dict() if self.merge_adapters_on_export else {}
        if self.rank == 0:
            with local_directory_for_writing(directory) as local:
                self.peft_config.save_pretrained(local)
                tensors = {unnamed_adapter_key(name): tensor.contiguous() for name, tensor in adapters.items()}
                save_file(tensors, str(Path(local) / "adapter_model.safetensors"), metadata={"format": "pt"})
                if tokenizer is not None:
                    tokenizer.save_pretrained(local)
                if self.merge_adapters_on_export:
                    # the base weights under peft's names, so peft's own merge folds the adapters in
                    peft_state = {**{PEFT_PREFIX + name: tensor for name, tensor in merged.items()}, **adapters}
                    merged = merge_peft_state(peft_state, self.peft_config.lora_alpha)
                    self._save_full_model(Path(local) / "merged", merged, tokenizer)
        dist.barrier()
