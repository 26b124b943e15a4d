"""The `auto` values of the speed settings: chosen once per run from the model's size, the world size and the device.

A key set to `auto` gets the value a tuned run would use, and `--dry-run` prints each choice with its reason:

- `trainer.<role>.fsdp.mixed_precision.param_dtype` (and `generator.inference_engine.model_dtype`, which follows the
  policy's): `bfloat16` on CUDA; on a CPU `bfloat16` only when it has native bfloat16 dot products (`avx512_bf16`,
  `amx_bf16`, Arm's `bf16`) and the model has at least `BF16_CPU_MIN_PARAMETERS` parameters, where bfloat16 matmuls
  run faster than float32 ones (half the bytes per weight); `float32` on other CPUs (bfloat16 is emulated there) and
  for smaller models (their weights stay in the caches, and bfloat16's elementwise work costs more than it saves);
- `trainer.<role>.fsdp.reshard_after_forward`: `false` (keep the gathered parameters from forward to backward, one
  all-gather less per micro-batch) when there is one rank, or when a full copy of the model in its compute dtype
  takes at most `FULL_COPY_SHARE` of a rank's memory; `true` otherwise or when the size is not known;
- `trainer.<role>.fsdp.shard_layers`: one FSDP unit (one gather and one gradient reduction per pass, no per-layer
  hooks) with one rank, or on CPU for a model whose full copy fits the same share: gloo collectives on a CPU do not
  overlap compute, so per-layer units only add calls; per-layer units on GPUs, where each layer's all-gather
  overlaps the previous layer's compute;
- `trainer.<role>.gradient_checkpointing`: `false` on CPU (host memory holds the activations; recomputing them costs
  about a third more compute); on CUDA `false` only when a whole mini-batch shard's activations fit
  `ACTIVATION_SHARE` of the GPU's memory without it, else `true`;
- `trainer.micro_train_batch_size_per_gpu` / `micro_forward_batch_size_per_gpu`: the most rows, dividing the rank's
  mini-batch shard, whose longest possible sequences fit a token budget: `ACTIVATION_SHARE` of a rank's memory over
  the activation bytes of one token, at most `MAX_TOKENS_PER_MICRO_BATCH` (fewer, larger passes: fewer FSDP
  collectives and better matmul shapes, with a bounded activation peak);
- `generator.batched`: `true` when rollouts are single-turn with the built-in env loop (one engine call for the whole
  batch instead of one agent loop per trajectory).

A rank's memory is the GPU's (when this process sees one) or the host's divided among the processes holding a model
on a node. Model facts come from the model's `config.json` and safetensors headers, read without loading weights,
from a local folder or the Hugging Face cache (never the network); when they cannot be read, the conservative
choice is taken and the reason says so. `resolve_auto_settings` returns a copy of the config with every `auto`
replaced, which is what a run uses (`BasePPOExp` resolves once, at start-up).
"""

from __future__ import annotations

import copy
import json
import math
import os
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

AUTO = "auto"
"""The value that asks for a choice made here."""

FULL_COPY_SHARE = 0.10
"""A full copy of the model (in its compute dtype) at most this share of a rank's memory counts as small: its
parameters may stay gathered between forward and backward, and on CPU the model is one FSDP unit."""

ACTIVATION_SHARE = 0.25
"""The share of a rank's memory the activations of one training micro-batch may take."""

MAX_TOKENS_PER_MICRO_BATCH = 16384
"""Upper bound of the micro-batch token budget: beyond it a pass gains little throughput and only adds memory."""

BF16_CPU_MIN_PARAMETERS = 5_000_000
"""Smallest model that computes in bfloat16 on a CPU with native bfloat16 dot products. bfloat16 over float32 speed
on one core of an avx512_bf16 CPU (`benchmarks/cpu_bf16.py`): an engine decoding 8 rows (attending in float32) 0.79x
at 1.4 M parameters, 1.23x at 7.7 M, 1.43x at 21 M; a packed training forward and backward 1.33x, 1.46x, 1.58x."""

CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")
"""`/proc/cpuinfo` flags of native bfloat16 dot products: Intel AMX, AVX-512 BF16 (Intel, AMD Zen 4+), Arm's BF16."""

UNKNOWN_SIZE_TOKENS = 4096
"""The micro-batch token budget when the model's size or the rank's memory is not known."""

TRAINED_ROLES = ("policy", "critic")
FSDP_ROLES = ("policy", "ref", "critic", "reward")
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1}


@dataclass(frozen=True)
class ModelFacts:
    """What the choices need to know about a model, read from its files without loading it."""

    num_parameters: int
    num_layers: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    source: str
    """Where the facts come from (for the printed reasons)."""

    def full_copy_bytes(self, dtype: str) -> int:
        """Bytes of every parameter in `dtype`."""
        return self.num_parameters * _DTYPE_BYTES[dtype]

    def activation_bytes_per_token(self, dtype: str, checkpointing: bool) -> int:
        """Activation bytes one training token keeps for backward: per decoder layer about `11 * hidden + 4 *
        intermediate` values (norms, q/k/v, attention output, residuals, the MLP's gate/up/activation), only the
        layer inputs plus one layer's worth with checkpointing; plus ~12 bytes per vocabulary entry for the float32
        logits, their log-softmax and its gradient."""
        per_layer = 11 * self.hidden_size + 4 * self.intermediate_size
        values = (self.num_layers * self.hidden_size + per_layer) if checkpointing else self.num_layers * per_layer
        return values * _DTYPE_BYTES[dtype] + 12 * self.vocab_size


@dataclass(frozen=True)
class Machine:
    """The device the workers use and the memory of one of its ranks' devices (None: not known here)."""

    device: str
    memory_bytes: Optional[int]
    """GPU memory per device on CUDA; the host's memory on CPU (shared by the processes of a node)."""
    source: str
    cpu_bf16: Optional[str] = None
    """The CPU feature that gives native bfloat16 dot products (one of `CPU_BF16_FLAGS`), None when it has none or
    is not known (not read on CUDA)."""

    @classmethod
    def detect(cls, device: str) -> Machine:
        """This process's view: the first GPU's memory on CUDA (None when it sees no GPU), else the host's memory."""
        if device == "cuda":
            import torch

            if torch.cuda.is_available():
                props = torch.cuda.get_device_properties(0)
                return cls("cuda", int(props.total_memory), f"GPU 0 ({props.name})")
            return cls("cuda", None, "no GPU visible to this process")
        bf16 = cpu_bf16_flag()
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return cls("cpu", None, "host memory unknown", bf16)
        return cls("cpu", int(memory), "host memory", bf16)


def cpu_bf16_flag(cpuinfo: Path = Path("/proc/cpuinfo")) -> Optional[str]:
    """The first of `CPU_BF16_FLAGS` this CPU lists in `cpuinfo` (x86 `flags`, Arm `Features`), None when it lists
    none or the file cannot be read (e.g. not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    listed: set[str] = set()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            listed.update(value.split())
    return next((flag for flag in CPU_BF16_FLAGS if flag in listed), None)


@dataclass(frozen=True)
class AutoChoice:
    """One resolved `auto` key: its value and why."""

    key: str
    value: Any
    reason: str
    used: bool = True
    """False for the settings of a role this run does not build (resolved all the same, not printed)."""


# ----- model facts ---------------------------------------------------------------------------------------------------
def _local_file(path: str, name: str) -> Optional[Path]:
    """`name` inside the model folder `path`, or inside the Hugging Face cache for a hub id (no network)."""
    local = Path(os.path.expanduser(path))
    if local.is_dir():
        candidate = local / name
        return candidate if candidate.is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(path, name)
    except Exception:  # an id the cache cannot even parse: treat as not cached
        return None
    return Path(found) if isinstance(found, str) else None


def _safetensors_parameters(path: str) -> Optional[int]:
    """Parameter count from the safetensors headers (one file or the shards of an index); None when absent."""
    index = _local_file(path, "model.safetensors.index.json")
    if index is not None:
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        files = [_local_file(path, shard) for shard in shards]
    else:
        files = [_local_file(path, "model.safetensors")]
    if not files or any(file is None for file in files):
        return None
    total = 0
    for file in files:
        with open(file, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        total += sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
    return total


def _estimated_parameters(config: dict[str, Any]) -> int:
    """Parameter count of a decoder-only transformer from its config (attention, gated MLP, embeddings)."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads = config.get("num_attention_heads") or max(1, hidden // 64)
    head_dim = config.get("head_dim") or hidden // heads
    kv_heads = config.get("num_key_value_heads") or heads
    intermediate = config.get("intermediate_size") or 4 * hidden
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    embeddings = config["vocab_size"] * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
    return layers * (attention + 3 * hidden * intermediate + 2 * hidden) + embeddings + hidden


