"""`trainer.dump_data_batch`: each step's training batch written to a safetensors file, for debugging a run.

The file of step N is `<trainer.export_path>/dumped_data/global_step_<N>_training_input.safetensors` (SkyRL's name,
with a safetensors suffix instead of its pickle): the batch as the policy update receives it, written after the
advantages and before the critic and policy updates, so a step that crashes in training still leaves its batch.
Tensors (one row per trajectory; `[B, P + R]` sequence fields, `[B, R]` per response token, `[B]` per row):

    input_ids, attention_mask, position_ids, response_mask, loss_mask, token_rewards, valid, advantages, returns
    rollout_logprobs, old_logprobs, ref_logprobs, values      (each only when the step has it)

`old_logprobs` are there when the trainer computes them before the update (the run plan may take them from the
update's own forward instead). SkyRL's names for the same tensors: `sequences` (input_ids), `action_log_probs`
(old_logprobs), `base_action_log_probs` (ref_logprobs). The header's metadata holds `global_step`, `prompt_width`
(response token j of every row sits at column `prompt_width + j`) and `uids` (JSON list: rows of one prompt share a
uid). Plain `safetensors.torch.load_file(path)` reads the tensors; `load_batch_dump(path)` adds the metadata.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Optional

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from skyrl_train.utils.checkpoint_io import local_directory_for_writing
from skyrl_train.utils.timer import PhaseTimer

DUMP_DIRECTORY = "dumped_data"
"""Folder under `trainer.export_path` that holds the dumped batches (SkyRL's name)."""

_BATCH_FIELDS = (
    "input_ids",
    "attention_mask",
    "position_ids",
    "response_mask",
    "loss_mask",
    "token_rewards",
    "rollout_logprobs",
    "valid",
)


def dump_file_name(global_step: int) -> str:
    """The file name of step `global_step`'s dump."""
    return f"global_step_{global_step}_training_input.safetensors"


@dataclass
class BatchDump:
    """Writes each step's training batch under `export_path` when `enabled` (`trainer.dump_data_batch`)."""

    enabled: bool
    export_path: str

    @classmethod
    def from_config(cls, cfg: Any) -> BatchDump:
        """The dumper of `trainer.dump_data_batch` into `trainer.export_path`."""
        return cls(bool(cfg.trainer.dump_data_batch), os.path.expanduser(cfg.trainer.export_path))

    def write(
        self,
        global_step: int,
        batch: Any,
        timer: PhaseTimer,
        advantages: torch.Tensor,
        returns: torch.Tensor,
        old_logprobs: Optional[torch.Tensor] = None,
        ref_logprobs: Optional[torch.Tensor] = None,
        values: Optional[torch.Tensor] = None,
    ) -> None:
        """Write `batch` (the step's `skyrl_train.training_batch.TrainingBatch`; utils sit below it, so it is not
        imported here) with the step's per-row tensors (the ones that are None are left out) as one safetensors file
        of `global_step`; nothing when dumping is off."""
        if not self.enabled:
            return
        with timer("dump_data_batch"):
            tensors = {name: getattr(batch, name) for name in _BATCH_FIELDS}
            tensors.update(advantages=advantages, returns=returns, values=values)
            tensors.update(old_logprobs=old_logprobs, ref_logprobs=ref_logprobs)
            tensors = {name: value.detach().cpu().contiguous() for name, value in tensors.items() if value is not None}
            metadata = {
                "global_step": str(global_step),
                "prompt_width": str(batch.prompt_width),
                "uids": json.dumps(list(batch.uids)),
            }
            with local_directory_for_writing(os.path.join(self.export_path, DUMP_DIRECTORY)) as local:
                save_file(tensors, os.path.join(local, dump_file_name(global_step)), metadata=metadata)


def load_batch_dump(path: str | os.PathLike[str]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A dumped batch: its tensors by name, and its metadata (`global_step` and `prompt_width` as ints, `uids` as a
    list of strings)."""
    with safe_open(os.fspath(path), framework="pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 - safe_open is not iterable
        raw = handle.metadata() or {}
    missing = [key for key in ("global_step", "prompt_width", "uids") if key not in raw]
    if missing:
        raise ValueError(f"{path} is not a dumped training batch: its metadata lacks {missing}")
    metadata = {"global_step": int(raw["global_step"]), "prompt_width": int(raw["prompt_width"])}
    metadata["uids"] = json.loads(raw["uids"])
    return tensors, metadata
