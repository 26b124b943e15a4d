"""Pure conversions between SkyRL's engine types and SGLang's offline API (`sglang.Engine`), importable without SGLang.

- `engine_kwargs` / `engine_kwargs_from_settings`: our engine settings as `sglang.Engine(**kwargs)` arguments
  (SGLang's `ServerArgs` names).
- `sampling_params_dict`: one sample of our `SamplingParams` as SGLang's sampling-params dict, refusing what SGLang
  cannot do the way our contract says.
- `parse_output`: one SGLang generate output (`output_ids` and `meta_info`) as one of our output rows.
- `byte_bucket_layout`: where each tensor of a packed weight-sync chunk lies in its bytes, for SGLang's
  `flattened_bucket` load format; `unpad`: a parameter read back from SGLang without its vocabulary padding.
- `import_sglang`: the package, or an ImportError that says how to get it.

Written against SGLang 0.5.23 (`python/sglang/srt/entrypoints/engine.py`, `managers/io_struct.py`,
`sampling/sampling_params.py`); `SGLANG_REQUIREMENT` is the range the `sglang` extra installs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Optional

import torch

from skyrl_train.config.generator import SHARED_SAMPLING_FIELDS
from skyrl_train.inference.stopping import trim_stop_string
from skyrl_train.inference.types import SamplingParams, StopReason

SGLANG_REQUIREMENT = "sglang>=0.5.23,<0.6"
"""The SGLang versions this engine is written for (the `sglang` extra of skyrl-train)."""

SGLANG_INSTALL_HINT = (
    "generator.inference_engine.backend=sglang needs the sglang package, which runs on CUDA GPUs only: install it "
    f"on a GPU machine with `bash scripts/setup.sh --gpu sglang` ({SGLANG_REQUIREMENT})"
)

MAX_STOP_STRINGS = 32
"""SGLang refuses more stop strings than this (`MAX_STOP_COUNT` in its sampling params)."""

RESERVED_SAMPLING_FIELDS = (
    "max_new_tokens",
    *SHARED_SAMPLING_FIELDS,
    "stop_token_ids",
    "ignore_eos",
    "no_stop_trim",
    "n",
    "sampling_seed",
)
"""SGLang sampling fields set from first-class `SamplingParams` fields (refused in `additional_kwargs`)."""

INTERNAL_SAMPLING_FIELDS = (
    "stop_strs",
    "stop_regex_strs",
    "stop_str_max_len",
    "stop_regex_max_len",
    "is_normalized",
    "ebnf_full_assistant",
)
"""Fields of SGLang's `SamplingParams` struct that SGLang fills in itself (not sampling options a request sets)."""

FINISH_TYPES: dict[str, StopReason] = {"stop": "stop", "length": "length", "abort": "abort"}
"""SGLang's `meta_info.finish_reason.type` -> our stop reason (eos, stop token and stop string are all `stop`)."""


def sglang_available() -> bool:
    """True when `import sglang` can find the package (without importing it)."""
    return importlib.util.find_spec("sglang") is not None


def import_sglang() -> Any:
    """The `sglang` module, or an ImportError that says how to install it."""
    try:
        import sglang
    except ImportError as exc:
        raise ImportError(f"{SGLANG_INSTALL_HINT} ({exc})") from exc
    return sglang


FIRST_WEIGHT_VERSION = "0"
"""SGLang's `weight_version` label of the weights an engine starts with; every sync relabels them with its version
number (`update_weight_version`), so the labels SGLang reports per token are our versions."""

WEIGHT_VERSION_IS_OURS = (
    "engine_init_kwargs.weight_version is set by the sglang engine itself (it labels every synced version with its"
    " number, from 0): remove it"
)


