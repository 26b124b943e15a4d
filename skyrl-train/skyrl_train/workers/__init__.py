"""Workers: the policy, reference, critic and reward-model ranks (FSDP2 on CPU or GPU) and the Ray groups that drive
them.

| module | job |
|---|---|
| worker | `BaseWorker`: process group, model loading and sharding, optimizer step, weights, checkpoints |
| policy_worker | `PolicyWorker` (log-probs, policy update), `RefWorker` (reference log-probs) |
| critic_worker | `CriticWorker` (values, clipped value loss) |
| reward_worker | `RewardModelWorker` (one score per sequence from a sequence-classification model), `ScoringBatch` |
| policy_objective | policy loss + KL loss + entropy bonus on one micro-batch |
| micro_batching | micro-batches by count or token budget, padding-column trimming |
| accounting | micro-batch loss weights (exact gradient accumulation) and metric aggregation |
| dispatch, group | splitting batches over ranks; `WorkerGroup` of Ray actors |
| distributed | device, backend (gloo/nccl) and rendezvous |
| strategy | `FSDP2Strategy`, optimizer and LR schedule |
"""

from skyrl_train.workers.critic_worker import CriticWorker
from skyrl_train.workers.policy_worker import PolicyWorker, RefWorker
from skyrl_train.workers.reward_worker import RewardModelWorker
from skyrl_train.workers.worker import BaseWorker

ROLE_WORKERS: dict[str, type[BaseWorker]] = {
    "policy": PolicyWorker,
    "ref": RefWorker,
    "critic": CriticWorker,
    "reward": RewardModelWorker,
}
"""Worker class of each role."""


def __getattr__(name: str) -> type:
    if name == "WorkerGroup":  # imported lazily: importing Ray is slow and the workers themselves do not need it
        from skyrl_train.workers.group import WorkerGroup

        return WorkerGroup
    raise AttributeError(name)


__all__ = [
    "ROLE_WORKERS",
    "BaseWorker",
    "CriticWorker",
    "PolicyWorker",
    "RefWorker",
    "RewardModelWorker",
    "WorkerGroup",
]
