"""The `trainer` section: placement, roles, algorithm, batch sizes, checkpointing, logging and evaluation."""

from dataclasses import dataclass, field
from typing import Literal, Optional

from skyrl_train.config.algorithm import AlgorithmConfig
from skyrl_train.config.health import HealthConfig
from skyrl_train.config.roles import CriticConfig, PolicyConfig, RefConfig


@dataclass
class PlacementConfig:
    """Where each role runs: node and GPU counts, and which roles share GPUs.

    On `trainer.device: cpu` a "GPU" count is the number of worker processes per node, each reserving
    `num_cpus_per_worker` CPUs.
    """

    allocation_mode: Optional[str] = None
    """AReaL-style shorthand for the placement, e.g. `vllm:d2+fsdp:d2` (separate) or `hf:d2|fsdp:d2` (colocated):
    sets the engine backend, count and TP, the strategy, the policy's ranks (and Megatron TP/PP) and `colocate_all`
    (see `skyrl_train/config/allocation.py`); a key also given with another value is an error. null: use the keys."""

    colocate_all: bool = True
    """Put policy, ref, critic and inference engines on the same GPUs, taking turns (engines sleep while training).
    Needs the engines' GPU count (`num_engines * tensor_parallel_size`) to equal the policy's."""

    colocate_policy_ref: bool = True
    """Put the reference model on the policy's GPUs (when `colocate_all` is false)."""

    policy_num_nodes: int = 1
    """Nodes the policy is spread over."""

    policy_num_gpus_per_node: int = 1
    """GPUs (or CPU worker processes) of the policy on each node."""

    ref_num_nodes: int = 1
    """Nodes the reference model is spread over."""

    ref_num_gpus_per_node: int = 1
    """GPUs (or CPU worker processes) of the reference model on each node. Colocated, it shares the first of the
    policy's GPUs: at most as many as the policy (fewer warns: the model is sharded over fewer GPUs)."""

    critic_num_nodes: int = 1
    """Nodes the critic is spread over."""

    critic_num_gpus_per_node: int = 1
    """GPUs (or CPU worker processes) of the critic on each node. Colocated, it shares the first of the policy's
    GPUs: at most as many as the policy (fewer warns: the model is sharded over fewer GPUs)."""

    reward_num_nodes: int = 1
    """Nodes the reward model (`reward.model`) is spread over."""

    reward_num_gpus_per_node: int = 1
    """GPUs (or CPU worker processes) of the reward model on each node. Colocated (`colocate_all`), the reward model
    shares the first of the policy's GPUs: at most as many as the policy."""

    num_cpus_per_worker: float = 1.0
    """CPUs Ray reserves for each worker process (on CPU machines this bounds how many workers fit)."""

    num_threads_per_worker: Optional[int] = None
    """Torch intra-op threads of each policy/ref/critic/reward worker process; null: its share of the bundle's CPUs
    rounded down, at least 1 (`num_cpus_per_worker` divided among the roles sharing the bundle: 1 thread in the
    quickstart). Actors run with `OMP_WAIT_POLICY=PASSIVE`, so more threads than free cores slow a step down
    instead of stalling it (see benchmarks/thread_counts.py)."""

    ray_address: Optional[str] = None
    """Ray cluster to join, e.g. `ray://head:10001` or `auto`; null uses `RAY_ADDRESS` if set, else starts a local
    cluster sized for the run."""


@dataclass
class AsyncRLConfig:
    """Asynchronous RL (`trainer.mode` one_step_off or fully_async): how stale the trained data may be."""

    max_staleness: int = 1
    """fully_async: the largest gap between the weight version that generated a group's oldest token and the version
    being trained. New groups start only while `started groups < (steps done + lookahead) * batch size`, the lookahead
    being `1 + ceil(group latency / trainer step)` as measured (`async/lookahead_steps` logs it minus 1) capped at
    `max_staleness + 1` (generation waits otherwise: `async/throttled_seconds`); a finished group still beyond it is
    dropped (`async/dropped_stale_groups`). 0 makes fully_async wait for every group of a step with current weights."""

    weight_update_boundary: Literal["auto", "token", "turn"] = "auto"
    """Async modes: where a weight sync meets rollouts in progress. `token`: engines stop between two tokens, take
    the new weights, rebuild the running rows' KV cache from their tokens so far and go on (every token records the
    version that sampled it; no sync waits for a long generation): hf, vllm (not with LoRA), sglang (SGLang retracts
    the running requests and recomputes them with the new weights) and remote (skyrl serve started with
    `--in-flight-weight-updates`); `turn`: a sync waits until the running generate calls finish, so each turn comes
    from one version. `auto`: `token` on hf and on vllm without LoRA, `turn` on the others (on sglang `token` is
    opt-in: its test runs on GPUs only)."""


