"""A step's rollouts: which prompts (`PromptSource`), their generator inputs (`make_generator_input`), generation with
reward shaping and dynamic sampling (`RolloutCollector`, `select_groups`), and one source per `trainer.mode` that
feeds the training loop (`SyncSource`, `OneStepOffSource`, `FullyAsyncSource`)."""

from skyrl_train.rollouts.collector import RolloutCollector, Rollouts, merge_rollouts
from skyrl_train.rollouts.dynamic_sampling import (
    REPLICA_UID_SEPARATOR,
    DynamicSampling,
    DynamicSamplingError,
    GroupSelection,
    informative_groups,
    replace_uninformative_groups,
    select_groups,
)
from skyrl_train.rollouts.fully_async import FullyAsyncSource, GroupRollout
from skyrl_train.rollouts.inputs import FULLY_ASYNC_SEED_KEY, make_generator_input
from skyrl_train.rollouts.prompts import PromptSource
from skyrl_train.rollouts.shaping import apply_overlong_punishment
from skyrl_train.rollouts.sources import (
    OneStepOffSource,
    RolloutSource,
    StepRollouts,
    SyncSource,
    staleness_metrics,
)

__all__ = [
    "FULLY_ASYNC_SEED_KEY",
    "REPLICA_UID_SEPARATOR",
    "DynamicSampling",
    "DynamicSamplingError",
    "FullyAsyncSource",
    "GroupRollout",
    "GroupSelection",
    "OneStepOffSource",
    "PromptSource",
    "RolloutCollector",
    "RolloutSource",
    "Rollouts",
    "StepRollouts",
    "SyncSource",
    "apply_overlong_punishment",
    "informative_groups",
    "make_generator_input",
    "merge_rollouts",
    "replace_uninformative_groups",
    "select_groups",
    "staleness_metrics",
]
