"""`RunPlan`: which phases of a training step fuse into one call, decided once per run from the config.

The algorithm is the same in every run (rollouts -> log-probs -> advantages -> updates -> publish the weights); what
changes is how many round trips it takes. Every such choice is made here, once, and printed by `--dry-run`:

- engines sleep while the workers train: colocated runs on GPUs only (sleeping frees their GPU memory; on a CPU
  it frees nothing, so the two RPC rounds are skipped);
- the weights are sent inside the policy update's own call (saving a round trip to every rank) when the engines
  stay awake, the mode is sync (async modes pause the engines around a sync) and no OpenAI endpoint serves the run
  (its requests wait during a sync, so they would wait for the whole update);
- the engines install that send's last chunk at their next generate call (saving their acknowledgement round
  trip) when the send is in the update, no checksum verification follows and the backend can defer;
- the policy's old log-probs come from a forward of their own before the advantages only when KL in the reward
  (or on-policy distillation's reward) needs them; otherwise from the update's own forward when it takes exactly one optimizer step (the old policy is
  then the current one), else from the update's call before its first optimizer step;
- the reference log-probs come from the ref workers, or from the LoRA policy with its adapters off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

OldLogprobs = Literal["given", "update", "first_pass"]
"""Where a policy update's old log-probs come from: `given` (computed before the update and passed in), `update`
(the update's own forward: one optimizer step on the batch, so the old policy is the current one) or `first_pass`
(the update's call computes them before its first optimizer step)."""


@dataclass(frozen=True)
class RunPlan:
    """The run's fused-call decisions (see the module docstring)."""

    mode: str
    engines_sleep: bool
    sync_in_update: bool
    defer_install: bool
    old_logprobs_before_update: bool
    one_optimizer_pass: bool
    reference: Optional[str]
    """`ref_workers`, `policy_base` (LoRA adapters off) or None (no KL)."""

    @classmethod
    def from_config(cls, cfg: Any, verify_weight_sync: bool = False, can_defer_install: bool = True) -> RunPlan:
        """The plan of a run of `cfg`; `can_defer_install` is the weight-sync backend's (`--dry-run` assumes it)."""
        engines_sleep = cfg.trainer.placement.colocate_all and cfg.resolved_device() == "cuda"
        sync_in_update = cfg.trainer.mode == "sync" and not engines_sleep and not cfg.generator.http_endpoint.enabled
        algorithm = cfg.trainer.algorithm
        reference = None
        if cfg.needs_ref_model:
            reference = "policy_base" if cfg.ref_is_policy_base else "ref_workers"
        return cls(
            mode=cfg.trainer.mode,
            engines_sleep=engines_sleep,
            sync_in_update=sync_in_update,
            defer_install=sync_in_update and not verify_weight_sync and can_defer_install,
            old_logprobs_before_update=algorithm.use_kl_in_reward or algorithm.on_policy_distillation,
            one_optimizer_pass=cfg.trainer.update_epochs_per_batch == 1,
            reference=reference,
        )

    @property
    def pause_engines_to_sync(self) -> bool:
        """Async modes pause the engines around a sync (running rollouts go on with the new weights after it)."""
        return self.mode != "sync"

    def old_logprobs(self, num_mini_batches: int) -> OldLogprobs:
        """Where this batch's old log-probs come from (`OldLogprobs`)."""
        if self.old_logprobs_before_update:
            return "given"
        return "update" if self.one_optimizer_pass and num_mini_batches == 1 else "first_pass"

    def describe(self) -> str:
        """The plan as `--dry-run` prints it."""
        reference = {"ref_workers": "the ref workers", "policy_base": "the policy with its LoRA adapters off"}
        old = (
            "a forward of their own before the advantages (KL in the reward or distillation needs them)"
            if self.old_logprobs_before_update
            else (
                "the update's own forward when a step takes one optimizer step (one mini-batch), else the update's "
                "call before its first optimizer step"
                if self.one_optimizer_pass
                else "the update's call, before its first optimizer step"
            )
        )
        if self.sync_in_update:
            install = "at the engines' next generate call" if self.defer_install else "before the update returns"
            sync = f"inside the policy update's call; last chunk installed {install}"
        else:
            sync = "a call of its own after the update" + (", engines paused" if self.pause_engines_to_sync else "")
        lines = [
            f"run plan (trainer.mode={self.mode}):",
            f"  engines sleep while the workers train: {'yes' if self.engines_sleep else 'no'}",
            f"  weight sync: {sync}",
            f"  old log-probs: {old}",
            f"  reference log-probs: {reference.get(self.reference or '', 'none (no KL)')}",
        ]
        return "\n".join(lines) + "\n"