def engine_kwargs(
    model_path: str,
    tokenizer_path: Optional[str] = None,
    dtype: str = "bfloat16",
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float = 0.8,
    max_num_seqs: int = 1024,
    seed: int = 0,
    enable_prefix_caching: bool = True,
    enforce_eager: bool = False,
    extra: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """Arguments of `sglang.Engine` for our engine settings; `extra` (`engine_init_kwargs`) is applied last and wins.

    Beyond the one-to-one settings, three SGLang switches are on by default because our engine contract needs them:
    `enable_memory_saver` (sleep releases GPU memory), `enable_weights_cpu_backup` (sleep level 1 keeps the weights,
    in host memory) and `enable_deterministic_inference` (SGLang honours per-request seeds only in that mode, and
    batch-invariant kernels keep a row's sample independent of its batch). Set any of them false in
    `engine_init_kwargs` to trade that guarantee for speed or memory. `attention_backend` defaults to `triton`, which
    deterministic mode accepts on every CUDA GPU and head size (left unset, SGLang picks `fa3` below Blackwell, which
    needs a Hopper GPU); set it to `fa3` or `flashinfer` where those run.
    """
    kwargs: dict[str, Any] = {
        "model_path": model_path,
        "tokenizer_path": tokenizer_path or model_path,
        "dtype": dtype,
        "tp_size": tensor_parallel_size,
        "mem_fraction_static": gpu_memory_utilization,
        "max_running_requests": max_num_seqs,
        "random_seed": seed,
        "disable_radix_cache": not enable_prefix_caching,
        "disable_prefill_cuda_graph": enforce_eager,  # the per-phase switches; `disable_cuda_graph` is legacy
        "disable_decode_cuda_graph": enforce_eager,
        "enable_memory_saver": True,
        "enable_weights_cpu_backup": True,
        "enable_deterministic_inference": True,
        "attention_backend": "triton",
    }
    if "weight_version" in (extra or {}):
        raise ValueError(WEIGHT_VERSION_IS_OURS)
    kwargs.update(extra or {})
    kwargs["weight_version"] = FIRST_WEIGHT_VERSION
    return kwargs


SGLANG_WEIGHT_READERS = frozenset(
    {
        "EmbeddingGemma2Model",
        "Exaone4ForCausalLM",
        "GraniteForCausalLM",
        "GraniteSWAForCausalLM",
        "IQuestCoderForCausalLM",
        "InternLM3ForCausalLM",
        "Llama4ForCausalLM",
        "LlamaForCausalLM",
        "LlamaForCausalLMEagle",
        "LlamaForCausalLMEagle3",
        "Ministral3ForCausalLM",
        "MistralForCausalLM",
        "MistralForCausalLMEagle",
        "MistralForCausalLMMistralFormat",
        "OPTForCausalLM",
        "Phi3ForCausalLM",
        "TeleFLMForCausalLM",
    }
)
"""SGLang 0.5.23's model classes that define or inherit `get_weights_by_name` (what `weights_checksum` reads back
with); the contract tests re-derive this set from SGLang's source."""


def check_weights_readable(architectures: Optional[list[str]]) -> None:
    """Refuse a checksum read-back for a model SGLang cannot return weights of (its class lacks
    `get_weights_by_name`), before any request: otherwise every name comes back empty."""
    if not architectures or not set(architectures) & SGLANG_WEIGHT_READERS:
        raise NotImplementedError(
            f"SGLang cannot read back the weights of {architectures} (get_weights_by_name exists only for "
            f"{sorted(SGLANG_WEIGHT_READERS)}), so weight syncs into the sglang engine cannot be verified by checksum "
            "with this model; verify with backend=vllm or hf, or run without verify_weight_sync"
        )


def check_tensor_parallel_gpus(tp_size: int, visible: Optional[tuple[str, ...]]) -> None:
    """Refuse a tensor-parallel size above the GPUs this process sees (`visible`; None: not restricted): SGLang puts
    worker k on local GPU k, which would not exist. Placement gives a separate sglang engine `tp_size` GPUs."""
    if visible is not None and tp_size > len(visible):
        raise ValueError(
            f"the sglang engine has tensor_parallel_size={tp_size} but its actor sees {len(visible)} GPU(s) "
            f"({list(visible)}); SGLang runs one worker per GPU: give the actor {tp_size} GPUs "
            "(trainer.placement.colocate_all=false does) or lower generator.inference_engine.tensor_parallel_size"
        )


def engine_kwargs_from_settings(settings: Any) -> dict[str, Any]:
    """`engine_kwargs` for an `EngineSettings` (the config's `generator.inference_engine` keys, `trainer.seed`)."""
    extra = {"ep_size": settings.expert_parallel_size, **settings.engine_kwargs}  # SGLang's name; the user's win
    return engine_kwargs(settings.model_path, extra=extra, **settings.serving_engine_kwargs())


def sampling_params_dict(
    params: SamplingParams,
    seed: Optional[int],
    prompt_length: int,
    max_model_len: int,
    known_fields: Optional[Collection[str]] = None,
) -> dict[str, Any]:
    """SGLang's sampling params (a dict for `Engine.async_generate`) for one sample of a `prompt_length`-token prompt.

    `max_new_tokens` is cut to what fits in `max_model_len` (SGLang refuses a request that does not fit; ours stops
    with reason `length`). Temperature 0 stays 0 (SGLang then samples greedily with top-k 1). `additional_kwargs`
    are passed unchanged; a name that a first-class field sets is refused, and so is a name SGLang's sampling params
    do not have when `known_fields` (SGLang's field names) is given. Refused with a ValueError that says why:
    `repetition_penalty` != 1 (SGLang penalises only tokens it generated, our contract also the prompt's) and more
    than `MAX_STOP_STRINGS` stop strings.
    """
    if params.repetition_penalty != 1.0:
        raise ValueError(
            f"sampling repetition_penalty={params.repetition_penalty} is not supported by the sglang engine: SGLang "
            "penalises only tokens it generated, while the contract of SamplingParams (and the hf and vllm engines) "
            "also penalises the prompt's; use repetition_penalty=1.0 or backend=vllm/hf"
        )
    if len(params.stop) > MAX_STOP_STRINGS:
        raise ValueError(f"sampling stop has {len(params.stop)} strings; SGLang accepts at most {MAX_STOP_STRINGS}")
    room = max_model_len - prompt_length
    if room < 1:
        raise ValueError(f"a prompt of {prompt_length} tokens leaves no room under max_model_len={max_model_len}")
    values: dict[str, Any] = {
        "max_new_tokens": min(params.max_tokens, room),
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "min_p": params.min_p,
        "repetition_penalty": 1.0,
        "stop": list(params.stop) or None,
        "stop_token_ids": list(params.stop_token_ids) or None,
        "ignore_eos": params.ignore_eos,
        "no_stop_trim": params.include_stop_str_in_output,
        "n": 1,
        "sampling_seed": seed,
    }
    extra = params.extra_kwargs
    clashes = sorted(set(extra) & set(RESERVED_SAMPLING_FIELDS))
    if clashes:
        raise ValueError(
            f"sampling additional_kwargs {clashes} duplicate first-class sampling params; set those fields instead"
        )
    if known_fields is not None:
        settable = set(known_fields) - set(INTERNAL_SAMPLING_FIELDS)
        unknown = sorted(set(extra) - settable)
        if unknown:
            raise ValueError(
                f"sampling additional_kwargs {unknown} are not SGLang sampling params; the ones to set there are "
                f"{sorted(settable - set(RESERVED_SAMPLING_FIELDS))}"
            )
    values.update(extra)
    return values


def logprob_request(params: SamplingParams) -> tuple[bool, int]:
    """`(return_logprob, top_logprobs_num)` of `Engine.async_generate` for these params."""
    return params.logprobs, params.top_logprobs if params.logprobs else 0


def stop_reason(meta_info: Mapping[str, Any], row: int = 0) -> StopReason:
    """Our stop reason for SGLang's `meta_info.finish_reason` (`{"type": "stop" | "length" | "abort", ...}`)."""
    finish = meta_info.get("finish_reason")
    kind = finish.get("type") if isinstance(finish, Mapping) else finish
    if kind not in FINISH_TYPES:
        raise ValueError(f"SGLang output {row}: unexpected finish_reason {finish!r} (expected type stop/length/abort)")
    return FINISH_TYPES[kind]


def parse_output(
    output: Mapping[str, Any], params: SamplingParams, decode: Callable[[list[int]], str], row: int = 0
) -> tuple[str, list[int], list[float], StopReason, list[list[tuple[int, float]]]]:
    """One SGLang output dict as our row `(text, token ids, logprobs, stop reason, top logprobs)`.

    Token ids are `output_ids` (every generated token, the eos or stop token that ended it included). Logprobs come
    from `meta_info.output_token_logprobs` (`(logprob, token_id, text)` per token) and must name the same tokens;
    top logprobs from `meta_info.output_top_logprobs` (a list of `(logprob, token_id, text)` per token, or None),
    most likely first. The text is `decode(ids)` cut at the first stop string (kept with
    `include_stop_str_in_output`), as the other engines make it. `row` only names the output in errors.
    """
    meta = output.get("meta_info")
    if not isinstance(meta, Mapping):
        raise ValueError(f"SGLang output {row} has no meta_info (got keys {sorted(output)})")
    reason = stop_reason(meta, row)
    entries = meta.get("output_token_logprobs")
    if "output_ids" in output:
        ids = [int(token) for token in output["output_ids"]]
    elif entries is not None:
        ids = [int(entry[1]) for entry in entries]
    else:
        raise ValueError(f"SGLang output {row} carries neither output_ids nor meta_info.output_token_logprobs")
    logprobs: list[float] = []
    if params.logprobs:
        if entries is None:
            raise ValueError(f"SGLang output {row}: logprobs were asked for but meta_info has no output_token_logprobs")
        entry_ids = [int(entry[1]) for entry in entries]
        if entry_ids != ids:
            raise ValueError(
                f"SGLang output {row}: output_token_logprobs name tokens {entry_ids[:8]}... but output_ids are "
                f"{ids[:8]}... ({len(entry_ids)} vs {len(ids)} tokens)"
            )
        logprobs = [float(entry[0]) for entry in entries]
    tops: list[list[tuple[int, float]]] = []
    if params.logprobs and params.top_logprobs > 0:
        steps = meta.get("output_top_logprobs")
        if steps is None or len(steps) != len(ids):
            count = None if steps is None else len(steps)
            raise ValueError(f"SGLang output {row}: {count} output_top_logprobs steps for {len(ids)} tokens")
        for step in steps:
            ranked = sorted(((float(entry[0]), int(entry[1])) for entry in step or ()), key=lambda pair: -pair[0])
            tops.append([(token, logprob) for logprob, token in ranked[: params.top_logprobs]])
    text = trim_stop_string(decode(ids), params.stop, params.include_stop_str_in_output)
    return text, ids, logprobs, reason, tops


def token_versions(meta: Mapping[str, Any], count: int, row: int = 0) -> Optional[list[int]]:
    """Per generated token, the weight version that sampled it, from `meta_info.weight_versions`: the spans
    (`{"version", "start", "end"}`, back to back over the output tokens) with which SGLang 0.5.23 labels a finished
    output once a weight version changed while it ran. None when SGLang sent no spans. Versions are the integer
    labels this engine gives SGLang (its `weight_version` argument, then `update_weight_version` after each sync);
    `count` is the output's token count and `row` only names the output in errors."""
    spans = meta.get("weight_versions")
    if spans is None:
        return None
    versions: list[int] = []
    for span in spans:
        try:
            version, start, end = int(span["version"]), int(span["start"]), int(span["end"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"SGLang output {row}: weight_versions span {span!r} is not {{version: <integer>, start, end}}"
            ) from exc
        if start != len(versions) or end < start:
            raise ValueError(f"SGLang output {row}: weight_versions spans {list(spans)} leave a gap or overlap")
        versions.extend([version] * (end - start))
    if len(versions) != count:
        raise ValueError(
            f"SGLang output {row}: weight_versions spans cover {len(versions)} tokens, the output has {count}"
        )
    return versions


def byte_bucket_layout(shapes: Sequence[Sequence[int]], dtype: torch.dtype) -> list[tuple[tuple[int, ...], int, int]]:
    """`(shape, start byte, end byte)` of each tensor in a chunk packed by `weight_sync.chunks.pack`, read as bytes.

    This is the layout of SGLang's `FlattenedTensorBucket` (byte offsets into one `uint8` tensor, tensors back to
    back in order), so a chunk's bytes can be loaded with `load_format="flattened_bucket"` without copying.
    """
    layout = []
    start = 0
    for shape in shapes:
        count = 1
        for dim in shape:
            count *= int(dim)
        end = start + count * dtype.itemsize
        layout.append((tuple(int(dim) for dim in shape), start, end))
        start = end
    return layout


def unpad(served: torch.Tensor, shape: Optional[Sequence[int]]) -> torch.Tensor:
    """`served` cut to `shape` where it is larger (SGLang pads vocabulary rows to a multiple of 64); unchanged when
    `shape` is None, equal, or not contained in it (a real mismatch, left for the checksum to catch)."""
    if shape is None or tuple(served.shape) == tuple(shape) or served.dim() != len(shape):
        return served
    if any(have < want for have, want in zip(served.shape, shape)):
        return served
    return served[tuple(slice(0, int(want)) for want in shape)]
