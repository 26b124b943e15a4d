"""`trainer.placement.allocation_mode`: an AReaL-style placement string expanded into the placement keys.

Grammar: `<engine part><sep><trainer part>`, each part `<name>:<dims>`, dims a run of `d<N>` (data-parallel
replicas), `t<N>` (tensor parallel) and, for the trainer, `p<N>` (pipeline stages); an omitted dim is 1.

- `<sep>` is `+` for separate placement (engines and workers on their own devices) or `|` for colocation (they share
  devices and take turns: `colocate_all=true`).
- engine names: `hf`, `vllm`, `sglang`; trainer names: `fsdp` / `fsdp2`, `megatron`.

    vllm:d2+fsdp:d2        2 vLLM engines and 2 FSDP2 ranks on separate devices
    hf:d2|fsdp:d2          the quickstart: 2 hf engines colocated with 2 FSDP2 ranks
    vllm:d1t2+megatron:d2t2   1 vLLM engine over 2 GPUs, Megatron with TP 2 and 2 data-parallel replicas (4 ranks)

The string sets `generator.inference_engine.{backend,num_engines,tensor_parallel_size}`, `trainer.strategy`,
`trainer.placement.{colocate_all,policy_num_nodes,policy_num_gpus_per_node}` (and the ref/critic GPU counts, which
follow the policy's), and for Megatron `trainer.policy.megatron.{tensor,pipeline}_model_parallel_size`. A key also
given explicitly with another value is an error naming both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_train.config.root import SkyRLConfig

ENGINES = ("hf", "vllm", "sglang")
"""Engine backends an allocation string can name (`remote` engines take no devices of this run)."""

STRATEGIES = {"fsdp": "fsdp2", "fsdp2": "fsdp2", "megatron": "megatron"}
"""Trainer names of the string and the `trainer.strategy` each means."""

_PART = re.compile(r"^(?P<name>[a-z0-9_]+):(?P<dims>(?:[dtp]\d+)+)$")
_DIM = re.compile(r"([dtp])(\d+)")
KEY = "trainer.placement.allocation_mode"


class AllocationModeError(ValueError):
    """An allocation string that does not parse or asks for something the trainer cannot do."""


@dataclass(frozen=True)
class Allocation:
    """A parsed allocation string."""

    engine: str
    engine_replicas: int
    engine_tp: int
    strategy: str
    train_replicas: int
    train_tp: int
    train_pp: int
    colocated: bool

    @property
    def train_ranks(self) -> int:
        """Worker processes of the policy: replicas x TP x PP."""
        return self.train_replicas * self.train_tp * self.train_pp


def _dims(part: str, allowed: str) -> tuple[str, dict[str, int]]:
    match = _PART.match(part.strip())
    if match is None:
        raise AllocationModeError(
            f"{KEY}: {part!r} is not `<name>:<dims>` with dims like d2, d2t2 or d1t2p1 (e.g. vllm:d2+fsdp:d2)"
        )
    dims: dict[str, int] = {}
    for letter, number in _DIM.findall(match["dims"]):
        if letter in dims:
            raise AllocationModeError(f"{KEY}: {part!r} gives {letter} twice")
        if letter not in allowed:
            raise AllocationModeError(f"{KEY}: {part!r}: `{letter}` is not a dimension of this part ({allowed})")
        if int(number) < 1:
            raise AllocationModeError(f"{KEY}: {part!r}: {letter}{number} must be at least 1")
        dims[letter] = int(number)
    return match["name"], dims


def parse_allocation_mode(text: str) -> Allocation:
    """Parse `text` (see the module docstring); `AllocationModeError` names what is wrong."""
    separators = [sep for sep in "+|" if sep in text]
    if len(separators) != 1 or text.count(separators[0]) != 1:
        raise AllocationModeError(
            f"{KEY}={text!r}: expected an engine part and a trainer part joined by `+` (separate) or `|` (colocated),"
            " e.g. vllm:d2+fsdp:d2"
        )
    sep = separators[0]
    engine_part, train_part = text.split(sep)
    engine, engine_dims = _dims(engine_part, "dt")
    trainer, train_dims = _dims(train_part, "dtp")
    if engine not in ENGINES:
        raise AllocationModeError(f"{KEY}: engine {engine!r} is not one of {list(ENGINES)}")
    if trainer not in STRATEGIES:
        raise AllocationModeError(f"{KEY}: trainer {trainer!r} is not one of {sorted(STRATEGIES)}")
    allocation = Allocation(
        engine=engine,
        engine_replicas=engine_dims.get("d", 1),
        engine_tp=engine_dims.get("t", 1),
        strategy=STRATEGIES[trainer],
        train_replicas=train_dims.get("d", 1),
        train_tp=train_dims.get("t", 1),
        train_pp=train_dims.get("p", 1),
        colocated=sep == "|",
    )
    if allocation.engine == "hf" and allocation.engine_tp > 1:
        raise AllocationModeError(
            f"{KEY}: the hf engine has no tensor parallelism (t{allocation.engine_tp}); use sglang (separate `+`)"
        )
    if allocation.strategy == "fsdp2" and (allocation.train_tp > 1 or allocation.train_pp > 1):
        raise AllocationModeError(
            f"{KEY}: fsdp2 shards over data-parallel ranks only (got t{allocation.train_tp} p{allocation.train_pp}); "
            "use megatron:d<N>t<N> for tensor parallelism"
        )
    if allocation.colocated and allocation.engine_replicas * allocation.engine_tp != allocation.train_ranks:
        raise AllocationModeError(
            f"{KEY}={text!r}: colocation (`|`) shares devices, so the engines' devices (d x t = "
            f"{allocation.engine_replicas * allocation.engine_tp}) must equal the trainer's ({allocation.train_ranks})"
        )
    return allocation


def allocation_settings(allocation: Allocation) -> dict[str, Any]:
    """The config keys (dotted paths) an allocation sets, with their values."""
    settings: dict[str, Any] = {
        "generator.inference_engine.backend": allocation.engine,
        "generator.inference_engine.num_engines": allocation.engine_replicas,
        "generator.inference_engine.tensor_parallel_size": allocation.engine_tp,
        "trainer.strategy": allocation.strategy,
        "trainer.placement.colocate_all": allocation.colocated,
        "trainer.placement.policy_num_nodes": 1,
        "trainer.placement.policy_num_gpus_per_node": allocation.train_ranks,
        "trainer.placement.ref_num_gpus_per_node": allocation.train_ranks,
        "trainer.placement.critic_num_gpus_per_node": allocation.train_ranks,
    }
    if allocation.strategy == "megatron":
        settings["trainer.policy.megatron.tensor_model_parallel_size"] = allocation.train_tp
        settings["trainer.policy.megatron.pipeline_model_parallel_size"] = allocation.train_pp
    return settings


def _get(obj: Any, path: str) -> Any:
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def _set(obj: Any, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for name in parents:
        obj = getattr(obj, name)
    setattr(obj, last, value)


def apply_allocation_mode(cfg: SkyRLConfig) -> None:
    """Expand `trainer.placement.allocation_mode` (when set) into the keys it determines, in place. A key already
    set to another value than both its default and the allocation's is an error naming both."""
    text = cfg.trainer.placement.allocation_mode
    if text is None:
        return
    defaults = type(cfg)()
    settings = allocation_settings(parse_allocation_mode(text))
    clashes = []
    for path, value in settings.items():
        current = _get(cfg, path)
        if current != value and current != _get(defaults, path):
            clashes.append(f"{path}={current!r} (the allocation gives {value!r})")
    if clashes:
        raise AllocationModeError(f"{KEY}={text!r} disagrees with keys given explicitly: {'; '.join(clashes)}")
    for path, value in settings.items():
        _set(cfg, path, value)
