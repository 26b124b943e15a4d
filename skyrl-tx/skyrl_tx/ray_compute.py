"""The service's compute on Ray: `RayLoraHost` drives N data-parallel `MultiLoraWorker` ranks in a skyrl_train
`WorkerGroup` (the trainer's rank machinery: rendezvous, placement, threads, failure handling), each holding a full
`LoraHost` replica of the base model, or with `sharding="fsdp2"` an FSDP2 shard of its weights (one GPU per rank on
CUDA), in place of one `LoraHost` in the server process. Sharded ranks all take part in every forward and sample call
(see `skyrl_tx.lora_worker`).

- Adapter operations (add, remove, load) run on every rank, with the same initialisation seed, so the replicas stay
  identical.
- `forward_backward` splits the data into contiguous ranges of about equal token counts, one per rank
  (`skyrl_train.workers.dispatch.balanced_ranges`). Tinker losses are sums over tokens, so the ranks' gradients add up
  to the whole batch's; per-token logprobs come back in datum order and the metrics are merged by their reduction
  (`merge_shard_metrics`, through skyrl_train's `combine_rank_metrics`).
- `optim_step` sums the gradients over the ranks (one all-reduce), then every rank takes the same AdamW step.
- `sample` spreads the jobs over the ranks (each rank's `hf` engine decodes its share); results come back in job
  order. Sampler weights travel to a rank as file bytes the first time it needs them.
- `save` takes rank 0's files; the server writes them.

A rank whose actor or node dies fails the call with skyrl_train's `WorkerGroupError` naming it; a method that raised
re-raises its own exception here (`remote_errors_as_raised`), so a `WireError` stays a user error. What crosses the
actor boundary is plain Python and numpy data, never a CUDA tensor.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from skyrl_train.models.loading import load_tokenizer
from skyrl_train.workers.accounting import Combiner, combine_rank_metrics, largest, smallest, total, weighted_mean
from skyrl_train.workers.dispatch import balanced_ranges
from skyrl_tx.checkpoint_files import read_files, write_files
from skyrl_tx.compute import (
    ADAPTER_FILE,
    META_FILE,
    OPTIMIZER_FILE,
    ComputeHost,
    LoraSpec,
    SampleJob,
    SampleResult,
    read_meta,
    sampler_key,
)
from skyrl_tx.losses import loss_spec, mean_metric_count
from skyrl_tx.wire import TrainDatum, WireError

log = logging.getLogger("skyrl_tx")


METRIC_MERGES: dict[str, Combiner] = {":sum": total, ":mean": weighted_mean, ":min": smallest, ":max": largest}
"""How each reduction a metric name ends in (`tinker_loss` names them `name:reduction`) merges over shards of a batch:
`:sum` adds, `:mean` is the mean weighted by the tokens each shard averaged over, `:min`/`:max` take the extreme."""


def merge_shard_metrics(parts: Sequence[dict[str, float]], counts: Sequence[float]) -> dict[str, float]:
    """The metrics of a whole batch from those of its shards, `counts` being the tokens each shard's means averaged
    over (`mean_metric_count`): merged by `METRIC_MERGES`; an unknown reduction is refused rather than merged wrongly.
    A shard whose means averaged over no token is left out (its loss mask is empty, so its sums are 0 and its means
    and extremes placeholders), unless every shard is such a one."""
    if len(parts) != len(counts):
        raise ValueError(f"counts: {len(counts)} for {len(parts)} shards' metrics; expected one per shard")
    kept = [index for index, count in enumerate(counts) if count > 0] or list(range(len(counts)))
    return combine_rank_metrics(
        [parts[index] for index in kept], [counts[index] for index in kept], METRIC_MERGES, default=None
    )


@contextlib.contextmanager
def remote_errors_as_raised() -> Iterator[None]:
    """Re-raise an actor method's own exception instead of Ray's wrapper around it (`RayTaskError`, whose type name
    and message carry the remote traceback): the service reports it to the client by its type and message, so a
    `WireError` raised on a rank reads as it would in one process. Other failures (a dead actor) pass unchanged."""
    import ray

    try:
        yield
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            raise cause from exc
        raise


class RayLoraHost(ComputeHost):
    """`LoraHost`'s methods, computed by a `WorkerGroup` of `workers` data-parallel ranks (see the module docstring).

    `device` is `cpu` or `cuda` (one GPU per rank, which Ray assigns). Ray must be initialised first. The base
    model's `path` must be readable on every node that runs a rank (the server reads only its tokenizer).
    """

    def __init__(
        self,
        name: str,
        path: str,
        workers: int,
        device: str = "cpu",
        dtype: str = "float32",
        max_sampler_adapters: int = 16,
        cpus_per_rank: int = 1,
        sharding: str = "replicate",
    ) -> None:
        import ray

        from skyrl_train.workers.group import WorkerGroup
        from skyrl_tx.lora_worker import ROLE, MultiLoraWorker, worker_config

        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if sharding not in ("replicate", "fsdp2"):
            raise ValueError(f"sharding must be 'replicate' or 'fsdp2', got {sharding!r}")
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda' (Ray gives each rank its own GPU), got {device!r}")
        if not ray.is_initialized():
            raise RuntimeError("RayLoraHost needs Ray: call ray.init() (or skyrl_tx.ray_compute.start_ray) first")
        self.name, self.path, self.workers, self.device = name, path, workers, device
        self.sharded = sharding == "fsdp2"
        self.tokenizer = load_tokenizer(path, padding_side="left")
        self.group: Optional[WorkerGroup] = WorkerGroup(
            ROLE,
            MultiLoraWorker,
            workers,
            worker_config(path, device, dtype, self.sharded),
            num_cpus_per_worker=cpus_per_rank,
            num_gpus_per_worker=1 if device == "cuda" else 0,
        )
        try:
            self._on_all("init_model", path, None, name, dtype, max_sampler_adapters)
            infos = self._on_all("host_info")
        except BaseException:
            self.close()
            raise
        info = infos[0]
        self.vocab_size, self.max_context = int(info["vocab_size"]), int(info["max_context"])
        self.pad_id, self.model_type = int(info["pad_id"]), str(info["model_type"])
        self.rank_devices = [str(each["device"]) for each in infos]
        self.adapters: dict[str, LoraSpec] = {}
        log.info("%s: %d Ray ranks (%s) on %s (%s)", name, workers, sharding, device, ", ".join(self.rank_devices))

    def _call(self, method: str, calls: dict[int, tuple]) -> list[Any]:
        """`method(*args)` on each rank of `calls` (rank -> args) at once; the results in the order of `calls`."""
        actors = self._group().actors
        refs = [getattr(actors[rank], method).remote(*args) for rank, args in calls.items()]
        with remote_errors_as_raised():
            return self._group().wait_all(refs, method, ranks=list(calls))

    def _on_all(self, method: str, *args: Any) -> list[Any]:
        return self._call(method, {rank: args for rank in range(self.workers)})

    def _group(self) -> Any:
        if self.group is None:
            raise RuntimeError(f"{self.name}: the Ray ranks were closed")
        return self.group

    def _known(self, name: str) -> None:
        if name not in self.adapters:
            raise KeyError(name)

    # ----- adapters ----------------------------------------------------------------------------------------------
    def add_adapter(self, name: str, spec: LoraSpec) -> None:
        """A fresh adapter on every rank; one seed drawn here initialises it everywhere when the spec has none."""
        self._on_all("add_adapter", name, spec, secrets.randbelow(2**31))
        self.adapters[name] = spec

    def remove_adapter(self, name: str) -> None:
        """Drop an adapter and its optimizer on every rank."""
        self._on_all("remove_adapter", name)
        self.adapters.pop(name, None)

    # ----- training ----------------------------------------------------------------------------------------------
    def forward_backward(
        self, name: str, data: list[TrainDatum], loss_fn: str, config: dict[str, Any], forward_only: bool
    ) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        """Each rank runs its contiguous shard; logprobs come back in datum order and metrics merged. The data is
        checked here first, so bad input fails before any rank accumulates a gradient."""
        self._known(name)
        spec, _ = loss_spec(loss_fn, config)
        self.padded_batch(data, spec.inputs)
        shards = balanced_ranges([len(datum.tokens) for datum in data], self.workers)
        calls = {
            rank: (name, data[start:end], loss_fn, config, forward_only) for rank, (start, end) in enumerate(shards)
        }
        for rank in self.idle(shards):  # every sharded rank takes part in the weight gathers, with data or without
            calls[rank] = (name, [], loss_fn, config, forward_only)
        parts = self._call("forward_backward", calls)[: len(shards)]
        outputs = [output for shard_outputs, _ in parts for output in shard_outputs]
        counts = [
            sum(mean_metric_count(loss_fn, datum.inputs, len(datum.tokens)) for datum in data[start:end])
            for start, end in shards
        ]
        return outputs, merge_shard_metrics([metrics for _, metrics in parts], counts)

    def optim_step(self, name: str, adam: dict[str, float]) -> dict[str, float]:
        """Every rank sums the gradients over the group and takes the same AdamW step; rank 0's metrics."""
        self._known(name)
        results = self._on_all("optim_step", name, adam)
        if any(result != results[0] for result in results[1:]):
            log.error("%s: ranks disagree after optim_step on %s: %s", self.name, name, results)
        return results[0]

    # ----- checkpoints -------------------------------------------------------------------------------------------
    def save(self, name: str, directory: Path, with_optimizer: bool) -> int:
        """Rank 0's adapter files, written into `directory` here (the service renames the folder into place)."""
        self._known(name)
        files = self._call("save", {0: (name, with_optimizer)})[0]
        return write_files(directory, files)

    def load(self, name: str, directory: Path, with_optimizer: bool) -> LoraSpec:
        """The checkpoint's files are read here and sent to every rank, which loads them as `LoraHost.load` does."""
        import ray

        spec = LoraSpec(**read_meta(directory)["lora"])
        names = (ADAPTER_FILE, META_FILE)
        if with_optimizer:
            if not (directory / OPTIMIZER_FILE).is_file():
                raise WireError(f"{directory.name}: this checkpoint holds no optimizer state (no optim_step before it)")
            names += (OPTIMIZER_FILE,)
        files = ray.put(read_files(directory, names))
        self._on_all("load", name, files, with_optimizer, secrets.randbelow(2**31))
        self.adapters[name] = spec
        return spec

    # ----- sampling ----------------------------------------------------------------------------------------------
    def sample(self, sampler_dir: Optional[Path], jobs: list[SampleJob]) -> list[SampleResult]:
        """Contiguous shards of the jobs (about equal numbers of samples) run on the ranks at once; results in job
        order. A sampler folder is known to the ranks by its path and the time its weights were written, so weights
        saved again under the same name are sent again."""
        import ray

        key = None
        if sampler_dir is not None:
            key = sampler_key(sampler_dir)
        shards = balanced_ranges([job.num_samples for job in jobs], self.workers)
        if self.sharded and key is not None:  # every rank gathers the base: each needs the sampler's files first
            self._mirror_everywhere(key, sampler_dir)
        calls = {rank: (key, None, jobs[start:end]) for rank, (start, end) in enumerate(shards)}
        for rank in self.idle(shards):
            calls[rank] = (key, None, [])
        results = self._call("sample", calls)[: len(shards)]
        missing = [index for index, result in enumerate(results) if result is None]
        if missing:
            assert sampler_dir is not None
            files = ray.put(read_files(sampler_dir, (ADAPTER_FILE, META_FILE)))
            again = self._call("sample", {rank: (key, files, jobs[slice(*shards[rank])]) for rank in missing})
            for index, result in zip(missing, again):
                results[index] = result
        return [result for shard_results in results for result in shard_results]

    def _mirror_everywhere(self, key: str, sampler_dir: Path) -> None:
        import ray

        have = self._on_all("has_sampler", key)
        if not all(have):
            files = ray.put(read_files(sampler_dir, (ADAPTER_FILE, META_FILE)))
            self._call("mirror", {rank: (key, files) for rank, held in enumerate(have) if not held})

    def idle(self, shards: list[tuple[int, int]]) -> list[int]:
        """The ranks a sharded call must still reach though its shards left them without work (the last ones); none
        when the ranks hold the whole base (they need no peer to compute)."""
        return list(range(len(shards), self.workers)) if self.sharded else []

    # ----- inspection and shutdown -------------------------------------------------------------------------------
    def base_numels(self) -> list[int]:
        """Elements of the base weights each rank holds (rank order): the whole model each, or a shard with FSDP2."""
        return self._on_all("base_numel")

    def adapter_states(self, name: str) -> list[dict[str, np.ndarray]]:
        """Every rank's copy of adapter `name`'s weights (float32 numpy by parameter name), rank order."""
        self._known(name)
        return self._on_all("adapter_state", name)

    def close(self) -> None:
        """End the ranks: leave the process group and delete their files (waiting up to 30 s), then kill them."""
        import ray

        group, self.group = self.group, None
        if group is None or not ray.is_initialized():
            return
        try:
            ray.get(group.submit_all("close"), timeout=30)
        except Exception as exc:  # a dead or stuck rank is killed below all the same
            log.warning("%s: a Ray rank did not close cleanly: %s", self.name, exc)
        group.shutdown()


