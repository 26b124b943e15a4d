"""The `sglang` engine (CUDA only): the `InferenceEngine` interface over an in-process `sglang.Engine`.

SGLang's offline engine keeps its tokenizer manager in this process and runs the scheduler (one process per
tensor-parallel rank) and the detokenizer in subprocesses. Its synchronous methods drive their own event loop, which
cannot run inside the Ray actor's, so every call here awaits the tokenizer manager's coroutines (the ones the
synchronous methods wrap) with the request objects of `sglang.srt.managers.io_struct`; generation uses
`Engine.async_generate`.

Concurrent `generate` calls are gathered (`QueuedEngine`) and handed to SGLang as one batch of token-id prompts;
each of a prompt's `n` samples is its own request seeded `seed + j` (`sampling_seed`, honoured in SGLang's
deterministic mode, which `sglang_convert.engine_kwargs` turns on). An unseeded sample gets a fresh seed from the
engine's own generator (seeded by `random_seed`): in deterministic mode SGLang would give every unseeded request the
same seed, so the samples of one prompt would all be equal. Logprobs are SGLang's default:
`log_softmax(logits / temperature)` before top-k/top-p/min-p (greedy: temperature 1), the contract of
`SamplingParams`.

Lifecycle: `pause` holds new calls, waits for the running ones and pauses SGLang's scheduler
(`pause_generation(mode="in_place")`), `resume` continues it. With `in_flight_weight_updates` (the async trainers'
`weight_update_boundary: token`) `pause` waits for nothing: SGLang retracts the running requests
(`pause_generation(mode="retract")`: their KV cache is freed, their tokens so far kept), the new weights load, and on
`resume` SGLang prefills each one's prompt and tokens again with the new weights and goes on decoding. Every sync
labels SGLang's weights with its version (`update_weight_version`; the engine starts at `weight_version="0"`), and
SGLang reports which output tokens each label sampled (`meta_info.weight_versions`), so every token keeps its
version next to its logprob. `sleep` pauses and releases GPU memory
(`release_memory_occupation`: weights to host memory with `enable_weights_cpu_backup`, KV cache and CUDA graphs
dropped), `wake_up` resumes it. Weights: `update_weights` loads HF-named tensors with `update_weights_from_tensor`
inside SGLang's weight-update session (`begin_weight_update` / `end_weight_update`); the `broadcast` and `cuda_ipc`
syncs get receivers of their own (`sglang_sync`) that let SGLang's workers take the bytes directly. Checksums read
parameters back with `get_weights_by_name`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable
from typing import Any, Optional

import torch
from transformers import AutoConfig

from skyrl_train.inference.queued_engine import PendingRequest, QueuedEngine
from skyrl_train.inference.sglang_convert import (
    FIRST_WEIGHT_VERSION,
    WEIGHT_VERSION_IS_OURS,
    check_tensor_parallel_gpus,
    check_weights_readable,
    import_sglang,
    logprob_request,
    parse_output,
    sampling_params_dict,
    token_versions,
    unpad,
)
from skyrl_train.inference.types import SamplingParams
from skyrl_train.models.loading import load_tokenizer
from skyrl_train.utils.checksum import tensor_checksum
from skyrl_train.utils.compute_clock import ComputeClock
from skyrl_train.weight_sync.locations import process_gpus

WHOLE_TENSOR = 1 << 62
"""`truncate_size` that makes `get_weights_by_name` return every row of a parameter."""


class SGLangError(RuntimeError):
    """SGLang reported that a control call (weight update, group join, cache flush) failed; the message is its own."""


def _check(result: Any, what: str) -> None:
    """Raise `SGLangError` when a `(success, message, ...)` result of SGLang says it failed."""
    if isinstance(result, tuple) and result and not result[0]:
        raise SGLangError(f"SGLang {what} failed: {result[1] if len(result) > 1 else result}")


class SGLangInferenceEngine(QueuedEngine):
    """Generation with a `sglang.Engine` held in this process (its workers in subprocesses on this actor's GPUs).

    Args:
        engine_args: `sglang.Engine` (ServerArgs) arguments, e.g. from `sglang_convert.engine_kwargs` (the builder
            maps the config with `engine_kwargs_from_settings`); `model_path`, `tokenizer_path` and `tp_size` are
            read here too.
        device: must be `cuda` (SGLang runs on CUDA GPUs only).
        batch_wait_s: how long a request for a single completion waits for others to join its batch (a request for
            several completions starts at once).
    """

    def __init__(
        self,
        engine_args: dict[str, Any],
        device: str = "cuda",
        batch_wait_s: float = 0.002,
        in_flight_weight_updates: bool = False,
    ) -> None:
        if engine_args.get("weight_version", FIRST_WEIGHT_VERSION) != FIRST_WEIGHT_VERSION:
            raise ValueError(WEIGHT_VERSION_IS_OURS)
        if torch.device(device).type != "cuda":
            raise ValueError(f"the sglang engine runs on CUDA GPUs only; device is {device!r}")
        check_tensor_parallel_gpus(int(engine_args.get("tp_size", 1)), process_gpus())
        sglang = import_sglang()
        from sglang.srt.managers import io_struct
        from sglang.srt.sampling.sampling_params import SamplingParams as SGLangSamplingParams
        from sglang.srt.utils import MultiprocessingSerializer

        self.io = io_struct
        self.serializer = MultiprocessingSerializer
        self.sampling_fields = tuple(SGLangSamplingParams.__struct_fields__)
        self.settings = {**engine_args, "weight_version": FIRST_WEIGHT_VERSION}  # as `engine_kwargs` sets it
        self.engine = sglang.Engine(**self.settings)
        self.manager = self.engine.tokenizer_manager
        tokenizer = load_tokenizer(self.settings.get("tokenizer_path") or self.settings["model_path"])
        self.architectures: Optional[list[str]] = getattr(
            AutoConfig.from_pretrained(self.settings["model_path"]), "architectures", None
        )
        """The model's classes by Hugging Face name (which `weights_checksum` checks SGLang can read back)."""
        super().__init__(tokenizer, int(self.manager.context_len), batch_wait_s)
        self.tensor_parallel_size = int(self.settings.get("tp_size", 1))
        self.in_flight_weight_updates = in_flight_weight_updates
        self.compute_clock = ComputeClock()
        """Seconds spent in SGLang's generate (read by the framework-overhead benchmark)."""
        self._version = 0
        self._asleep = False
        self._weights_discarded = False
        self._scheduler_paused = False
        self._update_open = False
        self._paused_for_update = False
        self._synced_shapes: dict[str, tuple[int, ...]] = {}
        self._unseeded = random.Random(self.settings.get("random_seed"))

    # ----- generation -----------------------------------------------------------------------------------------
    @property
    def weight_version(self) -> int:
        """The version of the weights being served."""
        return self._version

    @property
    def weight_sync_ranks(self) -> int:
        """Ranks this engine takes in a `broadcast` sync group: one per tensor-parallel worker."""
        return self.tensor_parallel_size

    def _check_servable(self) -> None:
        if self._asleep or self._weights_discarded:
            raise RuntimeError(
                "SGLangInferenceEngine is asleep or its weights were released without a host copy (sleep level 2, or "
                "enable_weights_cpu_backup=false); call wake_up() and update_weights() before generate()"
            )

    def _check_params(self, params: SamplingParams) -> None:
        sampling_params_dict(params, None, 0, self.max_model_len, self.sampling_fields)

    async def _serve(self, pending: list[PendingRequest]) -> None:
        """Hand every pending request to SGLang in one `async_generate` call (SGLang schedules them together)."""
        input_ids, sampling, want_logprobs, top_counts, owners = [], [], [], [], []
        for index, item in enumerate(pending):
            return_logprob, top_count = logprob_request(item.params)
            for prompt, seed in zip(item.prompts, item.seeds):
                for sample in range(item.params.n):
                    sample_seed = self._unseeded.getrandbits(62) if seed is None else seed + sample
                    input_ids.append(prompt)
                    sampling.append(
                        sampling_params_dict(
                            item.params, sample_seed, len(prompt), self.max_model_len, self.sampling_fields
                        )
                    )
                    want_logprobs.append(return_logprob)
                    top_counts.append(top_count)
                    owners.append(index)
        with self.compute_clock("generate"):
            outputs = await self.engine.async_generate(
                input_ids=input_ids,
                sampling_params=sampling,
                return_logprob=want_logprobs,
                top_logprobs_num=top_counts,
            )
        if isinstance(outputs, dict):
            outputs = [outputs]
        if len(outputs) != len(owners):
            raise RuntimeError(f"SGLang returned {len(outputs)} outputs for {len(owners)} requests")
        rows: list[list[tuple]] = [[] for _ in pending]
        for row, (owner, output) in enumerate(zip(owners, outputs)):
            parsed = parse_output(output, pending[owner].params, self._decode, row)
            versions = token_versions(output["meta_info"], len(parsed[1]), row)
            rows[owner].append(parsed if versions is None else (*parsed, versions))
        for item, item_rows in zip(pending, rows):
            item.future.set_result(item_rows)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # ----- lifecycle --------------------------------------------------------------------------------------------
    async def pause(self) -> None:
        """Hold new generate calls, wait for the running ones, then pause SGLang's scheduler (in place). With
        `in_flight_weight_updates` the running ones are not waited for: SGLang retracts them until `resume`."""
        await super().pause()
        if not self._scheduler_paused:
            mode = "retract" if self.in_flight_weight_updates else "in_place"
            await self.manager.pause_generation(self.io.PauseGenerationReqInput(mode=mode))
            self._scheduler_paused = True

    async def resume(self) -> None:
        """Continue SGLang's scheduler and admit generate calls again."""
        if self._scheduler_paused:
            await self.manager.continue_generation(self.io.ContinueGenerationReqInput())
            self._scheduler_paused = False
        await super().resume()

    async def sleep(self, level: int = 1) -> None:
        """Pause and release SGLang's GPU memory (weights, KV cache, CUDA graphs). Level 1 keeps the weights in
        host memory when `enable_weights_cpu_backup` is on (the default); level 2, or that switch off, leaves them
        to be replaced: a full `update_weights` must follow `wake_up`."""
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level}")
        if self._asleep:
            return
        await self.pause_and_drain()  # memory is released only with no request left, in-flight updates or not
        await self.pause()
        await self.manager.release_memory_occupation(self.io.ReleaseMemoryOccupationReqInput(), None)
        self._asleep = True
        self._weights_discarded = level == 2 or not self.settings.get("enable_weights_cpu_backup", False)

    async def wake_up(self) -> None:
        """Take the GPU memory back and admit generate calls."""
        if self._asleep:
            await self.manager.resume_memory_occupation(self.io.ResumeMemoryOccupationReqInput(), None)
            self._asleep = False
        await self.resume()

    async def reset_prefix_cache(self) -> None:
        """Flush SGLang's radix cache."""
        result = await self.manager.flush_cache()
        if not getattr(result, "success", True):
            raise SGLangError(f"SGLang flush_cache failed: {getattr(result, 'message', result)}")

    # ----- weights ----------------------------------------------------------------------------------------------
    async def open_weight_update(self) -> None:
        """Start a weight update: hold generation (unless already paused) and open SGLang's update session."""
        if self._update_open:
            return
        if not self._scheduler_paused and not self._asleep:
            await self.pause()
            self._paused_for_update = True
        _check(await self.manager.begin_weight_update(self.io.BeginWeightUpdateReqInput(), None), "begin_weight_update")
        self._update_open = True

    async def close_weight_update(self, version: Optional[int]) -> None:
        """Close SGLang's update session and release generation if the update held it; serve `version` (None: the
        update failed, the served version stays)."""
        try:
            if self._update_open:
                self._update_open = False
                result = await self.manager.end_weight_update(self.io.EndWeightUpdateReqInput(), None)
                _check(result, "end_weight_update")
            if version is not None:
                self._weights_discarded = False
                self._version = version
                # SGLang labels the tokens sampled from here on with this version (retracted requests included)
                await self.manager.update_weight_version(
                    self.io.UpdateWeightVersionReqInput(new_version=str(version), abort_all_requests=False)
                )
        finally:
            if self._paused_for_update:
                self._paused_for_update = False
                await self.resume()

    def record_shapes(self, names: Iterable[str], shapes: Iterable[Iterable[int]]) -> None:
        """Remember the parameters the trainer sent and their shapes (what `weights_checksum` reads back)."""
        self._synced_shapes.update((name, tuple(int(dim) for dim in shape)) for name, shape in zip(names, shapes))

    async def load_tensor_payloads(self, payloads: list[bytes], load_format: Optional[str], flush_cache: bool) -> None:
        """`update_weights_from_tensor` with one serialized payload per tensor-parallel rank."""
        request = self.io.UpdateWeightsFromTensorReqInput(
            serialized_named_tensors=payloads, load_format=load_format, flush_cache=flush_cache
        )
        _check(await self.manager.update_weights_from_tensor(request, None), "update_weights_from_tensor")

    async def load_from_distributed(
        self, names: list[str], dtype: str, shapes: list[list[int]], group_name: str, flush_cache: bool
    ) -> None:
        """`update_weights_from_distributed`: SGLang's workers receive one byte bucket broadcast from rank 0."""
        request = self.io.UpdateWeightsFromDistributedReqInput(
            names=names,
            dtypes=[dtype] * len(names),
            shapes=shapes,
            group_name=group_name,
            flush_cache=flush_cache,
            load_format="flattened_bucket",
        )
        _check(await self.manager.update_weights_from_distributed(request, None), "update_weights_from_distributed")

    async def join_weight_group(
        self, master_address: str, master_port: int, rank_offset: int, world_size: int, group_name: str, backend: str
    ) -> None:
        """`init_weights_update_group`: each tensor-parallel worker joins as rank `rank_offset + tp_rank`."""
        request = self.io.InitWeightsUpdateGroupReqInput(
            master_address=master_address,
            master_port=master_port,
            rank_offset=rank_offset,
            world_size=world_size,
            group_name=group_name,
            backend=backend,
        )
        _check(await self.manager.init_weights_update_group(request, None), "init_weights_update_group")

    async def leave_weight_group(self, group_name: str) -> None:
        """`destroy_weights_update_group`."""
        request = self.io.DestroyWeightsUpdateGroupReqInput(group_name=group_name)
        _check(await self.manager.destroy_weights_update_group(request, None), "destroy_weights_update_group")

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Load HF-named tensors (all or some) with `update_weights_from_tensor` and serve them as `version`."""
        tensors = [(name, tensor.detach().contiguous()) for name, tensor in named_tensors]
        await self.open_weight_update()
        try:
            if tensors:  # one payload per rank: a shared tensor's handle can be opened once per payload
                payloads = [self.serializer.serialize(tensors) for _ in range(self.tensor_parallel_size)]
                await self.load_tensor_payloads(payloads, None, flush_cache=True)
        except BaseException:
            await self.close_weight_update(None)
            raise
        await self.close_weight_update(version)
        self.record_shapes([name for name, _ in tensors], [tensor.shape for _, tensor in tensors])

    async def weights_checksum(self, names: Optional[list[str]] = None) -> dict[str, float]:
        """Checksums of the served parameters under HF names, read back with SGLang's `get_weights_by_name`
        (default: every parameter a weight update brought). Needs `tensor_parallel_size=1` (SGLang returns rank 0's
        shard of most parameters) and a model class for which SGLang implements `get_weights_by_name`
        (`sglang_convert.SGLANG_WEIGHT_READERS`: Llama-family classes in SGLang 0.5.23; refused before any request
        otherwise). Every parameter comes back as nested Python lists, one request per name: fine for the tests'
        models, slow for billions of weights. SGLang pads the vocabulary rows of embeddings
        and the LM head; the rows beyond the shape the trainer sent are cut off before the checksum."""
        if self.tensor_parallel_size != 1:
            raise NotImplementedError("SGLangInferenceEngine.weights_checksum needs tensor_parallel_size=1")
        check_weights_readable(self.architectures)
        wanted = list(names) if names is not None else list(self._synced_shapes)
        checksums = {}
        for name in wanted:
            request = self.io.GetWeightsByNameReqInput(name=name, truncate_size=WHOLE_TENSOR)
            values = await self.manager.get_weights_by_name(request, None)
            if values is not None:
                served = unpad(torch.tensor(values, dtype=torch.float64), self._synced_shapes.get(name))
                checksums[name] = tensor_checksum(served)
        if wanted and not checksums:
            raise NotImplementedError(
                f"SGLang's get_weights_by_name returned nothing for {wanted[:3]}...: it is implemented only for some "
                "model classes (Llama-family in SGLang 0.5.23), so weights cannot be verified by checksum with this model"
            )
        return checksums

    async def make_weight_receiver(self, strategy_name: str, init_info: dict[str, Any]) -> Any:
        """This engine's own receiver for the `broadcast` and `cuda_ipc` syncs (None: use the generic one)."""
        from skyrl_train.inference.sglang_sync import make_sglang_receiver

        return await make_sglang_receiver(strategy_name, init_info, self)

    async def teardown(self) -> None:
        """Shut SGLang's subprocesses down; the engine is unusable afterwards."""
        self._closed = True
        await asyncio.to_thread(self.engine.shutdown)
