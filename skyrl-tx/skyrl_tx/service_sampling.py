"""The service's sampling requests: sampling sessions on a base model or on sampler weights, and sample requests,
queued and run in batches per (base model, weights). Part of `Service` (`skyrl_tx.service`), whose database, hosts
and queue these methods use."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Optional

from skyrl_tx.compute import read_meta
from skyrl_tx.compute_queue import Job
from skyrl_tx.db import SamplingSessionRow
from skyrl_tx.futures import UserError
from skyrl_tx.limits import strict_int
from skyrl_tx.sample_requests import parse_sample_request, sample_cost
from skyrl_tx.wire import encode_sample_response

if TYPE_CHECKING:
    from skyrl_tx.service import Service


class SamplingRequests:
    """`Service`'s sampling requests (see the module docstring)."""

    def _sampling_session(
        self: Service, owner: str, session_id: str, seq: Optional[int], base_model: str, model_path: Optional[str]
    ) -> str:
        sampling_id = f"{session_id}:sample:{seq if seq is not None else uuid.uuid4().hex[:8]}"
        with self.db.session() as s:
            existing = s.get(SamplingSessionRow, sampling_id)
            if existing is None:
                s.add(
                    SamplingSessionRow(
                        sampling_session_id=sampling_id,
                        session_id=session_id,
                        owner=owner,
                        base_model=base_model,
                        model_path=model_path,
                    )
                )
            else:
                existing.base_model, existing.model_path = base_model, model_path
        return sampling_id

    def create_sampling_session(self: Service, owner: str, body: dict[str, Any]) -> str:
        """A sampling session on sampler weights (`model_path`) or on a base model."""
        session_id = body["session_id"]
        self.session_row(owner, session_id)
        model_path, base_model = body.get("model_path"), body.get("base_model")
        if model_path:
            parsed, folder, _ = self.checkpoint(owner, model_path)
            base_model = read_meta(folder)["base_model"]
            model_path = str(parsed)
        elif not base_model:
            raise UserError("create_sampling_session needs model_path or base_model")
        self.host(base_model)
        return self._sampling_session(owner, session_id, body.get("sampling_session_seq_id"), base_model, model_path)

    def sampler(self: Service, owner: str, sampling_session_id: str) -> SamplingSessionRow:
        """The caller's sampling session, or `NotFound`."""
        return self._owned(SamplingSessionRow, sampling_session_id, owner, "sampler")

    def asample(self: Service, owner: str, body: dict[str, Any], raw: bytes) -> tuple[int, int]:
        """Queue a sample request; returns (request_id, num_samples)."""
        if body.get("sampling_session_id"):
            session = self.sampler(owner, body["sampling_session_id"])
            base_model, model_path = session.base_model, session.model_path
            target, seq_id = session.sampling_session_id, body.get("seq_id")
        else:
            base_model, model_path, target, seq_id = body.get("base_model"), body.get("model_path"), None, None
        folder = self.checkpoint(owner, model_path)[1] if model_path else None
        if folder is not None:
            base_model = read_meta(folder)["base_model"]
        if not base_model:
            raise UserError("asample needs sampling_session_id, model_path or base_model")
        host = self.host(base_model)
        job = parse_sample_request(body, host, self.limits)
        if seq_id is not None:
            seq_id = strict_int("seq_id", seq_id)
        cost = sample_cost(job, host)

        def make_job(request_id: int) -> Job:
            return Job(request_id, "sample", batch_key=(base_model, folder), payload=job, owner=owner, cost=cost)

        return self._queue("sample", owner, target, seq_id, raw, make_job), job.num_samples

    def _run_sample_batch(self: Service, key: Any, jobs: list[Job]) -> list[Any]:
        base_model, folder = key
        sampler = self.base_models[base_model].sampler or self.host(base_model)
        results = sampler.sample(folder, [job.payload for job in jobs])
        return [
            (
                encode_sample_response(
                    result.sequences, result.prompt_logprobs, result.topk_prompt, job.payload.topk_sample_logprobs
                ),
                True,
            )
            for job, result in zip(jobs, results)
        ]