@lru_cache(maxsize=32)
def read_model_facts(path: Optional[str]) -> tuple[Optional[ModelFacts], str]:
    """(facts, "") for the model at `path` (a local folder or a cached hub id), or (None, why not)."""
    if not path:
        return None, "no model path"
    config_file = _local_file(path, "config.json")
    if config_file is None:
        return None, f"no config.json for {path} on this machine (not a local folder, not in the Hugging Face cache)"
    try:
        config = json.loads(config_file.read_text())
        config = config.get("text_config", config) if "hidden_size" not in config else config
        counted = _safetensors_parameters(path)
        source = "safetensors headers" if counted is not None else "estimated from config.json"
        facts = ModelFacts(
            num_parameters=counted if counted is not None else _estimated_parameters(config),
            num_layers=int(config["num_hidden_layers"]),
            hidden_size=int(config["hidden_size"]),
            intermediate_size=int(config.get("intermediate_size") or 4 * config["hidden_size"]),
            vocab_size=int(config["vocab_size"]),
            source=source,
        )
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        return None, f"cannot read the size of {path}: {exc!r}"
    return facts, ""


# ----- the rules -----------------------------------------------------------------------------------------------------
def _mb(num_bytes: float) -> str:
    return f"{num_bytes / 2**20:.0f} MiB" if num_bytes < 2**30 else f"{num_bytes / 2**30:.1f} GiB"


def _role_path(cfg: Any, role: str) -> Optional[str]:
    return {
        "policy": cfg.trainer.policy.model.path,
        "ref": cfg.ref_model_path,
        "critic": cfg.trainer.critic.model.path,
        "reward": cfg.reward.model.path,
    }[role]


def _role_section(cfg: Any, role: str) -> Any:
    return cfg.reward.model if role == "reward" else getattr(cfg.trainer, role)


def _used_fsdp_roles(cfg: Any) -> list[str]:
    roles = ["policy"]
    if cfg.needs_ref_model and not cfg.ref_is_policy_base:
        roles.append("ref")
    if cfg.needs_critic:
        roles.append("critic")
    if cfg.needs_reward_model:
        roles.append("reward")
    return roles


def processes_per_node(cfg: Any) -> int:
    """Processes holding a model on one node: every used role's ranks per node, plus the engines on it."""
    placement = cfg.trainer.placement
    ranks = sum(getattr(placement, f"{role}_num_gpus_per_node") for role in _used_fsdp_roles(cfg))
    engines = cfg.generator.inference_engine.num_engines * cfg.generator.inference_engine.tensor_parallel_size
    nodes = placement.policy_num_nodes if placement.colocate_all else 1
    return max(1, ranks + math.ceil(engines / max(1, nodes)))


def rank_memory(cfg: Any, machine: Machine) -> tuple[Optional[int], str]:
    """(bytes of memory one rank may count on, how that was found)."""
    if machine.memory_bytes is None:
        return None, machine.source
    if machine.device == "cuda":
        return machine.memory_bytes, f"{_mb(machine.memory_bytes)} ({machine.source})"
    processes = processes_per_node(cfg)
    share = machine.memory_bytes // processes
    return share, f"{_mb(share)} ({_mb(machine.memory_bytes)} of {machine.source} / {processes} model processes)"


