"""A library's API read from its source with `ast`, without importing it: the signatures of its functions and classes
and the attributes of its classes, from a wheel or an installed directory.

What GPU-only code calls (SGLang, parts of vLLM, NCCL classes missing from torch's CPU build) does not import on a CPU
machine, but its source can still be read: `LibrarySource.signatures("pkg.mod.Class.method")` gives
`inspect.Signature`s that `bind` our call's arguments, as `inspect.signature` would for an importable callable;
`Library` prefers `inspect` where the library imports and falls back to the source. `tests/test_gpu_calls.py` checks
`skyrl_train.gpu_calls` with it.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

DEFINITIONS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


class Missing(LookupError):
    """The library has no such module, callable or attribute."""


def dotted_name(node: ast.AST) -> Optional[str]:
    """`a.b.c` for a Name/Attribute chain; a call inside the chain is kept as `f()`; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return None if base is None else f"{base}.{node.attr}"
    if isinstance(node, ast.Call):
        base = dotted_name(node.func)
        return None if base is None else f"{base}()"
    return None


def decorated(node: ast.AST, name: str) -> bool:
    """True when `node` carries the decorator `name` (e.g. `staticmethod`)."""
    return any(dotted_name(decorator) == name for decorator in getattr(node, "decorator_list", []))


def signature_of(node: ast.FunctionDef | ast.AsyncFunctionDef, drop_first: bool) -> inspect.Signature:
    """An `inspect.Signature` of a def's parameters (defaults are placeholders: only their presence matters);
    `drop_first` leaves out `self`/`cls`."""
    args, kind = node.args, inspect.Parameter
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [
        kind(
            arg.arg,
            kind.POSITIONAL_ONLY if i < len(args.posonlyargs) else kind.POSITIONAL_OR_KEYWORD,
            default=kind.empty if default is None else ...,
        )
        for i, (arg, default) in enumerate(zip(positional, defaults))
    ]
    if args.vararg:
        params.append(kind(args.vararg.arg, kind.VAR_POSITIONAL))
    params += [
        kind(arg.arg, kind.KEYWORD_ONLY, default=kind.empty if default is None else ...)
        for arg, default in zip(args.kwonlyargs, args.kw_defaults)
    ]
    if args.kwarg:
        params.append(kind(args.kwarg.arg, kind.VAR_KEYWORD))
    return inspect.Signature(params[1:] if drop_first and params else params)


