"""Imports between the rooms of skyrl_train flow one way: a room imports only rooms of lower layers, so no cycle forms.

A room is a subpackage (`skyrl_train.inference`) or a top-level module (`skyrl_train.trainer`). Every `import` and
`from ... import` of every module counts, at module level, inside functions and under `TYPE_CHECKING` alike: a
lazy import is still a dependency. Placing a new room means adding it to `LAYERS`; importing upward means moving
the shared piece down (a protocol, a helper) rather than editing this table.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "skyrl_train"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE
ROOT = "<package>"
"""The room of `skyrl_train/__init__.py` (it holds only the version, so it may be imported from anywhere)."""

LAYERS: list[tuple[str, ...]] = [
    (ROOT, "utils", "gpu_calls"),
    ("config",),
    ("algorithms", "dataset"),
    ("models",),
    ("weight_sync",),
    ("inference",),
    ("generators", "serving"),
    ("training_batch", "evaluation", "health", "placement"),
    ("workers",),
    ("rewards", "rollouts", "trainer_checkpoints"),
    ("weight_publisher",),
    ("trainer",),
    ("recipes",),
    ("entrypoints",),
]
"""Bottom to top. A module may import its own room and the rooms of lower layers, never a room of its own layer or
of a higher one. Why the order: weight sync installs into anything with `weight_version`/`update_weights` (its
`WeightTarget` protocol), so the engine actors build receivers and not the reverse; the workers host the sending half
and run the algorithms; the trainer drives workers, engines and rollouts; recipes (the warm start) and entrypoints
compose everything."""

RINGS: dict[str, tuple[str, ...]] = {
    "core": (
        *(ROOT, "utils", "gpu_calls", "config", "algorithms", "dataset", "models", "weight_sync", "inference"),
        *("training_batch", "placement", "workers"),
    ),
    "loop": (
        *("generators", "evaluation", "health", "rewards", "rollouts", "trainer_checkpoints", "weight_publisher"),
        "trainer",
    ),
    "apps": ("serving", "recipes", "entrypoints"),
}
"""The three rings, inside out: `core` is the library skyrl-tx and skyrl-agent build
on (models, engines, workers, algorithms, weight sync, config); `loop` is the RL training loop over it; `apps` are
what runs the loop or serves models (the OpenAI server, the doctor, recipes, entrypoints). Imports point inward only:
core imports neither loop nor apps, loop does not import apps."""

RING_CONTRACTS: dict[str, str] = {
    "skyrl_train.generators.types": (
        "the rollout data contract (GeneratorInput, Trajectory, GeneratorOutput): plain dataclasses that the core's "
        "TrainingBatch is built from, with no loop logic"
    ),
}
"""Modules of an outer ring that count as core, with the reason."""

LATE_BOUND: dict[str, str] = {
    "skyrl_train.config.registered_names": (
        "checks every config value that names a registry entry against the live registries of all rooms before Ray "
        "starts; it imports them inside its functions so that importing skyrl_train.config stays cheap"
    ),
}
"""Modules allowed to import upward, inside functions only, with the reason."""


@dataclass(frozen=True)
class ImportEdge:
    """One import statement of one module that names a skyrl_train module."""

    module: str
    target: str
    line: int
    in_function: bool


def module_name(path: Path, package_dir: Path) -> str:
    """`skyrl_train.a.b` for `<package_dir>/a/b.py` (a package's `__init__.py` is the package itself)."""
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def room_of(module: str) -> str:
    """The room of a skyrl_train module: its first component under the package, or `ROOT` for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _import_nodes(node: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement below `node`, with whether it sits inside a function."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        else:
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from _import_nodes(child, nested)


def import_edges(package_dir: Path) -> list[ImportEdge]:
    """Every import of a `skyrl_train` module in every module under `package_dir`."""
    edges = []
    for path in sorted(package_dir.rglob("*.py")):
        module = module_name(path, package_dir)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, in_function in _import_nodes(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                targets = [_absolute(node, module, is_package=path.name == "__init__.py")]
            for target in targets:
                if target == PACKAGE or target.startswith(PACKAGE + "."):
                    edges.append(ImportEdge(module, target, node.lineno, in_function))
    return edges


def layer_of(room: str) -> int:
    """Index of `room` in `LAYERS`; a room missing from the table is an error naming it."""
    for index, rooms in enumerate(LAYERS):
        if room in rooms:
            return index
    raise KeyError(f"room {room!r} of {PACKAGE} is not in LAYERS; place it in the layer its imports allow")


def import_violations(package_dir: Path) -> list[str]:
    """One message per import that goes sideways or upward between rooms (see `LAYERS` and `LATE_BOUND`)."""
    problems = []
    for edge in import_edges(package_dir):
        source, target = room_of(edge.module), room_of(edge.target)
        if source == target:
            continue
        if layer_of(target) < layer_of(source):
            continue
        if edge.in_function and edge.module in LATE_BOUND:
            continue
        direction = "sideways" if layer_of(target) == layer_of(source) else "upward"
        problems.append(
            f"{edge.module}:{edge.line} imports {edge.target}: {direction} from {source} (layer {layer_of(source)}) "
            f"to {target} (layer {layer_of(target)})"
        )
    return problems


def ring_of(module: str) -> int:
    """0 (core), 1 (loop) or 2 (apps): the ring of a module's room, or core for a `RING_CONTRACTS` module."""
    if any(module == name or module.startswith(name + ".") for name in RING_CONTRACTS):
        return 0
    room = room_of(module)
    for index, rooms in enumerate(RINGS.values()):
        if room in rooms:
            return index
    raise KeyError(f"room {room!r} of {PACKAGE} is in no ring of RINGS")


def ring_violations(package_dir: Path) -> list[str]:
    """One message per import from an inner ring to an outer one (outside `LATE_BOUND` functions)."""
    rings = list(RINGS)
    problems = []
    for edge in import_edges(package_dir):
        if edge.in_function and edge.module in LATE_BOUND:
            continue
        source, target = ring_of(edge.module), ring_of(edge.target)
        if target > source:
            problems.append(
                f"{edge.module}:{edge.line} imports {edge.target}: from {rings[source]} out to {rings[target]}"
            )
    return problems


def test_every_room_is_in_one_ring():
    rooms = {room for layer in LAYERS for room in layer}
    ringed = [room for rooms in RINGS.values() for room in rooms]
    assert sorted(ringed) == sorted(set(ringed)) and set(ringed) == rooms


def test_imports_point_inward_between_the_rings():
    assert ring_violations(PACKAGE_DIR) == []


def test_the_ring_checker_reports_an_outward_import(tmp_path):
    _write(tmp_path, "__init__.py", '__version__ = "0"\n')
    _write(tmp_path, "workers/worker.py", "from skyrl_train.rollouts import sources\n")
    _write(tmp_path, "generators/types.py", "from skyrl_train.inference import types\n")
    _write(tmp_path, "training_batch.py", "from skyrl_train.generators.types import Trajectory\n")
    problems = ring_violations(tmp_path / PACKAGE)
    assert problems == ["skyrl_train.workers.worker:1 imports skyrl_train.rollouts: from core out to loop"]


def test_other_packages_import_only_public_names_of_skyrl_train():
    private = []
    for package in ("skyrl-tx/skyrl_tx", "skyrl-agent/skyrl_agent"):
        for path in sorted((PACKAGE_DIR.parents[1] / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node, _ in _import_nodes(tree):
                if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(PACKAGE):
                    continue
                names = [*node.module.split("."), *(alias.name for alias in node.names)]
                if any(name.startswith("_") for name in names):
                    private.append(f"{path.relative_to(PACKAGE_DIR.parents[1])}:{node.lineno} {node.module}")
    assert private == [], "make the name public in skyrl_train (or stop using it)"


def test_every_room_of_the_package_is_placed_in_a_layer():
    rooms = {room_of(module_name(path, PACKAGE_DIR)) for path in PACKAGE_DIR.rglob("*.py")}
    placed = {room for layer in LAYERS for room in layer}
    assert rooms - placed == set(), "place these rooms in LAYERS"
    assert placed - rooms == set(), "LAYERS names rooms that no longer exist"


def test_imports_between_rooms_only_go_down_the_layers():
    assert import_violations(PACKAGE_DIR) == []


def test_late_bound_modules_exist_and_import_upward_only_inside_functions():
    edges = import_edges(PACKAGE_DIR)
    for module in LATE_BOUND:
        own = [edge for edge in edges if edge.module == module]
        assert own, f"{module} is in LATE_BOUND but has no skyrl_train imports (or no longer exists)"
        source = layer_of(room_of(module))
        upward = [e for e in own if room_of(e.target) != room_of(module) and layer_of(room_of(e.target)) >= source]
        assert upward, f"{module} no longer imports upward: drop it from LATE_BOUND"
        assert all(edge.in_function for edge in upward), [edge for edge in upward if not edge.in_function]


def _write(root: Path, relative: str, text: str) -> None:
    path = root / PACKAGE / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    ("relative", "text", "expected"),
    [
        (
            "models/loading.py",
            "from skyrl_train.inference.base import InferenceEngine\n",
            "skyrl_train.models.loading:1 imports skyrl_train.inference.base: upward from models (layer 3) to "
            "inference (layer 5)",
        ),
        (
            "weight_sync/base.py",
            "def f():\n    from ..workers import distributed\n",
            "skyrl_train.weight_sync.base:2 imports skyrl_train.workers: upward from weight_sync (layer 4) to workers",
        ),
        (
            "rewards/scorer.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import skyrl_train.rollouts\n",
            "skyrl_train.rewards.scorer:3 imports skyrl_train.rollouts: sideways",
        ),
        (
            "config/root.py",
            "import skyrl_train.trainer\n",
            "skyrl_train.config.root:1 imports skyrl_train.trainer: upward",
        ),
    ],
)
def test_the_checker_reports_upward_and_sideways_imports(tmp_path, relative, text, expected):
    _write(tmp_path, "__init__.py", '__version__ = "0"\n')
    _write(tmp_path, "utils/__init__.py", "")
    _write(tmp_path, "inference/base.py", "from skyrl_train.utils import registry\nimport skyrl_train\n")
    _write(tmp_path, relative, text)
    problems = import_violations(tmp_path / PACKAGE)
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_a_room_missing_from_the_table_is_named():
    with pytest.raises(KeyError, match="room 'plugins' of skyrl_train is not in LAYERS"):
        layer_of("plugins")
