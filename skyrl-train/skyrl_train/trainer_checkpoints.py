"""`TrainerCheckpoints`: when and how the trainer saves, resumes and exports (atomic dirs, keep-last-N, HF export)."""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

from skyrl_train.utils.checkpoint_io import begin_checkpoint, commit_checkpoint, prune, resolve_resume
from skyrl_train.utils.trainer_state import load_trainer_state, save_trainer_state
from skyrl_train.workers.group import WorkerGroup

logger = logging.getLogger(__name__)


class TrainerCheckpoints:
    """Saves model, optimizer, scheduler, dataloader, trainer and RNG state every `ckpt_interval` steps into an atomic
    `global_step_N` directory, keeps the last `max_ckpts_to_keep`, resumes per `resume_mode`, and exports HF weights
    every `hf_save_interval` steps and at the end.

    Worker groups write their shards straight into the checkpoint directory, so on several nodes `ckpt_path` must be
    a shared filesystem.
    """

    def __init__(self, cfg: Any, policy: WorkerGroup, critic: Optional[WorkerGroup], loader: Any) -> None:
        self.cfg = cfg
        self.policy, self.critic, self.loader = policy, critic, loader
        self.root = os.path.expanduser(cfg.trainer.ckpt_path)
        self.export_root = os.path.expanduser(cfg.trainer.export_path)
        self.last_saved: Optional[int] = None
        self.last_exported: Optional[int] = None
        self.saved_paths: list[str] = []
        self.exported_paths: list[str] = []
        self.resumed_extra: Optional[dict[str, Any]] = None
        """The trainer's own state (`RayPPOTrainer.state()`) of the checkpoint resumed from; None when fresh."""

    def resume(self) -> int:
        """Load the checkpoint chosen by `resume_mode` (none | latest | path); returns the step to continue from."""
        trainer = self.cfg.trainer
        path = resolve_resume(self.root, trainer.resume_mode, trainer.resume_path)
        if path is None:
            return 0
        logger.info("resuming from %s", path)
        self.policy.run_all("load_checkpoint", os.path.join(path, "policy"))
        if self.critic is not None:
            self.critic.run_all("load_checkpoint", os.path.join(path, "critic"))
        state = load_trainer_state(path, restore_rng=True)
        if state.dataloader:
            self.loader.load_state_dict(state.dataloader)
        self.last_saved = state.global_step
        self.resumed_extra = dict(state.extra)
        return state.global_step

    def save(self, step: int, extra: Optional[dict[str, Any]] = None) -> str:
        """Write checkpoint `step` (with the trainer's own state `extra`) atomically, then prune old ones; returns
        its directory."""
        tmp = begin_checkpoint(self.root, step)
        self.policy.run_all("save_checkpoint", os.path.join(tmp, "policy"))
        if self.critic is not None:
            self.critic.run_all("save_checkpoint", os.path.join(tmp, "critic"))
        save_trainer_state(tmp, step, self.loader.state_dict(), config=self.cfg.to_dict(), extra=extra)
        path = commit_checkpoint(self.root, step, tmp)
        prune(self.root, self.cfg.trainer.max_ckpts_to_keep, protect=(path,))
        self.last_saved = step
        self.saved_paths.append(path)
        logger.info("saved checkpoint %s", path)
        return path

    def export(self, step: int) -> str:
        """Export the policy as a Hugging Face folder (weights + tokenizer) under `export_path`."""
        path = os.path.join(self.export_root, f"global_step_{step}", "policy")
        self.policy.run_all("save_hf_model", path)
        self.last_exported = step
        self.exported_paths.append(path)
        logger.info("exported HF model %s", path)
        return path

    def after_step(self, step: int, extra: Optional[dict[str, Any]] = None, last: bool = False) -> None:
        """Save and export on their intervals (and always on the last step)."""
        trainer = self.cfg.trainer
        if trainer.ckpt_interval > 0 and (step % trainer.ckpt_interval == 0 or last):
            self.save(step, extra)
        if trainer.hf_save_interval > 0 and step % trainer.hf_save_interval == 0:
            self.export(step)

    def at_end(self, step: int, extra: Optional[dict[str, Any]] = None) -> None:
        """Make sure the final state is checkpointed (when checkpointing is on) and exported."""
        if step == 0:
            return
        if self.cfg.trainer.ckpt_interval != 0 and self.last_saved != step:
            self.save(step, extra)
        if self.last_exported != step:
            self.export(step)