class LibrarySource:
    """The source files of one library, by path inside its root (`pkg/mod.py`), parsed on demand.

    Args:
        read: path -> file text, or None when the file does not exist.
        paths: every file path (for listing a package's modules).
        describe: where the files come from (named in errors).
    """

    def __init__(self, read: Callable[[str], Optional[str]], paths: Iterable[str], describe: str) -> None:
        self._read, self.paths, self.describe = read, sorted(paths), describe
        self._modules: dict[str, Optional[ast.Module]] = {}
        self._definitions: dict[tuple[str, str], tuple[str, ast.AST]] = {}

    @classmethod
    def from_wheel(cls, wheel: Path) -> LibrarySource:
        """The files of a wheel, read from the archive without unpacking it."""
        archive = zipfile.ZipFile(wheel)
        names = set(archive.namelist())
        return cls(lambda path: archive.read(path).decode() if path in names else None, names, wheel.name)

    @classmethod
    def from_directory(cls, root: Path, package: str) -> LibrarySource:
        """The files of `package` installed under `root` (a site-packages directory)."""
        files = [str(path.relative_to(root)) for path in (root / package).rglob("*.py*")]
        return cls(lambda path: (root / path).read_text() if (root / path).is_file() else None, files, str(root))

    def text(self, dotted: str) -> Optional[str]:
        """The source text of module `dotted` (`.py`, a package's `__init__.py`, or a `.pyi` stub), or None."""
        base = dotted.replace(".", "/")
        paths = (f"{base}.py", f"{base}/__init__.py", f"{base}.pyi", f"{base}/__init__.pyi")
        return next((text for text in map(self._read, paths) if text is not None), None)

    def module(self, dotted: str) -> Optional[ast.Module]:
        """The parsed module `dotted` (`.py`, a package's `__init__.py`, or a `.pyi` stub), or None."""
        if dotted not in self._modules:
            text = self.text(dotted)
            self._modules[dotted] = None if text is None else ast.parse(text)
        return self._modules[dotted]

    def submodules(self, package: str) -> list[str]:
        """The modules directly inside `package`."""
        prefix = package.replace(".", "/") + "/"
        names = {path[len(prefix) :].split(".")[0] for path in self.paths if path.startswith(prefix)}
        return sorted(f"{package}.{name}" for name in names if name and "/" not in name and name != "__init__")

    def is_package(self, dotted: str) -> bool:
        """True when `dotted` is a package (has an `__init__`)."""
        return self._read(dotted.replace(".", "/") + "/__init__.py") is not None

    def split(self, dotted: str) -> tuple[str, list[str]]:
        """(module, names inside it) for a dotted name: the longest prefix that is a module."""
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            if self.module(".".join(parts[:end])) is not None:
                return ".".join(parts[:end]), parts[end:]
        raise Missing(f"no module of {dotted} in {self.describe}")

    def definition(self, module: str, name: str) -> tuple[str, ast.AST]:
        """The top-level def, class or assignment `name` of `module`, following `from x import name`."""
        if (module, name) not in self._definitions:
            self._definitions[(module, name)] = self._definition(module, name)
        return self._definitions[(module, name)]

    def _definition(self, module: str, name: str) -> tuple[str, ast.AST]:
        tree = self.module(module)
        for node in tree.body:
            if isinstance(node, DEFINITIONS) and node.name == name:
                return module, node
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                isinstance(target, ast.Name) and target.id == name for target in targets
            ):
                return module, node
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        source = node.module if node.level == 0 else self.relative(module, node.module, node.level)
                        if source != module:
                            return self.lookup(f"{source}.{alias.name}")
        raise Missing(f"{module} defines no {name} ({self.describe})")

    def relative(self, module: str, name: str, level: int) -> str:
        """The absolute module of `from <level dots><name> import ...` written in `module`."""
        parts = module.split(".") if self.is_package(module) else module.split(".")[:-1]
        return ".".join(parts[: len(parts) - (level - 1)] + [name])

    def lookup(self, dotted: str) -> tuple[str, ast.AST]:
        """(module, node) of what `dotted` names: a module, def, class, method, field, or attribute a method sets."""
        module, names = self.split(dotted)
        if not names:
            return module, self.module(module)
        where, node = self.definition(module, names[0])
        for attribute in names[1:]:
            if not isinstance(node, ast.ClassDef):
                raise Missing(f"{dotted}: {type(node).__name__} in {where} has no attribute {attribute}")
            where, node = self.member(where, node, attribute)
        return where, node

    def bases(self, module: str, cls: ast.ClassDef) -> list[tuple[str, ast.ClassDef]]:
        """`cls` and its base classes found in this library, most derived first."""
        found, queue = [], [(module, cls)]
        while queue:
            owner, node = queue.pop(0)
            found.append((owner, node))
            for base in node.bases:
                name = dotted_name(base.value if isinstance(base, ast.Subscript) else base)
                try:
                    where, base_node = self.resolve(owner, name) if name else (None, None)
                except Missing:
                    continue
                if isinstance(base_node, ast.ClassDef):
                    queue.append((where, base_node))
        return found

    def resolve(self, module: str, name: str) -> tuple[str, ast.AST]:
        """A name as written in `module` (`Base`, `mod.Base`)."""
        head, _, rest = name.partition(".")
        if not rest:
            return self.definition(module, head)
        for node in ast.walk(self.module(module)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if (alias.asname or alias.name) == head:
                        return self.lookup(f"{alias.name}.{rest}")
        return self.lookup(f"{module}.{name}")

    def member(self, module: str, cls: ast.ClassDef, name: str) -> tuple[str, ast.AST]:
        """Attribute `name` of `cls` or a base: a method, a class-level name, or `self.<name>` set in a method."""
        for owner, node in self.bases(module, cls):
            for item in node.body:
                targets = item.targets if isinstance(item, ast.Assign) else [getattr(item, "target", None)]
                if (isinstance(item, DEFINITIONS) and item.name == name) or (
                    isinstance(item, (ast.Assign, ast.AnnAssign))
                    and any(isinstance(target, ast.Name) and target.id == name for target in targets)
                ):
                    return owner, item
            for item in ast.walk(node):
                targets = item.targets if isinstance(item, ast.Assign) else [getattr(item, "target", None)]
                if isinstance(item, (ast.Assign, ast.AnnAssign)) and any(
                    isinstance(target, ast.Attribute) and target.attr == name and dotted_name(target.value) == "self"
                    for target in targets
                ):
                    return owner, item
        raise Missing(f"{cls.name} has no attribute {name} ({self.describe})")

    def fields(self, module: str, cls: ast.ClassDef) -> list[str]:
        """Annotated class-level names of `cls` and its bases, bases first (dataclass, msgspec, TypedDict fields)."""
        names: list[str] = []
        for _, node in reversed(self.bases(module, cls)):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    name = item.target.id
                    if (
                        not name.startswith("_")
                        and "ClassVar" not in ast.unparse(item.annotation)
                        and name not in names
                    ):
                        names.append(name)  # a field a subclass declares again keeps its place
        return names

    def package_fields(self, package: str) -> set[str]:
        """Fields of every class of every module directly inside `package`."""
        return {
            name
            for module in self.submodules(package)
            for node in self.module(module).body
            if isinstance(node, ast.ClassDef)
            for name in self.fields(module, node)
        }

    def signatures(self, dotted: str) -> tuple[list[inspect.Signature], bool]:
        """The call signatures of `dotted` (several for `@overload`s) and whether a call through its class passes
        the instance first. A class: its (or a base's) `__init__`, else its fields as optional keywords."""
        module, node = self.lookup(dotted)
        if isinstance(node, ast.ClassDef):
            for _, cls in self.bases(module, node):
                inits = [item for item in cls.body if isinstance(item, ast.FunctionDef) and item.name == "__init__"]
                if inits:
                    return [signature_of(item, drop_first=True) for item in inits], False
            kind = inspect.Parameter.POSITIONAL_OR_KEYWORD  # dataclass and msgspec fields, in declaration order
            fields = self.fields(module, node)
            return [inspect.Signature([inspect.Parameter(f, kind, default=None) for f in fields])], False
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            overloads = [item for item in self._siblings(module, node) if item.name == node.name] or [node]
            is_method = len(self.split(dotted)[1]) > 1
            static = decorated(node, "staticmethod")
            bound = decorated(node, "classmethod")
            signatures = [signature_of(item, drop_first=bound) for item in overloads]
            return signatures, is_method and not static and not bound
        raise Missing(f"{dotted} is not callable in {self.describe} (a {type(node).__name__})")

    def _siblings(self, module: str, node: ast.AST) -> list[ast.AST]:
        for parent in ast.walk(self.module(module)):
            body = getattr(parent, "body", None)
            if isinstance(body, list) and node in body:
                return [item for item in body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
        return [node]


def import_object(dotted: str) -> tuple[Any, Any]:
    """(owner, object) of `dotted`: its longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        owner = None
        for name in parts[end:]:
            owner, obj = obj, getattr(obj, name)
        return owner, obj
    raise ImportError(dotted)


@dataclass
class Library:
    """One library: its source, and whether it also imports here (then `inspect` is asked first)."""

    name: str
    source: LibrarySource
    importable: bool

    def _imported(self, dotted: str) -> Optional[tuple[Any, Any]]:
        if not self.importable:
            return None
        try:
            return import_object(dotted)
        except Exception:  # noqa: BLE001 - a GPU-only module may fail to import on CPU in any way: read its source
            return None

    def signatures(self, dotted: str) -> tuple[list[inspect.Signature], bool]:
        """`inspect.signature` of the imported callable (and whether a call through its class passes the instance),
        else the source's signatures."""
        imported = self._imported(dotted)
        if imported is not None:
            owner, obj = imported
            try:
                signature = inspect.signature(obj)
            except (TypeError, ValueError):
                pass  # a C function without a text signature: its .pyi stub has one
            else:
                if not inspect.isclass(owner):
                    return [signature], False
                raw = inspect.getattr_static(owner, dotted.rsplit(".", 1)[1], None)
                return [signature], inspect.isfunction(raw)
        return self.source.signatures(dotted)

    def check_exists(self, dotted: str) -> None:
        """Raise `Missing` unless the library has `dotted` (an instance attribute counts when a method sets it)."""
        if self._imported(dotted) is None:
            self.source.lookup(dotted)

    def keyword_names(self, dotted: str) -> set[str]:
        """The keywords `dotted` takes by name: named parameters, or a class's fields (a TypedDict's keys, whose
        imported signature is only `**kwargs`, come from its source)."""
        signatures = list(self.signatures(dotted)[0])
        if self.importable:
            with contextlib.suppress(Missing):
                signatures += self.source.signatures(dotted)[0]
        return {
            name
            for signature in signatures
            for name, parameter in signature.parameters.items()
            if parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        }
