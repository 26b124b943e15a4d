"""The `reward` section: who scores a rollout (the env, a user function through a reward manager, a reward model)
and how those scores combine into the reward the trainer uses."""

from dataclasses import dataclass, field
from typing import Literal

from skyrl_train.config.roles import FSDPConfig


@dataclass
class RewardModelConfig:
    """The reward model role: a Hugging Face sequence-classification model (one label) run as a Ray worker group.

    Its workers sit on `trainer.placement.reward_num_nodes` x `reward_num_gpus_per_node` GPUs (or CPU workers): on the
    policy's bundles when `trainer.placement.colocate_all` is true, else in their own placement group.
    """

    path: str | None = None
    """Hugging Face model id or local folder of an `AutoModelForSequenceClassification` checkpoint with one label and
    a trained `score` head (Llama/Qwen/Mistral-style). Null: no reward model. Its own tokenizer (and chat template)
    renders the conversation, so it may differ from the policy's."""

    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    """Sharding and compute dtype of the reward model (as for the reference model)."""

    sequence_parallel_size: int = 1
    """Ranks that split one sequence. Only 1 is supported; other values are refused at start-up."""

    micro_batch_size_per_gpu: int = 8
    """Sequences per forward pass on each reward-model worker; scores do not depend on it."""

    max_length: int = 4096
    """Most tokens of reward-model input (the rendered prompt and response). A longer input keeps its last
    `max_length` tokens: the start of the conversation is dropped so the end of the response, where the score is read,
    is always seen. Truncations are counted in `reward/model_truncated`."""


@dataclass
class RewardConfig:
    """Where each trajectory's reward comes from.

    `manager` picks the rule reward: `env` keeps the environment's step rewards; `naive`, `batch` and `parallel` call
    the user function `function` (verl's reward managers). With `model.path` set, a reward model scores responses too,
    and `combine` says how its score and the rule reward make the final reward.
    """

    manager: Literal["env", "naive", "batch", "parallel"] = "env"
    """`env`: the environment's rewards (per turn, as the generator placed them). `naive`: `function(data_source,
    solution_str, ground_truth, extra_info)` once per trajectory in the trainer process. `batch`: one call
    `function(data_sources, solution_strs, ground_truths, extra_infos)` with lists, returning a list. `parallel`: the
    per-trajectory call in `num_workers` processes, each call limited to `timeout_s` seconds. The manager's score
    replaces the env's rewards and is placed on the last generated token."""

    function: str | None = None
    """The user scoring function for `naive`, `batch` and `parallel`: `package.module:name` or
    `/path/to/file.py:name`. It returns a number or a dict with a `score` key (other numeric keys are logged as
    `reward/function/<key>`); `batch` returns a list of those. A call that raises, returns something else or a
    non-finite number marks its trajectory invalid (loss-masked, reward 0), counted in `reward/manager_errors`."""

    num_workers: int = 4
    """`parallel`: scoring processes kept alive across steps."""

    timeout_s: float = 30.0
    """`parallel`: seconds one call may take. A call that runs longer has its process (and that process's children)
    killed and replaced; its trajectory is marked invalid (loss-masked, reward 0) and counted in
    `reward/manager_timeouts`."""

    combine: Literal["by_row", "sum", "model"] = "by_row"
    """How the rule reward (env or manager) and the reward model's score make the final reward. `by_row`: each row's
    `reward_spec.method` decides: `reward_model` rows get `model_coef * score`, the others the rule reward. `sum`:
    every row gets rule reward + `model_coef * score`. `model`: every row gets `model_coef * score` only. `sum` and
    `model` need `model.path`."""

    model_coef: float = 1.0
    """Weight of the reward model's score wherever it is used."""

    model: RewardModelConfig = field(default_factory=RewardModelConfig)
    """The reward model (`model.path: null` for none)."""
