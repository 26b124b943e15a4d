"""Per-role sections of `trainer` (`policy`, `ref`, `critic`): model, LoRA, optimizer and FSDP settings."""

from dataclasses import dataclass, field
from typing import Literal

Dtype = Literal["float32", "bfloat16", "float16"]
"""Floating-point dtypes a model can be loaded, computed or reduced in."""

AutoDtype = Literal["auto", "float32", "bfloat16", "float16"]
"""A dtype, or `auto`: chosen for the device (`skyrl_train.config.auto_settings`)."""


@dataclass
class LoraConfig:
    """LoRA adapters (PEFT); a rank of 0 trains the full model instead. On the critic, the value head trains whole
    next to the adapters."""

    rank: int = 0
    """Rank of the LoRA matrices; 0 disables LoRA and trains every weight."""

    alpha: int = 16
    """LoRA scaling numerator: the adapter update is multiplied by `alpha / rank`."""

    dropout: float = 0.0
    """Dropout applied to the adapter input during training."""

    target_modules: str | list[str] = "all-linear"
    """Modules that get adapters: `all-linear` or a list of module names such as `[q_proj, v_proj]`."""

    exclude_modules: list[str] | None = None
    """Module names never given adapters, even when `target_modules` matches them."""

    merge_on_export: bool = False
    """Hugging Face exports write the adapter (peft format); true also writes the merged full model into `merged/`."""


@dataclass
class ModelConfig:
    """Which model weights a role loads."""

    path: str | None = None
    """Hugging Face model id or local directory. For `ref`, null means the policy's model; for `critic`, null means
    no critic is built."""

    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA adapters trained on top of the frozen model."""


@dataclass
class OptimizerConfig:
    """AdamW and its learning-rate schedule."""

    lr: float = 1.0e-6
    """Peak learning rate."""

    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW `(beta1, beta2)`."""

    weight_decay: float = 0.01
    """Decoupled (AdamW) weight decay."""

    max_grad_norm: float = 1.0
    """Gradients are clipped to this global L2 norm before each optimizer step."""

    scheduler: str = "constant_with_warmup"
    """Learning-rate schedule by name (`constant`, `constant_with_warmup`, `linear`, `cosine`, ...: the names of
    `transformers.get_scheduler`)."""

    num_warmup_steps: int = 0
    """Optimizer steps of linear warm-up from 0 to `lr`."""

    offload_after_step: bool = True
    """When colocated (`trainer.placement.colocate_all`) on GPUs, move the optimizer state (AdamW moments) to CPU
    after each optimizer step so the inference engines get that memory while they generate; it moves back at the
    next step. No effect when not colocated or on `trainer.device: cpu` (the state already lives in CPU memory)."""


@dataclass
class MixedPrecisionConfig:
    """Dtypes FSDP computes and reduces gradients in."""

    param_dtype: AutoDtype = "auto"
    """Dtype of parameters during forward and backward (`float32` disables mixed precision). `auto`: `bfloat16` on
    CUDA; on a CPU `bfloat16` for a model of at least 5 M parameters when the CPU has native bfloat16 dot products
    (`avx512_bf16`, `amx_bf16`, Arm's `bf16`), else `float32` (`config.auto_settings`; `--dry-run` prints the choice)."""

    reduce_dtype: Dtype = "float32"
    """Dtype gradients are reduced (averaged across ranks) in."""


@dataclass
class FSDPConfig:
    """FSDP2 (`fully_shard`) sharding of one role's model."""

    cpu_offload: bool = False
    """Keep sharded parameters, gradients and optimizer state on CPU between uses (slower, frees GPU memory)."""

    reshard_after_forward: bool | Literal["auto"] = "auto"
    """Free gathered parameters after the forward pass and gather them again for backward (saves memory). `auto`:
    `false` with one rank, or when a full copy of the model in its compute dtype takes at most 10 % of a rank's
    memory (GPU memory, or the host's divided among a node's model processes); `true` otherwise, or when the model's
    size cannot be read locally. LoRA roles choose the same way. `--dry-run` prints the choice and its reason."""

    shard_layers: bool | Literal["auto"] = "auto"
    """Shard each decoder layer (the model's `_no_split_modules`) as its own unit, gathered one at a time; `false`
    shards the whole model as one unit: one gather and one gradient reduction per pass instead of one per layer
    (fewer collectives and hooks for a small model, the whole model gathered at once). `auto`: `false` with one
    rank, or on CPU when a full copy of the model takes at most 10 % of a rank's memory (gloo collectives do not
    overlap compute there); `true` on CUDA (each layer's all-gather overlaps the previous layer's compute)."""

    fsdp_size: int = -1
    """Ranks per shard group; -1 shards over all ranks, a smaller divisor gives hybrid sharding (HSDP)."""

    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)
    """Compute and gradient-reduction dtypes."""


