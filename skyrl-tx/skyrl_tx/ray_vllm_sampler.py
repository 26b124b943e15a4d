"""`--sampler vllm` with `--compute ray`: the vLLM sampler of a base model runs in a Ray actor of its own (one GPU on
CUDA), next to the training ranks, instead of in the server process.

Sampler weights travel to the actor as file bytes the first time it needs them (as they do to the training ranks),
so the actor's node needs no shared filesystem. The actor mirrors each sampler folder under a name derived from the
server's path and stamps the adapter file with the server's write time: a sampler saved again under the same name
replaces its adapter in vLLM, as in one process. What crosses the actor boundary is plain Python and numpy data.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional

from skyrl_tx.checkpoint_files import Files, read_files, write_files
from skyrl_tx.compute import ADAPTER_CONFIG, ADAPTER_FILE, SampleJob, SampleResult, sampler_key
from skyrl_tx.ray_compute import remote_errors_as_raised

log = logging.getLogger("skyrl_tx")


class VLLMSamplerActor:
    """A Ray actor holding one `VLLMSampler` and its mirrors of the server's sampler folders."""

    def __init__(self, path: str, max_context: int, options: dict[str, Any]) -> None:
        """`options`: `VLLMSampler`'s keyword arguments; the actor's GPU is its own, so vLLM takes 0.8 of it."""
        from skyrl_tx.vllm_sampler import VLLMSampler

        self.sampler = VLLMSampler(path, max_context, **{"gpu_memory_utilization": 0.8, **options})
        self.scratch = Path(tempfile.mkdtemp(prefix="skyrl-tx-vllm-"))
        self.mirrors: OrderedDict[str, str] = OrderedDict()
        """Server sampler folder -> the key (`folder@mtime`) of the files mirrored for it, least recently used first."""

    def _mirror_path(self, folder: str) -> Path:
        """Where this actor mirrors the server's sampler `folder` (one place per folder, whatever its saves)."""
        return self.scratch / hashlib.sha256(folder.encode()).hexdigest()[:24]

    def ready(self) -> bool:
        """True once vLLM is up (a failed start raises from here)."""
        return True

    def sample(
        self, folder: Optional[str], key: Optional[str], files: Optional[Files], jobs: list[SampleJob]
    ) -> Optional[list[SampleResult]]:
        """Sample the server's sampler `folder` (None: the base model). Returns None, asking for the `files` of
        `key`, when this actor has not mirrored that save yet."""
        if folder is None:
            return self.sampler.sample(None, jobs)
        mirror = self._mirror_path(folder)
        if self.mirrors.get(folder) != key:
            if files is None or key is None:
                return None
            write_files(mirror, files)
            written_ns = int(key.rsplit("@", 1)[1])
            os.utime(mirror / ADAPTER_FILE, ns=(written_ns, written_ns))  # the sampler keys adapters by write time
            self.mirrors[folder] = key
        self.mirrors.move_to_end(folder)
        results = self.sampler.sample(mirror, jobs)
        while len(self.mirrors) > self.sampler.max_cpu_loras:
            evicted, _ = self.mirrors.popitem(last=False)
            shutil.rmtree(self._mirror_path(evicted), ignore_errors=True)
        return results

    def close(self) -> None:
        """Release vLLM and delete the mirrored files."""
        self.sampler.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


class RayVLLMSampler:
    """The `Sampler` the service calls: forwards to a `VLLMSamplerActor` (Ray must be initialised first).

    `options` are `VLLMSampler`'s keyword arguments (`device` `cpu` or `cuda`, `dtype`, `max_lora_rank`, ...); the
    actor gets `cpus` CPUs (vLLM's threads) and, on `cuda`, one GPU of its own, which Ray assigns.
    """

    def __init__(self, path: str, max_context: int, cpus: int = 1, **options: Any) -> None:
        import ray

        device = options.get("device", "cpu")
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda' (Ray gives the actor its own GPU), got {device!r}")
        actor = ray.remote(VLLMSamplerActor).options(num_cpus=cpus, num_gpus=1 if device == "cuda" else 0)
        self.actor = actor.remote(path, max_context, {**options, "num_threads": cpus})
        try:
            with remote_errors_as_raised():
                ray.get(self.actor.ready.remote())
        except BaseException:
            self.close()
            raise

    def sample(self, sampler_dir: Optional[Path], jobs: list[SampleJob]) -> list[SampleResult]:
        """Run sampling jobs of one sampler (saved adapter weights, or the base model for None) on the actor."""
        import ray

        folder = None if sampler_dir is None else str(sampler_dir)
        key = None if sampler_dir is None else sampler_key(sampler_dir)
        with remote_errors_as_raised():
            results = ray.get(self.actor.sample.remote(folder, key, None, jobs))
            if results is None:
                assert sampler_dir is not None
                files = ray.put(read_files(sampler_dir, (ADAPTER_FILE, ADAPTER_CONFIG)))
                results = ray.get(self.actor.sample.remote(folder, key, files, jobs))
        return results

    def close(self) -> None:
        """End the actor (waiting up to 30 s for vLLM to shut down), then kill it."""
        import ray

        actor, self.actor = self.actor, None
        if actor is None or not ray.is_initialized():
            return
        try:
            ray.get(actor.close.remote(), timeout=30)
        except Exception as exc:  # a dead or stuck actor is killed below all the same
            log.warning("the vLLM sampler actor did not close cleanly: %s", exc)
        ray.kill(actor)