def _param_dtype(cfg: Any, role: str, machine: Machine, facts: Optional[ModelFacts]) -> str:
    value = _role_section(cfg, role).fsdp.mixed_precision.param_dtype
    return value if value != AUTO else choose_compute_dtype(machine, facts)[0]


def choose_compute_dtype(machine: Machine, facts: Optional[ModelFacts]) -> tuple[str, str]:
    """`auto`'s compute dtype (`param_dtype`, and the engines' through the policy's) for a model on `machine`, and
    why: bfloat16 on CUDA, and on a CPU with native bfloat16 for a model of at least `BF16_CPU_MIN_PARAMETERS`."""
    if machine.device == "cuda":
        return "bfloat16", "CUDA: bfloat16 compute, float32 master weights and gradient reduction"
    if machine.cpu_bf16 is None:
        return (
            "float32",
            "CPU without native bfloat16 dot products: bfloat16 matmuls would run slower than float32 ones",
        )
    smallest = f"{BF16_CPU_MIN_PARAMETERS / 1e6:g} M parameters"
    if facts is None:
        return "float32", f"model size unknown: bfloat16 pays on this CPU ({machine.cpu_bf16}) from {smallest}"
    size = f"{facts.num_parameters / 1e6:.1f} M parameters"
    if facts.num_parameters < BF16_CPU_MIN_PARAMETERS:
        return "float32", (
            f"{size}, under {smallest}: bfloat16 does not pay at this size even on a CPU with native bfloat16 "
            f"({machine.cpu_bf16})"
        )
    return "bfloat16", (
        f"CPU with native bfloat16 dot products ({machine.cpu_bf16}) and {size} (at least {smallest}): bfloat16 "
        "matmuls run faster than float32 ones; float32 master weights and gradient reduction"
    )


def _choose_reshard(
    world: int,
    facts: Optional[ModelFacts],
    why_not: str,
    memory: Optional[int],
    mem_note: str,
    dtype: str,
) -> tuple[bool, str]:
    if world == 1:
        return False, "one rank: its parameters are never gathered again for backward"
    if facts is None:
        return True, f"model size unknown ({why_not}): free the gathered parameters after forward"
    if memory is None:
        return True, f"memory per rank unknown ({mem_note}): free the gathered parameters after forward"
    full = facts.full_copy_bytes(dtype)
    if full <= FULL_COPY_SHARE * memory:
        return False, (
            f"a full copy ({facts.num_parameters / 1e6:.1f} M parameters, {_mb(full)} in {dtype}) is at most "
            f"{FULL_COPY_SHARE:.0%} of a rank's {mem_note}: keep it gathered, one all-gather less per micro-batch"
        )
    return True, f"a full copy ({_mb(full)} in {dtype}) exceeds {FULL_COPY_SHARE:.0%} of a rank's {mem_note}"


def _choose_shard_layers(
    world: int, device: str, facts: Optional[ModelFacts], memory: Optional[int], mem_note: str, dtype: str
) -> tuple[bool, str]:
    if world == 1:
        return False, "one rank: per-layer units would only add hooks"
    if device == "cuda":
        return True, "CUDA: each layer's all-gather overlaps the previous layer's compute"
    if facts is None or memory is None:
        return True, "model size or memory unknown: per-layer units bound the gathered parameters"
    full = facts.full_copy_bytes(dtype)
    if full <= FULL_COPY_SHARE * memory:
        return False, (
            f"CPU (gloo collectives do not overlap compute) and a full copy ({_mb(full)}) is at most "
            f"{FULL_COPY_SHARE:.0%} of a rank's {mem_note}: one unit, one gather and one reduction per pass"
        )
    return True, f"a full copy ({_mb(full)}) exceeds {FULL_COPY_SHARE:.0%} of a rank's {mem_note}: per-layer units"