@dataclass
class MegatronConfig:
    """Megatron-core parallelism of one role (read only with `trainer.strategy: megatron`). The role's workers
    split into `tensor * pipeline * context` model-parallel ranks; the rest of its GPUs are data-parallel ranks
    (the distributed optimizer shards the optimizer state over them)."""

    tensor_model_parallel_size: int = 1
    """Ranks that split every layer's weights (Megatron TP); must divide the attention heads, key/value heads and
    MLP width of the model."""

    pipeline_model_parallel_size: int = 1
    """Ranks that split the decoder layers into stages (Megatron PP): the first stage embeds the tokens, the last
    one holds the final norm and output layer, and micro-batches run through megatron-core's 1F1B schedule."""

    num_layers_in_first_pipeline_stage: int | None = None
    """Decoder layers on the first pipeline stage (uneven stages; e.g. fewer, as it also holds the embedding);
    null splits them evenly. The layers left after the first and last stages split evenly over the others."""

    num_layers_in_last_pipeline_stage: int | None = None
    """Decoder layers on the last pipeline stage (uneven stages; e.g. fewer, as it also holds the output layer and
    the loss); null splits them evenly."""

    context_parallel_size: int = 1
    """Ranks that split each sequence (Megatron CP)."""

    expert_model_parallel_size: int = 1
    """Ranks that split the experts of a mixture-of-experts model (Megatron EP); must divide the number of experts,
    and times `expert_tensor_parallel_size` the ranks of a pipeline stage: the experts may spread over tensor-parallel
    ranks as well as data-parallel ones (megatron-core's MoE parallel folding). 1 for dense models."""

    expert_tensor_parallel_size: int | None = None
    """Ranks that split each expert's weights (Megatron ETP), apart from the attention's tensor-parallel split; null
    means `tensor_model_parallel_size`. SkyRL's MoE scripts set 1 with tensor_model_parallel_size above 1: whole experts,
    spread over the tensor-parallel ranks by `expert_model_parallel_size`."""

    moe_router_score_function: str | None = None
    """The MoE router's score function, `softmax` or `sigmoid` (SkyRL's key); null takes the model's. It must be the
    model's own: the engines serve the Hugging Face model, so a value its architecture does not use is refused when
    the model is built, naming both (every MoE family mapped here routes by softmax)."""

    moe_router_enable_expert_bias: bool | None = None
    """Whether the MoE router adds a per-expert bias to its scores when choosing experts (SkyRL's key); null takes the
    model's. As with the score function, a value other than the model's own is refused when the model is built."""

    param_dtype: Dtype = "bfloat16"
    """Dtype of the model's parameters during forward and backward (the distributed optimizer keeps float32 main
    weights); `float32` trains in full precision."""

    optimizer_cpu_offload: bool = False
    """Keep `optimizer_offload_fraction` of the distributed optimizer's state on the CPU and step that share there
    (megatron-core's `HybridDeviceOptimizer`): frees the GPU memory of Adam's state for a host-device copy of the
    gradients and parameters every step. Trainable roles only (refused on `ref`)."""

    optimizer_offload_fraction: float = 0.0
    """Share of the optimizer state (0 to 1) kept and stepped on the CPU when `optimizer_cpu_offload` is on; must be
    above 0 then (megatron-core's default 0 would offload nothing). Ignored, with a warning, while the offload is off
    (SkyRL's scripts set it either way)."""

    overlap_cpu_optimizer_d2h_h2d: bool = False
    """With `optimizer_cpu_offload`: overlap the CPU optimizer's step with the gradient and parameter copies."""

    use_precision_aware_optimizer: bool = False
    """megatron-core's precision-aware optimizer: main weights and Adam moments in the dtypes the optimizer kernel
    chooses. Without `optimizer_cpu_offload` it needs Transformer Engine's FusedAdam (megatron-core checks)."""


@dataclass
class RefConfig:
    """The frozen reference model used for the KL penalty; built only when KL is used (`cfg.needs_ref_model`)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """Reference weights; `model.path: null` uses the policy's initial model."""

    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    """Sharding of the reference model."""

    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    """Megatron parallelism of the reference model (`trainer.strategy: megatron`)."""

    sequence_parallel_size: int = 1
    """Ranks that split each packed sequence between them (Ulysses sequence parallelism, fsdp2 workers): they get
    the same rows, each runs the model on its slice of the tokens, and all-to-alls give every rank all tokens of
    its share of the attention heads. Needs packed micro-batches (`remove_microbatch_padding` auto or true) and
    attention heads that divide by it; must divide the role's GPU count."""


@dataclass
class PolicyConfig:
    """The trained policy: model, optimizer, sharding and memory savers."""

    model: ModelConfig = field(default_factory=lambda: ModelConfig(path="Qwen/Qwen2.5-1.5B-Instruct"))
    """Policy weights and LoRA settings."""

    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """Optimizer and learning-rate schedule."""

    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    """Sharding of the policy."""

    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    """Megatron parallelism of the policy (`trainer.strategy: megatron`)."""

    sequence_parallel_size: int = 1
    """Ranks that split each packed sequence between them (Ulysses sequence parallelism, fsdp2 workers): they get
    the same rows, each runs the model on its slice of the tokens, and all-to-alls give every rank all tokens of
    its share of the attention heads. Needs packed micro-batches (`remove_microbatch_padding` auto or true) and
    attention heads that divide by it; must divide the role's GPU count."""

    gradient_checkpointing: bool | Literal["auto"] = "auto"
    """Recompute activations in backward instead of storing them (less memory, about 30% more compute). `auto`:
    `false` on CPU; on CUDA `false` only when the activations of a whole mini-batch shard (longest sequences) fit
    in 25 % of the GPU's memory without it, else `true`."""


@dataclass
class CriticConfig:
    """The value model used by `gae`; built only when `model.path` is set (`cfg.needs_critic`)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """Critic weights (a value head is added on top); null means no critic."""

    optimizer: OptimizerConfig = field(default_factory=lambda: OptimizerConfig(lr=5.0e-6))
    """Optimizer and learning-rate schedule of the critic."""

    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    """Sharding of the critic."""

    sequence_parallel_size: int = 1
    """Ranks that split each packed sequence between them (Ulysses sequence parallelism, fsdp2 workers): they get
    the same rows, each runs the model on its slice of the tokens, and all-to-alls give every rank all tokens of
    its share of the attention heads. Needs packed micro-batches (`remove_microbatch_padding` auto or true) and
    attention heads that divide by it; must divide the role's GPU count."""

    gradient_checkpointing: bool | Literal["auto"] = "auto"
    """Recompute activations in backward instead of storing them; `auto` as for the policy."""
