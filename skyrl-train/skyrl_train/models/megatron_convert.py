"""Hugging Face <-> Megatron-core weight conversion for the Qwen2/Qwen3/Llama family (dense and MoE), and TP sharding.

Pure torch: nothing here imports megatron-core, so every function runs (and is tested) on CPU. Names on the
Megatron side are those of megatron-core's `GPTModel` built with the local (non-Transformer-Engine) layer spec
(`get_gpt_layer_local_spec`): separate `input_layernorm` / `pre_mlp_layernorm` modules, a fused `linear_qkv` and a
fused `linear_fc1`.

Layouts (read from megatron-core 0.16.1's `SelfAttention.get_query_key_value_tensors` and `MLP.forward`):
- `linear_qkv` rows are grouped by key/value head: for each of the `num_query_groups` groups, that group's query
  heads, then its key head, then its value head (`[q_g0 | k_0 | v_0 | q_g1 | k_1 | v_1 | ...]`); the bias likewise.
- `linear_fc1` of a gated MLP holds `[gate; up]` (`torch.chunk(x, 2, dim=-1)` gives gate first). Under tensor
  parallelism each rank holds `[gate_shard; up_shard]`, so a TP split is not a contiguous slice of the full tensor.
- Column-parallel layers (`linear_qkv`, `linear_fc1`, vocab-parallel embedding and output layer) split dim 0;
  row-parallel layers (`linear_proj`, `linear_fc2`) split dim 1; norms, biases of row-parallel layers and the MoE
  router are replicated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

HF_FAMILIES = ("qwen2", "qwen3", "llama", "mistral", "qwen2_moe", "qwen3_moe", "mixtral")
"""`model_type`s whose weights this module maps."""

COLUMN_PARALLEL = ("linear_qkv.weight", "linear_qkv.bias", "word_embeddings.weight", "output_layer.weight")
ROW_PARALLEL = ("linear_proj.weight", "linear_fc2.weight")
GATED_COLUMN_PARALLEL = ("linear_fc1.weight",)


@dataclass(frozen=True)
class GPTArch:
    """The architecture facts the conversion and the Megatron `TransformerConfig` need, read from an HF config."""

    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int
    tied_embeddings: bool
    qkv_bias: bool
    qk_layernorm: bool
    norm_epsilon: float
    rope_theta: float
    max_position_embeddings: int
    num_experts: int = 0
    """0 for a dense model."""
    moe_ffn_hidden_size: int = 0
    moe_router_topk: int = 0
    shared_expert_ffn_hidden_size: int = 0
    """Intermediate size of Qwen2-MoE's shared expert (0: none)."""
    normalize_topk_probs: bool = True
    """Whether the chosen experts' routing weights are renormalised to sum to 1 (Mixtral always; Qwen-MoE when its
    config's `norm_topk_prob` is true). Otherwise they are the softmax over all experts, read at the top k."""
    router_score_function: str = "softmax"
    """How the MoE router turns its logits into scores (every family mapped here: softmax)."""
    router_expert_bias: bool = False
    """Whether the MoE router adds a per-expert bias to its scores when choosing experts (none mapped here does)."""

    @property
    def is_moe(self) -> bool:
        """Whether the MLPs are mixtures of experts."""
        return self.num_experts > 0

    def padded_vocab_size(self, tensor_parallel_size: int) -> int:
        """Vocabulary rounded up to a multiple of the TP size (Megatron's vocab-parallel embedding needs it)."""
        return -(-self.vocab_size // tensor_parallel_size) * tensor_parallel_size


def _rope_theta(config: Any) -> float:
    parameters = getattr(config, "rope_parameters", None) or {}
    if "rope_theta" in parameters:
        return float(parameters["rope_theta"])
    return float(getattr(config, "rope_theta", 10000.0))


def arch_from_hf_config(config: Any) -> GPTArch:
    """`GPTArch` of a transformers config of the Qwen2/Qwen3/Llama/Mistral family or their MoE variants.

    Raises ValueError naming the unsupported `model_type` or feature (e.g. rope scaling, sliding window)."""
    model_type = getattr(config, "model_type", None)
    if model_type not in HF_FAMILIES:
        raise ValueError(
            f"model_type={model_type!r} has no Megatron weight mapping; supported: {', '.join(HF_FAMILIES)}"
        )
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
        raise ValueError(f"{model_type}: rope scaling {rope.get('rope_type')!r} is not mapped to Megatron yet")
    if getattr(config, "use_sliding_window", False):
        raise ValueError(f"{model_type}: sliding-window attention is not mapped to Megatron")
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        raise ValueError(
            f"{model_type}: attention_bias/mlp_bias (biases on o_proj or the MLP) are not mapped to Megatron"
        )
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    num_experts = int(getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None) or 0)
    moe_ffn = int(getattr(config, "moe_intermediate_size", None) or (config.intermediate_size if num_experts else 0))
    if model_type in ("qwen2_moe", "qwen3_moe"):
        sparse_every = getattr(config, "decoder_sparse_step", 1)
        if sparse_every != 1 or getattr(config, "mlp_only_layers", []):
            raise ValueError(f"{model_type}: dense layers between MoE layers (decoder_sparse_step/mlp_only_layers)")
    return GPTArch(
        model_type=model_type,
        num_layers=config.num_hidden_layers,
        hidden_size=config.hidden_size,
        num_attention_heads=heads,
        num_query_groups=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=head_dim,
        ffn_hidden_size=config.intermediate_size,
        vocab_size=config.vocab_size,
        tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        qkv_bias=model_type in ("qwen2", "qwen2_moe"),
        qk_layernorm=model_type in ("qwen3", "qwen3_moe"),
        norm_epsilon=float(config.rms_norm_eps),
        rope_theta=_rope_theta(config),
        max_position_embeddings=config.max_position_embeddings,
        num_experts=num_experts,
        moe_ffn_hidden_size=moe_ffn,
        moe_router_topk=int(getattr(config, "num_experts_per_tok", 0) or 0),
        shared_expert_ffn_hidden_size=int(getattr(config, "shared_expert_intermediate_size", 0) or 0),
        normalize_topk_probs=_normalizes_topk(config, model_type),
    )