def max_sequence_length(cfg: Any) -> int:
    """The longest sequence a training row can have: prompt (or multi-turn input) plus one generation budget."""
    prompt = cfg.data.max_prompt_length if cfg.generator.max_turns == 1 else cfg.max_input_length
    return prompt + cfg.generator.sampling_params.max_generate_length


def shard_rows(cfg: Any) -> int:
    """Rows of one mini-batch on one data-parallel rank that every trained role's micro-batch must divide."""
    from skyrl_train.config.validation import role_data_parallel_size

    samples = cfg.generator.n_samples_per_prompt
    rows = [cfg.trainer.policy_mini_batch_size * samples // max(1, role_data_parallel_size(cfg, "policy"))]
    if cfg.needs_critic:
        rows.append(cfg.trainer.critic_mini_batch_size * samples // max(1, role_data_parallel_size(cfg, "critic")))
    return max(1, math.gcd(*rows))


def _largest_divisor_within(rows: int, limit: int) -> int:
    return max(d for d in range(1, rows + 1) if rows % d == 0 and d <= max(1, limit))


def _choose_checkpointing(
    cfg: Any, machine: Machine, facts: Optional[ModelFacts], memory: Optional[int], mem_note: str, dtype: str
) -> tuple[bool, str]:
    if machine.device != "cuda":
        return False, "CPU: activations live in host memory; recomputing them costs about a third more compute"
    if facts is None or memory is None:
        return True, "model size or GPU memory unknown: recompute activations to bound memory"
    tokens = shard_rows(cfg) * max_sequence_length(cfg)
    needed = tokens * facts.activation_bytes_per_token(dtype, checkpointing=False)
    if needed <= ACTIVATION_SHARE * memory:
        return False, (
            f"a whole mini-batch shard ({tokens} tokens) keeps {_mb(needed)} of activations, within "
            f"{ACTIVATION_SHARE:.0%} of the GPU's {mem_note}"
        )
    return (
        True,
        f"a mini-batch shard's activations ({_mb(needed)}) exceed {ACTIVATION_SHARE:.0%} of the GPU's {mem_note}",
    )


def _token_budget(
    facts: Optional[ModelFacts], memory: Optional[int], mem_note: str, dtype: str, checkpointing: bool
) -> tuple[int, str]:
    if facts is None or memory is None:
        return UNKNOWN_SIZE_TOKENS, f"model size or memory unknown: a {UNKNOWN_SIZE_TOKENS}-token budget"
    per_token = facts.activation_bytes_per_token(dtype, checkpointing)
    fits = int(ACTIVATION_SHARE * memory // per_token)
    budget = max(1, min(MAX_TOKENS_PER_MICRO_BATCH, fits))
    note = f"{ACTIVATION_SHARE:.0%} of a rank's {mem_note} at ~{per_token / 1024:.0f} KiB of activations a token"
    if fits > MAX_TOKENS_PER_MICRO_BATCH:
        note += f" allows {fits} tokens, capped at {MAX_TOKENS_PER_MICRO_BATCH}"
    return budget, f"a {budget}-token budget ({note})"


def auto_choices(cfg: Any, machine: Machine, facts_of: Any = read_model_facts) -> list[AutoChoice]:
    """Every `auto` key of `cfg` with the value chosen for `machine` and the reason (keys set by hand are left out).

    `facts_of(path) -> (ModelFacts | None, why not)` reads a model's size (tests pass their own)."""
    from skyrl_train.config.validation import role_world_size

    choices: list[AutoChoice] = []
    memory, mem_note = rank_memory(cfg, machine)
    policy_facts, policy_why = facts_of(cfg.trainer.policy.model.path)
    dtypes: dict[str, str] = {}
    for role in FSDP_ROLES:
        section = _role_section(cfg, role)
        prefix = "reward.model" if role == "reward" else f"trainer.{role}"
        used = role in _used_fsdp_roles(cfg)
        facts, why_not = facts_of(_role_path(cfg, role)) if used else (None, "role not used")
        dtype = dtypes[role] = _param_dtype(cfg, role, machine, facts)
        world = role_world_size(cfg, role)
        fsdp = section.fsdp
        if fsdp.mixed_precision.param_dtype == AUTO:
            value, reason = choose_compute_dtype(machine, facts)
            choices.append(AutoChoice(f"{prefix}.fsdp.mixed_precision.param_dtype", value, reason, used))
        if fsdp.reshard_after_forward == AUTO:
            value, reason = _choose_reshard(world, facts, why_not, memory, mem_note, dtype)
            choices.append(AutoChoice(f"{prefix}.fsdp.reshard_after_forward", value, reason, used))
        if fsdp.shard_layers == AUTO:
            value, reason = _choose_shard_layers(world, machine.device, facts, memory, mem_note, dtype)
            choices.append(AutoChoice(f"{prefix}.fsdp.shard_layers", value, reason, used))
    checkpointing = {}
    for role in TRAINED_ROLES:
        section = getattr(cfg.trainer, role)
        facts = policy_facts if role == "policy" else facts_of(_role_path(cfg, role))[0]
        dtype = dtypes[role]
        if section.gradient_checkpointing == AUTO:
            value, reason = _choose_checkpointing(cfg, machine, facts, memory, mem_note, dtype)
            used = role == "policy" or cfg.needs_critic
            choices.append(AutoChoice(f"trainer.{role}.gradient_checkpointing", value, reason, used))
            checkpointing[role] = value
        else:
            checkpointing[role] = bool(section.gradient_checkpointing)
    micro_keys = [
        key
        for key in ("micro_train_batch_size_per_gpu", "micro_forward_batch_size_per_gpu")
        if getattr(cfg.trainer, key) == AUTO
    ]
    if micro_keys:
        rows, longest = shard_rows(cfg), max_sequence_length(cfg)
        budget, budget_note = _token_budget(
            policy_facts if policy_facts else None,
            memory,
            mem_note,
            dtypes["policy"],
            checkpointing["policy"],
        )
        if policy_facts is None:
            budget_note += f" ({policy_why})"
        micro = _largest_divisor_within(rows, budget // longest)
        whole = "the whole shard" if micro == rows else f"the largest divisor of the {rows}-row shard within it"
        reason = f"{micro} rows x {longest} tokens at most (prompt + generation) fit {budget_note}: {whole}"
        for key in micro_keys:
            choices.append(AutoChoice(f"trainer.{key}", micro, reason))
    engine = cfg.generator.inference_engine
    if engine.model_dtype == AUTO:
        value = dtypes["policy"]
        choices.append(
            AutoChoice(
                "generator.inference_engine.model_dtype",
                value,
                "the policy's compute dtype: rollout and trainer log-probs come from the same precision",
            )
        )
    generator = cfg.generator
    if generator.batched == AUTO:
        single = (
            generator.max_turns == 1 and generator.workflow in (None, "env") and not generator.step_wise_trajectories
        )
        reason = (
            "single-turn rollouts with the built-in env loop: one engine call for the whole batch"
            if single
            else "multi-turn, step-wise or workflow rollouts run one agent loop per trajectory"
        )
        choices.append(AutoChoice("generator.batched", single, reason))
    return choices


def _set_path(data: dict[str, Any], key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    for name in parents:
        data = data[name]
    data[leaf] = value


def auto_keys(cfg: Any) -> list[str]:
    """The keys of `cfg` this module resolves that are still `auto`."""
    keys = []
    for role in FSDP_ROLES:
        prefix = "reward.model" if role == "reward" else f"trainer.{role}"
        keys += [f"{prefix}.fsdp.{name}" for name in ("reshard_after_forward", "shard_layers")]
        keys.append(f"{prefix}.fsdp.mixed_precision.param_dtype")
    keys += [f"trainer.{role}.gradient_checkpointing" for role in TRAINED_ROLES]
    keys += ["trainer.micro_train_batch_size_per_gpu", "trainer.micro_forward_batch_size_per_gpu"]
    keys += ["generator.inference_engine.model_dtype", "generator.batched"]
    return [key for key in keys if _get_path(cfg, key) == AUTO]


def _get_path(cfg: Any, key: str) -> Any:
    value = cfg
    for name in key.split("."):
        value = getattr(value, name)
    return value


def resolve_auto_settings(
    cfg: Any, machine: Optional[Machine] = None, facts_of: Any = read_model_facts
) -> tuple[Any, list[AutoChoice]]:
    """(a copy of `cfg` with every `auto` key replaced by its choice, the choices). `cfg` itself is not changed;
    without `auto` keys it is returned as it is. `machine` defaults to this process's view of the run's device."""
    if not auto_keys(cfg):
        return cfg, []
    machine = machine or Machine.detect(cfg.resolved_device())
    choices = auto_choices(cfg, machine, facts_of)
    data = copy.deepcopy(cfg.to_dict())
    for choice in choices:
        _set_path(data, choice.key, choice.value)
    return type(cfg).from_dict(data, validate=False), choices


def describe_choices(choices: list[AutoChoice]) -> str:
    """The choices of the roles the run builds, as `--dry-run` prints them, one per line."""
    shown = [choice for choice in choices if choice.used]
    if not shown:
        return "auto settings: none (every speed setting of this run is given)\n"
    lines = ["auto settings (chosen from the model size, world size and device):"]
    lines += [f"  {choice.key}={json.dumps(choice.value)}: {choice.reason}" for choice in shown]
    return "\n".join(lines) + "\n"


def resolved(cfg: Any) -> Any:
    """`cfg` with its `auto` keys resolved for this process (`cfg` itself when none is left): for code handed a
    config that did not come through `BasePPOExp`, which resolves once for the whole run."""
    return resolve_auto_settings(cfg)[0] if auto_keys(cfg) else cfg


def model_facts(model: Any) -> ModelFacts:
    """The facts of a loaded model (its parameters counted, its shape from `model.config`)."""
    config = getattr(model, "config", None)
    config = getattr(config, "text_config", None) or config
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    return ModelFacts(
        num_parameters=sum(p.numel() for p in model.parameters()),
        num_layers=int(getattr(config, "num_hidden_layers", 1) or 1),
        hidden_size=hidden,
        intermediate_size=int(getattr(config, "intermediate_size", 0) or 4 * hidden),
        vocab_size=int(getattr(config, "vocab_size", 0) or 0),
        source="the loaded model",
    )


def resolve_fsdp(fsdp: Any, device: str, world_size: int, model: Any) -> Any:
    """A copy of an `FSDPConfig` with its `auto` fields chosen for a strategy built without a run's resolved config
    (the same rules as `auto_choices`, with the loaded model's size and the host's memory shared by `world_size`
    ranks); `fsdp` itself when nothing is `auto`."""
    from dataclasses import replace

    mixed = fsdp.mixed_precision
    if AUTO not in (fsdp.reshard_after_forward, fsdp.shard_layers, mixed.param_dtype):
        return fsdp
    machine = Machine.detect(device)
    memory, note = machine.memory_bytes, machine.source
    if memory is not None and device != "cuda":
        memory, note = memory // max(1, world_size), f"{_mb(memory // max(1, world_size))} (host / {world_size} ranks)"
    facts = model_facts(model)
    dtype = mixed.param_dtype if mixed.param_dtype != AUTO else choose_compute_dtype(machine, facts)[0]
    reshard = fsdp.reshard_after_forward
    if reshard == AUTO:
        reshard = _choose_reshard(world_size, facts, "", memory, note, dtype)[0]
    layers = fsdp.shard_layers
    if layers == AUTO:
        layers = _choose_shard_layers(world_size, device, facts, memory, note, dtype)[0]
    return replace(
        fsdp, reshard_after_forward=reshard, shard_layers=layers, mixed_precision=replace(mixed, param_dtype=dtype)
    )