@dataclass
class TrainerConfig:
    """Everything about the training side: placement, models, algorithm, batch sizes, checkpoints, logging, eval."""

    placement: PlacementConfig = field(default_factory=PlacementConfig)
    """Node and GPU counts per role and colocation."""

    strategy: Literal["fsdp2", "megatron"] = "fsdp2"
    """Distributed training backend of the workers."""

    mode: Literal["sync", "one_step_off", "fully_async"] = "sync"
    """The loop: `sync` generates a batch, then trains on it; `one_step_off` starts the batch of step k as soon as
    the weights of step k - 2 are served (two batches generate while a step trains; no token is more than one
    version old); `fully_async` keeps generating groups into a buffer and trains on whatever is ready, within
    `async_rl.max_staleness`. Both async modes update the engines' weights inside running rollouts (at
    `async_rl.weight_update_boundary`). The two async modes need separate placement (`placement.colocate_all=false`);
    see docs/async.md."""

    async_rl: AsyncRLConfig = field(default_factory=AsyncRLConfig)
    """Staleness bound of the async modes."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Device of the workers and engines; `auto` picks CUDA when it is available, else CPU."""

    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """The trained policy."""

    ref: RefConfig = field(default_factory=RefConfig)
    """The frozen reference model for the KL penalty."""

    critic: CriticConfig = field(default_factory=CriticConfig)
    """The value model (only with a model path)."""

    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """Advantage estimator, loss and their settings."""

    seed: int = 42
    """Seed of model initialisation and sampling on the training side."""

    epochs: int = 1
    """Passes over the training data."""

    max_training_steps: int | None = None
    """Stop after this many training steps (batches) even if epochs remain: at least 1, or null to run all epochs. It
    never extends a run: when `epochs` x batches per epoch is smaller, the run stops there (and says so at start-up)."""

    update_epochs_per_batch: int = 1
    """Passes over each training batch (PPO epochs); each pass walks all mini-batches."""

    train_batch_size: int = 1024
    """Prompts per training step; each yields `generator.n_samples_per_prompt` trajectories."""

    policy_mini_batch_size: int = 256
    """Prompts per policy optimizer step; must divide `train_batch_size`. Equal to it (with one update epoch and no
    KL in the reward), the step skips the separate old-log-prob forward; smaller, that forward skips the first
    mini-batch (its own first pass gives them): see `policy/old_logprobs_from_update`."""

    critic_mini_batch_size: int = 256
    """Prompts per critic optimizer step; must divide `train_batch_size`."""

    micro_train_batch_size_per_gpu: int | Literal["auto"] = "auto"
    """Sequences per forward/backward pass on each GPU; gradients accumulate over micro-batches. `auto`: the most
    rows, dividing a rank's mini-batch shard, whose longest possible sequences (`data.max_prompt_length` +
    `max_generate_length`) fit a token budget: 25 % of a rank's memory over one token's activation bytes (from the
    model's size), at most 16384 tokens; 4096 tokens when the model's size cannot be read locally."""

    micro_forward_batch_size_per_gpu: int | Literal["auto"] = "auto"
    """Sequences per forward-only pass on each GPU (old, ref logprobs and values). `auto`: the training micro-batch's
    rows (see `micro_train_batch_size_per_gpu`)."""

    max_tokens_per_microbatch: int = -1
    """When > 0, micro-batches are filled by token count up to this many tokens instead of by sequence count,
    counting the tokens a forward runs: packed (`remove_microbatch_padding`), the rows' own tokens in batch order, a
    prompt repeated within the micro-batch counted once with `share_prompt_forward`; padded, rows x (longest prompt +
    longest response), longest rows first."""

    remove_microbatch_padding: bool | Literal["auto"] = "auto"
    """Sequence packing (SkyRL's key): each micro-batch runs as one sequence of its rows' tokens, without padding.
    Position ids restart at every row and attention never crosses rows (flash-attention varlen on CUDA in bf16/fp16
    when the `flash-attn` package is installed, else SDPA over buckets of similar rows); only tokens that predict a
    response token run, and the LM head runs only where a log-prob is read. Log-probs, entropies, values and gradients
    equal the padded forward's up to float summation order. It packs the policy, ref and critic of the fsdp2 workers
    when the model routes its attention through transformers' AttentionInterface, without sliding-window layers, and
    the policy and ref of the megatron workers (same kernels, in megatron's own attention layer; pipeline stages
    included). `auto`: pack wherever that holds, else run padded (logged at start-up); `true`: pack, failing at
    start-up where it cannot; `false`: padded micro-batches (all-padding columns trimmed)."""

    share_prompt_forward: bool = True
    """Log-prob passes run each distinct prompt of a micro-batch once when rows repeat prompts, as the samples of a
    GRPO group do: same log-probs and gradients up to float summation order, fewer FLOPs. Packed
    (`remove_microbatch_padding`), the prompt is packed once and each row's response attends to it (policy, ref and
    critic, with or without gradient checkpointing); padded, it runs once with a key/value cache expanded to its rows
    (policy and ref, fsdp2, without gradient checkpointing)."""

    ckpt_path: str = "~/ckpts/"
    """Directory (or fsspec URL) where training checkpoints are written."""

    ckpt_interval: int = 10
    """Save a checkpoint every this many steps and at the end; `-1` (any value < 0) only at the end; `0` never."""

    max_ckpts_to_keep: int = -1
    """Delete the oldest checkpoints beyond this many; -1 keeps all."""

    resume_mode: Literal["none", "latest", "path"] = "latest"
    """`none` starts fresh, `latest` resumes from the newest checkpoint in `ckpt_path` if any, `path` resumes from
    `resume_path`."""

    resume_path: str | None = None
    """Checkpoint directory (`.../global_step_N`) to resume from when `resume_mode: path`."""

    hf_save_interval: int = -1
    """Export the policy as a Hugging Face model every this many steps; `-1` disables the periodic exports (the
    final model is always exported at the end of a run)."""

    export_path: str = "~/exports/"
    """Directory for Hugging Face exports, dumped evaluation results and dumped training batches."""

    dump_data_batch: bool = False
    """Write each step's training batch (token ids, masks, rewards, advantages, log-probs, values) to
    `<export_path>/dumped_data/global_step_<N>_training_input.safetensors` before the updates, for debugging; read it
    with `skyrl_train.utils.batch_dump.load_batch_dump`."""

    logger: str | list[str] = field(default_factory=lambda: ["console"])
    """Tracking backends by registry name (`TRACKING_BACKENDS`): any of `console`, `jsonl` (metrics file under
    `log_path`), `wandb`, `tensorboard`, `mlflow`, or one you register (a single name is accepted). wandb needs a
    login or `WANDB_MODE=offline`."""

    project_name: str = "skyrl"
    """Project name in the tracking backends."""

    run_name: str = "skyrl_run"
    """Run name in the tracking backends."""

    log_path: str = "/tmp/skyrl-logs"
    """Directory for the local files of the tracking backends: the `jsonl` metrics file, TensorBoard event files,
    the mlflow file store and offline wandb runs. The `console` backend writes to stdout only."""

    record_timeline: bool = False
    """Write `<log_path>/timeline.jsonl`: after every step, when the driver's phases ran, when each policy/critic/ref
    rank computed, when each engine decoded and when weight syncs paused the engines (wall-clock spans recorded by
    each part). `python scripts/plot_timeline.py <file>` draws it as busy/idle bars (docs/async.md)."""

    eval_interval: int = 5
    """Evaluate on `data.val_data` every this many steps; -1 disables periodic evaluation."""

    eval_before_train: bool = True
    """Evaluate once before the first training step."""

    eval_batch_size: int = 1024
    """Prompts per evaluation generation batch."""

    health: HealthConfig = field(default_factory=HealthConfig)
    """Per-step checks of training health (clip fraction, KL, entropy, grad norm, rewards) and their thresholds."""

    def __post_init__(self) -> None:
        if isinstance(self.logger, str):
            self.logger = [self.logger]