def _normalizes_topk(config: Any, model_type: str) -> bool:
    """Mixtral renormalises the top-k routing weights; Qwen2/Qwen3-MoE only with `norm_topk_prob` (transformers'
    default for both is false: Qwen1.5-MoE keeps the raw softmax, Qwen3-30B-A3B's config sets it true)."""
    if model_type in ("qwen2_moe", "qwen3_moe"):
        return bool(getattr(config, "norm_topk_prob", False))
    return True


# ----- QKV and gate/up fusion -----------------------------------------------------------------------------------


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, arch: GPTArch) -> torch.Tensor:
    """HF q/k/v projections (weights [out, in] or biases [out]) -> Megatron's grouped `linear_qkv` layout."""
    groups, per_group, d = arch.num_query_groups, arch.num_attention_heads // arch.num_query_groups, arch.head_dim
    tail = q.shape[1:]
    q = q.reshape(groups, per_group * d, *tail)
    k = k.reshape(groups, d, *tail)
    v = v.reshape(groups, d, *tail)
    return torch.cat([q, k, v], dim=1).reshape(groups * (per_group + 2) * d, *tail)


def split_qkv(qkv: torch.Tensor, arch: GPTArch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Megatron `linear_qkv` (weight or bias) -> HF (q, k, v); the inverse of `fuse_qkv`."""
    groups, per_group, d = arch.num_query_groups, arch.num_attention_heads // arch.num_query_groups, arch.head_dim
    tail = qkv.shape[1:]
    grouped = qkv.reshape(groups, (per_group + 2) * d, *tail)
    q, k, v = torch.split(grouped, [per_group * d, d, d], dim=1)
    return (
        q.reshape(groups * per_group * d, *tail),
        k.reshape(groups * d, *tail),
        v.reshape(groups * d, *tail),
    )


# ----- whole state dicts ------------------------------------------------------------------------------------------


def _mlp_pairs(hf_prefix: str, mc_prefix: str) -> dict[str, tuple[str, ...]]:
    return {
        f"{mc_prefix}.linear_fc1.weight": (f"{hf_prefix}.gate_proj.weight", f"{hf_prefix}.up_proj.weight"),
        f"{mc_prefix}.linear_fc2.weight": (f"{hf_prefix}.down_proj.weight",),
    }


def name_map(arch: GPTArch) -> dict[str, tuple[str, ...]]:
    """Every Megatron parameter name except the routed experts' -> the HF names it is made of (2 for gate/up, 3 for
    q/k/v, else 1). Routed experts: see `expert_names`."""
    names: dict[str, tuple[str, ...]] = {"embedding.word_embeddings.weight": ("model.embed_tokens.weight",)}
    for i in range(arch.num_layers):
        hf, mc = f"model.layers.{i}", f"decoder.layers.{i}"
        attention = f"{hf}.self_attn"
        names[f"{mc}.input_layernorm.weight"] = (f"{hf}.input_layernorm.weight",)
        names[f"{mc}.self_attention.linear_qkv.weight"] = tuple(f"{attention}.{p}_proj.weight" for p in "qkv")
        if arch.qkv_bias:
            names[f"{mc}.self_attention.linear_qkv.bias"] = tuple(f"{attention}.{p}_proj.bias" for p in "qkv")
        if arch.qk_layernorm:
            names[f"{mc}.self_attention.q_layernorm.weight"] = (f"{attention}.q_norm.weight",)
            names[f"{mc}.self_attention.k_layernorm.weight"] = (f"{attention}.k_norm.weight",)
        names[f"{mc}.self_attention.linear_proj.weight"] = (f"{attention}.o_proj.weight",)
        names[f"{mc}.pre_mlp_layernorm.weight"] = (f"{hf}.post_attention_layernorm.weight",)
        if not arch.is_moe:
            names.update(_mlp_pairs(f"{hf}.mlp", f"{mc}.mlp"))
            continue
        names[f"{mc}.mlp.router.weight"] = (f"{hf}.mlp.gate.weight",)
        if arch.shared_expert_ffn_hidden_size:
            names.update(_mlp_pairs(f"{hf}.mlp.shared_expert", f"{mc}.mlp.shared_experts"))
            names[f"{mc}.mlp.shared_experts.gate_weight"] = (f"{hf}.mlp.shared_expert_gate.weight",)
    names["decoder.final_layernorm.weight"] = ("model.norm.weight",)
    if not arch.tied_embeddings:
        names["output_layer.weight"] = ("lm_head.weight",)
    return names


def expert_names(arch: GPTArch) -> list[tuple[str, str, str, str]]:
    """Per MoE layer: (HF `experts.gate_up_proj`, HF `experts.down_proj`, Megatron fc1 and fc2 name patterns with
    `{e}` for the expert index). transformers 5 keeps a layer's experts fused in 3-D tensors, `gate_up_proj`
    [experts, 2 * ffn, hidden] (gate rows first, like Megatron's `linear_fc1`) and `down_proj` [experts, hidden, ffn];
    megatron-core's `SequentialMLP` holds one `local_experts.{e}` MLP per expert."""
    if not arch.is_moe:
        return []
    return [
        (
            f"model.layers.{i}.mlp.experts.gate_up_proj",
            f"model.layers.{i}.mlp.experts.down_proj",
            f"decoder.layers.{i}.mlp.experts.local_experts.{{e}}.linear_fc1.weight",
            f"decoder.layers.{i}.mlp.experts.local_experts.{{e}}.linear_fc2.weight",
        )
        for i in range(arch.num_layers)
    ]


def hf_to_megatron(
    hf_state: dict[str, torch.Tensor], arch: GPTArch, tensor_parallel_size: int = 1
) -> dict[str, torch.Tensor]:
    """The full (unsharded) Megatron state dict of an HF state dict; the vocabulary rows are zero-padded to a
    multiple of `tensor_parallel_size`. Raises KeyError naming missing HF tensors, ValueError naming unused ones."""
    mapping = name_map(arch)
    experts = expert_names(arch)
    expected = {name for sources in mapping.values() for name in sources}
    expected |= {name for gate_up, down, _, _ in experts for name in (gate_up, down)}
    ignored = {"lm_head.weight"} if arch.tied_embeddings else set()
    missing = sorted(expected - set(hf_state))
    if missing:
        raise KeyError(f"HF state dict lacks {len(missing)} tensors the {arch.model_type} mapping needs: {missing[:5]}")
    unused = sorted(set(hf_state) - expected - ignored - {n for n in hf_state if n.endswith("rotary_emb.inv_freq")})
    if unused:
        raise ValueError(f"HF tensors with no Megatron counterpart ({arch.model_type} mapping): {unused[:5]}")
    out: dict[str, torch.Tensor] = {}
    for mc_name, sources in mapping.items():
        tensors = [hf_state[name] for name in sources]
        if len(tensors) == 3:
            out[mc_name] = fuse_qkv(*tensors, arch)
        elif len(tensors) == 2:
            out[mc_name] = torch.cat(tensors, dim=0)
        else:
            out[mc_name] = tensors[0].clone()
    for gate_up, down, fc1, fc2 in experts:
        if hf_state[gate_up].shape[0] != arch.num_experts:
            raise ValueError(f"{gate_up} holds {hf_state[gate_up].shape[0]} experts, the config {arch.num_experts}")
        for e in range(arch.num_experts):
            out[fc1.format(e=e)] = hf_state[gate_up][e].clone()
            out[fc2.format(e=e)] = hf_state[down][e].clone()
    padded = arch.padded_vocab_size(tensor_parallel_size)
    for name in ("embedding.word_embeddings.weight", "output_layer.weight"):
        if name in out and padded > arch.vocab_size:
            extra = torch.zeros(padded - arch.vocab_size, arch.hidden_size, dtype=out[name].dtype)
            out[name] = torch.cat([out[name], extra])
    return out


def megatron_to_hf(mc_state: dict[str, torch.Tensor], arch: GPTArch) -> dict[str, torch.Tensor]:
    """The HF state dict of a full Megatron state dict (vocab padding dropped). With tied embeddings,
    `lm_head.weight` is emitted as the embedding (as `PreTrainedModel.state_dict()` lists it)."""
    out: dict[str, torch.Tensor] = {}
    for mc_name, targets in name_map(arch).items():
        if mc_name not in mc_state:
            raise KeyError(f"Megatron state dict lacks {mc_name!r} ({arch.model_type} mapping)")
        tensor = mc_state[mc_name]
        if mc_name in ("embedding.word_embeddings.weight", "output_layer.weight"):
            tensor = tensor[: arch.vocab_size]
        if len(targets) == 3:
            parts = split_qkv(tensor, arch)
        elif len(targets) == 2:
            parts = tuple(torch.chunk(tensor, 2, dim=0))
        else:
            parts = (tensor,)
        for name, part in zip(targets, parts):
            out[name] = part.clone()
    for gate_up, down, fc1, fc2 in expert_names(arch):
        out[gate_up] = torch.stack([mc_state[fc1.format(e=e)] for e in range(arch.num_experts)])
        out[down] = torch.stack([mc_state[fc2.format(e=e)] for e in range(arch.num_experts)])
    if arch.tied_embeddings:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out


# ----- tensor and expert parallel sharding ------------------------------------------------------------------------

_EXPERT = re.compile(r"\.mlp\.experts\.local_experts\.(\d+)\.")


def tp_split_kind(name: str) -> str:
    """How `name` is split across TP ranks: `column` (dim 0), `gated_column` (dim 0 of gate and of up), `row`
    (dim 1) or `replicated`."""
    if name.endswith(GATED_COLUMN_PARALLEL):
        return "gated_column"
    if name.endswith(COLUMN_PARALLEL):
        return "column"
    if name.endswith(ROW_PARALLEL):
        return "row"
    return "replicated"


def check_tensor_parallel(arch: GPTArch, tensor_parallel_size: int, expert_tensor_parallel_size: int = 0) -> None:
    """Raise ValueError (naming the key) when `tensor_parallel_size` cannot split this model's heads/MLPs, or
    `expert_tensor_parallel_size` (0: the tensor-parallel size) its experts."""
    key = "trainer.<role>.megatron.tensor_model_parallel_size"
    for what, count in (
        ("num_attention_heads", arch.num_attention_heads),
        ("num_key_value_heads", arch.num_query_groups),
        ("intermediate_size", arch.ffn_hidden_size),
    ):
        if count % tensor_parallel_size:
            raise ValueError(f"{key}={tensor_parallel_size} does not divide the model's {what}={count}")
    expert_tp = expert_tensor_parallel_size or tensor_parallel_size
    if arch.moe_ffn_hidden_size and arch.moe_ffn_hidden_size % expert_tp:
        key = "trainer.<role>.megatron." + (
            "expert_tensor_parallel_size" if expert_tensor_parallel_size else "tensor_model_parallel_size"
        )
        raise ValueError(
            f"{key}={expert_tp} does not divide the model's moe_intermediate_size={arch.moe_ffn_hidden_size}"
        )


def shard_tensor(name: str, tensor: torch.Tensor, tensor_parallel_size: int, rank: int) -> torch.Tensor:
    """Rank `rank`'s TP shard of the full Megatron tensor `name`."""
    kind = tp_split_kind(name)
    if kind == "column":
        return torch.chunk(tensor, tensor_parallel_size, dim=0)[rank].clone()
    if kind == "row":
        return torch.chunk(tensor, tensor_parallel_size, dim=1)[rank].clone()
    if kind == "gated_column":
        gate, up = torch.chunk(tensor, 2, dim=0)
        return torch.cat(
            [torch.chunk(gate, tensor_parallel_size, dim=0)[rank], torch.chunk(up, tensor_parallel_size, dim=0)[rank]]
        )
    return tensor.clone()


def gather_tensor(name: str, shards: list[torch.Tensor]) -> torch.Tensor:
    """The full tensor `name` from its TP shards in rank order; the inverse of `shard_tensor`."""
    kind = tp_split_kind(name)
    if kind == "column":
        return torch.cat(shards, dim=0)
    if kind == "row":
        return torch.cat(shards, dim=1)
    if kind == "gated_column":
        halves = [torch.chunk(shard, 2, dim=0) for shard in shards]
        return torch.cat([torch.cat([h[0] for h in halves]), torch.cat([h[1] for h in halves])])
    return shards[0]


def shard_state(
    mc_state: dict[str, torch.Tensor],
    tensor_parallel_size: int,
    tp_rank: int,
    expert_parallel_size: int = 1,
    ep_rank: int = 0,
    expert_tensor_parallel_size: int | None = None,
    etp_rank: int | None = None,
) -> dict[str, torch.Tensor]:
    """This (TP rank, EP rank, expert-TP rank)'s part of a full Megatron state dict, with local expert indices
    renumbered from 0 (megatron-core's `SequentialMLP` names its experts by local index). The experts' weights split
    over `expert_tensor_parallel_size` ranks (None: the tensor-parallel size and rank)."""
    if expert_tensor_parallel_size is None:
        expert_tensor_parallel_size, etp_rank = tensor_parallel_size, tp_rank
    out: dict[str, torch.Tensor] = {}
    for name, tensor in mc_state.items():
        match = _EXPERT.search(name)
        if match is None:
            out[name] = shard_tensor(name, tensor, tensor_parallel_size, tp_rank)
            continue
        expert = int(match.group(1))
        per_rank = _experts_per_rank(mc_state, expert_parallel_size)
        if expert // per_rank != ep_rank:
            continue
        name = _EXPERT.sub(f".mlp.experts.local_experts.{expert - ep_rank * per_rank}.", name)
        out[name] = shard_tensor(name, tensor, expert_tensor_parallel_size, etp_rank)
    return out


def is_expert_parameter(name: str) -> bool:
    """True for a routed expert's Megatron parameter (`...mlp.experts.local_experts.<e>...`)."""
    return _EXPERT.search(name) is not None


def _experts_per_rank(mc_state: dict[str, torch.Tensor], expert_parallel_size: int) -> int:
    experts = {int(m.group(1)) for name in mc_state if (m := _EXPERT.search(name))}
    if len(experts) % expert_parallel_size:
        raise ValueError(
            f"trainer.<role>.megatron.expert_model_parallel_size={expert_parallel_size} does not divide the "
            f"{len(experts)} experts"
        )
    return len(experts) // expert_parallel_size


def gather_state(shards: list[list[dict[str, torch.Tensor]]]) -> dict[str, torch.Tensor]:
    """The full Megatron state dict from `shards[ep_rank][tp_rank]` (inverse of `shard_state`)."""
    expert_parallel_size = len(shards)
    out: dict[str, torch.Tensor] = {}
    for ep_rank, tp_shards in enumerate(shards):
        local_experts = {int(m.group(1)) for name in tp_shards[0] if (m := _EXPERT.search(name))}
        per_rank = len(local_experts)
        for name in tp_shards[0]:
            full = gather_tensor(name, [shard[name] for shard in tp_shards])
            match = _EXPERT.search(name)
            if match is not None:
                name = _EXPERT.sub(f".mlp.experts.local_experts.{int(match.group(1)) + ep_rank * per_rank}.", name)
            elif ep_rank > 0:
                continue
            out[name] = full
    if expert_parallel_size > 1 and not any(_EXPERT.search(n) for n in out):
        raise ValueError("expert_parallel_size > 1 but the shards hold no experts")
    return out


def strip_extra_state(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A Megatron module state dict without its `_extra_state` entries (FP8/TE metadata, None on the local spec)."""
    return {name: value for name, value in state.items() if not name.endswith("._extra_state")}
