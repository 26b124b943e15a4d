"""The in-flight loop of the `vllm` engine: requests go into `vllm.LLMEngine` as they arrive, and the engine is
stepped until none is left.

A call that arrives while others decode joins vLLM's running batch at its next step, and a completion goes back to its
caller as soon as it finishes. Every call into vLLM runs in one worker thread (`_in_worker`), which serialises them
without a lock and keeps the event loop free; the stepping loop hands the thread over between two engine steps
whenever another call waits for it (a weight update, a sleep), which is what lets an update land between two tokens
of running requests. `VLLMInferenceEngine` mixes this in.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import torch

from skyrl_train.inference.queued_engine import PendingRequest


def token_versions(completion: Any, num_tokens: int, current: int) -> list[int]:
    """The weight version that sampled each of a completion's tokens, from vLLM's `weight_versions` spans (labels are
    the versions `update_weights` set); `current` for every token when vLLM reports none."""
    spans = getattr(completion, "weight_versions", None)
    if not spans:
        return [current] * num_tokens
    versions = [current] * num_tokens
    for span in spans:
        for position in range(span.start, min(span.end, num_tokens)):
            versions[position] = int(span.version)
    return versions


class VLLMStepLoop:
    """Continuous batching over `self.llm.llm_engine` and the worker thread every vLLM call runs in.

    The engine class provides `llm` (a `vllm.LLM`), `vllm_params`, `_row`, `_final_only`, `_tokens_prompt`,
    `_lora_request`, `compute_clock` and `_version`, and calls `_init_step_loop` once `llm` is built."""

    def _init_step_loop(self) -> None:
        """The worker thread and the loop's state."""
        # vLLM's CPU attention kernels check that a batch runs with the OpenMP thread count its metadata was built
        # with; a fresh Python thread starts with the machine's default, so the worker thread every vLLM call runs
        # in is set to this thread's count (torch._C's setter: vLLM replaces torch.set_num_threads with a no-op).
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="vllm-engine",
            initializer=torch._C.set_num_threads,
            initargs=(torch.get_num_threads(),),
        )
        self._request_ids = itertools.count()
        self._live: dict[str, tuple[PendingRequest, int, list[int]]] = {}
        """vLLM request id -> (its call, its row in the call's results, rows of the call still running); touched in
        the worker thread only."""
        self._calls_waiting = 0  # calls queued for the worker thread: the stepping loop hands it over when > 0
        self._waiting_lock = threading.Lock()
        self._stepper: Optional[asyncio.Task] = None

    async def _in_worker(self, function: Any, *args: Any) -> Any:
        """Run `function` in the engine's worker thread (after the stepping loop hands it over)."""
        with self._waiting_lock:
            self._calls_waiting += 1

        def started() -> Any:
            with self._waiting_lock:
                self._calls_waiting -= 1
            return function(*args)

        return await asyncio.get_running_loop().run_in_executor(self._executor, started)

    async def _serve(self, pending: list[PendingRequest]) -> None:
        """Add every pending request to vLLM (they join its running batch) and make sure the engine is stepped."""
        await self._in_worker(self._add_requests, pending)
        if self._stepper is None or self._stepper.done():
            self._stepper = asyncio.create_task(self._step_until_idle())

    def _add_requests(self, pending: list[PendingRequest]) -> None:
        """Each sample of each prompt of `pending` as its own vLLM request (all params checked before any is added)."""
        planned = []
        for item in pending:
            item.results = [None] * (len(item.prompts) * item.params.n)
            for index, (prompt, seed) in enumerate(zip(item.prompts, item.seeds)):
                for sample in range(item.params.n):
                    params = self.vllm_params(item.params, None if seed is None else seed + sample, len(prompt))
                    params.output_kind = self._final_only
                    planned.append((item, index * item.params.n + sample, prompt, params))
        engine = self.llm.llm_engine
        for item, row, prompt, params in planned:
            request_id = f"skyrl-{next(self._request_ids)}"
            prompt_input = self._tokens_prompt(prompt_token_ids=prompt)
            engine.add_request(request_id, prompt_input, params, lora_request=self._lora_request)
            self._live[request_id] = (item, row, self._rows_left(item))

    def _rows_left(self, item: PendingRequest) -> list[int]:
        """The shared count of `item`'s rows still running (one list object per call)."""
        counter = getattr(item, "_rows_left", None)
        if counter is None:
            counter = [len(item.results)]
            item._rows_left = counter  # type: ignore[attr-defined]
        return counter

    async def _step_until_idle(self) -> None:
        """Step vLLM while requests run; hand each finished call its rows. A failing step fails every running call."""
        try:
            while True:
                finished, running = await self._in_worker(self._step_some)
                for item in finished:
                    if not item.future.done():
                        item.future.set_result(item.results)
                if not running:
                    return
        except Exception as exc:  # noqa: BLE001 - every running call gets the error
            for item in await self._in_worker(self._abort_all):
                if not item.future.done():
                    item.future.set_exception(exc)

    def _step_some(self) -> tuple[list[PendingRequest], bool]:
        """Step until a call finished, nothing runs or another call waits for this thread; returns the finished calls
        and whether requests still run."""
        engine, finished = self.llm.llm_engine, []
        with self.compute_clock("generate"):
            while engine.has_unfinished_requests():
                for output in engine.step():
                    if not output.finished or output.request_id not in self._live:
                        continue
                    item, row, left = self._live.pop(output.request_id)
                    completion = output.outputs[0]
                    versions = token_versions(completion, len(completion.token_ids), self._version)
                    item.results[row] = (*self._row(completion, item.params), versions)
                    left[0] -= 1
                    if left[0] == 0:
                        finished.append(item)
                if finished or self._calls_waiting:
                    break
        return finished, engine.has_unfinished_requests()

    def _abort_all(self) -> list[PendingRequest]:
        """Abort every running request; their calls (once each)."""
        calls = {id(item): item for item, _, _ in self._live.values()}
        self.llm.llm_engine.abort_request(list(self._live), internal=True)
        self._live.clear()
        return list(calls.values())