def start_ray(address: Optional[str]) -> bool:
    """Connect to the Ray cluster at `address` (`auto`, `host:port`, `ray://...`), or start a local Ray without its
    dashboard when None; returns whether this process started Ray (and should shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address)
        return False
    ray.init(include_dashboard=False)
    return True


RAY_DEVICES = ("auto", "cpu", "cuda")
"""The `--device` values `--compute ray` takes (a numbered `cuda:N` is not one: Ray gives each rank its own GPU)."""


def resolve_ray_device(device: str, cluster_gpus: float) -> str:
    """The ranks' device for `--device`, resolved as skyrl_train resolves `trainer.device` (which the ranks' worker
    config carries): `cpu` and `cuda` are the user's choice and stay as given (CPU ranks on a GPU cluster included);
    `auto` is `cuda` when the ranks can get a whole GPU, i.e. the cluster has one (the ranks run on the cluster, not
    in this process), else `cpu`."""
    if device not in RAY_DEVICES:
        raise ValueError(f"device must be one of {RAY_DEVICES} with --compute ray, got {device!r}")
    if device != "auto":
        return device
    return "cuda" if cluster_gpus >= 1 else "cpu"


def ray_device(device: str, workers: int, base_models: int = 1, samplers: int = 0) -> str:
    """The ranks' device for `--device` on the connected cluster (`resolve_ray_device`); refuses (SystemExit naming
    the flags) `cuda:N`, another name, and a cluster without room for `workers` ranks and `samplers` vLLM sampler
    actors per base model (one GPU, or one CPU, each)."""
    import ray

    if device.startswith("cuda:"):
        raise SystemExit(
            f"--device {device} picks a GPU of this process; with --compute ray every rank gets its own GPU from Ray: "
            "use --device cuda"
        )
    if device not in RAY_DEVICES:
        raise SystemExit(f"--device must be cpu, cuda or auto with --compute ray, got {device!r}")
    resources = ray.cluster_resources()
    gpus, cpus = float(resources.get("GPU", 0)), float(resources.get("CPU", 0))
    device = resolve_ray_device(device, gpus)
    need = (workers + samplers) * base_models
    have, unit = (gpus, "GPU") if device == "cuda" else (cpus, "CPU")
    if have < need:
        actors = f"--ray-workers {workers}" + (f" + {samplers} vLLM sampler" if samplers else "")
        raise SystemExit(
            f"{actors} x {base_models} base model(s) on {device} needs {need} {unit}s; the Ray cluster "
            f"has {have:g} (one {unit} per rank{' and sampler' if samplers else ''})"
        )
    return device
