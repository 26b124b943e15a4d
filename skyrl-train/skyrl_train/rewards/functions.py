"""User scoring functions: load one from `package.module:name` or `/path/to/file.py:name`, and read its result.

Pure Python (no torch): the `parallel` manager's scoring processes import this module only.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import numbers
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any


class RewardFunctionError(ValueError):
    """A scoring function could not be loaded, or returned something that is not a score."""


def split_function_spec(spec: str) -> tuple[str, str]:
    """(`package.module` or file path, function name) of `spec`; raises naming what is expected."""
    target, _, name = spec.rpartition(":")
    if not target.strip() or not name.isidentifier():
        raise RewardFunctionError(
            f"reward.function={spec!r} must look like 'package.module:name' or '/path/to/file.py:name'"
        )
    return target.strip(), name


def _import_file(path: str) -> Any:
    location = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(location):
        raise RewardFunctionError(f"reward.function: file {location} does not exist")
    # one module per file path, so two files with the same name do not replace each other in sys.modules
    module_name = "skyrl_reward_fn_" + hashlib.sha1(location.encode()).hexdigest()[:12]
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, location)
    if spec is None or spec.loader is None:
        raise RewardFunctionError(f"reward.function: cannot import {location} as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def load_reward_function(spec: str) -> Callable[..., Any]:
    """The function `spec` names. A target ending in `.py` (or containing a path separator) is a file, anything else
    a module on the import path. Import errors of the user's code propagate with their traceback."""
    target, name = split_function_spec(spec)
    if target.endswith(".py") or os.sep in target:
        module = _import_file(target)
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            if exc.name is not None and target.startswith(exc.name):
                raise RewardFunctionError(
                    f"reward.function={spec!r}: module {target!r} is not importable ({exc}); put its folder on "
                    "PYTHONPATH or give a file path"
                ) from exc
            raise
    function = getattr(module, name, None)
    if function is None or not callable(function):
        found = "nothing" if function is None else type(function).__name__
        raise RewardFunctionError(f"reward.function={spec!r}: {target} has no function {name!r} (found {found})")
    return function


def parse_score(result: Any) -> tuple[float, dict[str, float]]:
    """(score, numeric extras) of one function result: a real number, or a mapping with a `score` key whose other
    numeric entries are extras. Raises RewardFunctionError (saying what came back) for anything else, NaN or inf."""
    extras: dict[str, float] = {}
    value = result
    if isinstance(result, Mapping):
        if "score" not in result:
            raise RewardFunctionError(f"returned a dict without a 'score' key (keys: {sorted(map(str, result))})")
        value = result["score"]
        for key, item in result.items():
            if key != "score" and isinstance(item, numbers.Real) and math.isfinite(float(item)):
                extras[str(key)] = float(item)
    if not isinstance(value, numbers.Real):
        text = repr(value)
        text = text if len(text) <= 60 else text[:57] + "..."
        raise RewardFunctionError(f"returned {text} ({type(value).__name__}); expected a number or {{'score': number}}")
    score = float(value)
    if not math.isfinite(score):
        raise RewardFunctionError(f"returned the non-finite score {score}")
    return score, extras
