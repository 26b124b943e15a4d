"""`lcb`: the `code` env under SkyRL's env id and row format, with LiveCodeBench's output rule and import preamble.

Row format (as SkyRL's `lcb` rows): `reward_spec.ground_truth` is a JSON string (or a list) of tests
`{"input", "output", "testtype": "stdin" | "functional", "metadata": {"func_name": ...}}`. A functional test's function
name comes from the test's own `fn_name`, else its `metadata.func_name` (a dict or its JSON string), else the first
test's `metadata.func_name` (the one SkyRL reads), else `extra_info.fn_name`. Its `input` holds one JSON argument per
line and its `output` the JSON return value.

What differs from `code`:
- stdin tests are judged as LiveCodeBench judges them (`lcb_outputs_match`): both outputs stripped, every line
  stripped, the same number of lines, and each line equal as text or, failing that, as whitespace-separated numbers
  compared exactly as decimals ("1.50" matches "1.5", "1  2" matches "1 2").
- the program runs after a one-line preamble (`LCB_PRELUDE`) that imports the standard-library names LiveCodeBench's
  runner provides (itertools, math, collections, heapq, bisect, functools, typing names, ...), so a program may use
  `deque` or `sqrt` without importing them; numpy and pandas are not pre-imported.
- step metadata also holds `parsed_code`: the extracted program (None when there was no code block), as in SkyRL.
Extraction, the sandbox, its limits (6 s per test), env_config keys, partial credit and metrics are `code`'s.
"""

from __future__ import annotations

import ast
import json
from decimal import Decimal, InvalidOperation
from typing import Any, Optional

from skyrl_gym.envs.base_text_env import BaseTextEnvStepOutput
from skyrl_gym.envs.code.env import CodeEnv
from skyrl_gym.envs.code.ground_truth import CodeTest, load_test_list, parse_tests
from skyrl_gym.envs.code.testing import TestReport, run_tests

_PRELUDE_MODULES = (
    "bisect",
    "collections",
    "copy",
    "datetime",
    "functools",
    "heapq",
    "io",
    "itertools",
    "math",
    "operator",
    "os",
    "random",
    "re",
    "string",
    "sys",
)
_PRELUDE_NAMES = (
    ("bisect", "bisect, bisect_left, bisect_right, insort"),
    ("collections", "Counter, OrderedDict, defaultdict, deque"),
    ("copy", "deepcopy"),
    ("functools", "cache, cmp_to_key, lru_cache, partial, reduce"),
    ("heapq", "heapify, heappop, heappush, heapreplace, merge, nlargest, nsmallest"),
    (
        "itertools",
        "accumulate, chain, combinations, count, cycle, groupby, islice, pairwise, permutations, product, repeat, "
        "zip_longest",
    ),
    ("math", "atan2, ceil, comb, factorial, floor, gcd, inf, isqrt, log, log2, log10, pi, prod, sqrt"),
    ("operator", "iand, itemgetter, or_, sub, xor"),
    ("os.path", "commonprefix"),
    ("random", "randrange, shuffle"),
    ("re", "search as re_search"),
    ("string", "ascii_lowercase, ascii_uppercase"),
    ("time", "time"),
    (
        "typing",
        "Any, Callable, Deque, Dict, Generator, Iterable, Iterator, List, Optional, Set, Tuple, Union",
    ),
)
LCB_PRELUDE = "; ".join(
    [f"from {module} import {names}" for module, names in _PRELUDE_NAMES] + [f"import {', '.join(_PRELUDE_MODULES)}"]
)
"""One line of imports run before every program (one line, so tracebacks point one line below the model's line).
The modules come last, so `bisect` is the module, as in LiveCodeBench's runner."""


def with_prelude(program: str) -> str:
    """The program with `LCB_PRELUDE` before its first statement, or after its `from __future__` imports (which
    must stay first)."""
    try:
        body = ast.parse(program).body
    except SyntaxError:
        return f"{LCB_PRELUDE}\n{program}"  # it fails to compile either way; the error still names the model's line
    future_end = 0
    for position, node in enumerate(body):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            future_end = node.end_lineno or node.lineno
        elif not (position == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            break  # past the docstring and the __future__ imports
    if not future_end:
        return f"{LCB_PRELUDE}\n{program}"
    lines = program.split("\n")
    return "\n".join(lines[:future_end] + [LCB_PRELUDE] + lines[future_end:])


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _as_decimals(line: str) -> Optional[list[Decimal]]:
    try:
        return [Decimal(token) for token in line.split()]
    except InvalidOperation:
        return None


def lcb_outputs_match(expected: str, got: str) -> bool:
    """LiveCodeBench's stdout rule: same number of stripped lines, each equal as text or as a list of decimals."""
    want, have = _stripped_lines(expected), _stripped_lines(got)
    if len(want) != len(have):
        return False
    for want_line, have_line in zip(want, have):
        if want_line == have_line:
            continue
        want_numbers, have_numbers = _as_decimals(want_line), _as_decimals(have_line)
        if want_numbers is None or have_numbers is None or want_numbers != have_numbers:
            return False
    return True


def _metadata_func_name(raw: Any, where: str) -> Optional[str]:
    """`metadata.func_name` of one raw test (metadata may be a dict or its JSON string); None when absent."""
    if not isinstance(raw, dict) or raw.get("metadata") is None:
        return None
    metadata = raw["metadata"]
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata) if metadata.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{where}.metadata is a string but not JSON ({exc.msg}); expected a dict such as "
                '{"func_name": "maxSum"} or its JSON encoding'
            ) from None
    if not isinstance(metadata, dict):
        raise ValueError(
            f"{where}.metadata is {type(metadata).__name__}; expected a dict such as {{'func_name': 'maxSum'}}"
        )
    return metadata.get("func_name")


def parse_lcb_tests(ground_truth: Any, default_fn_name: Optional[str] = None) -> list[CodeTest]:
    """Validate SkyRL-format LiveCodeBench tests and return them as `CodeTest`s (ValueError naming the bad field).

    See the module docstring for where a functional test's function name comes from; `default_fn_name` is the last
    resort (`extra_info.fn_name`).
    """
    raw_tests = load_test_list(ground_truth)
    problem_fn_name = _metadata_func_name(raw_tests[0], "reward_spec.ground_truth[0]") or default_fn_name
    converted = []
    for index, raw in enumerate(raw_tests):
        own = _metadata_func_name(raw, f"reward_spec.ground_truth[{index}]")
        if isinstance(raw, dict) and not raw.get("fn_name") and own:
            raw = {**raw, "fn_name": own}
        converted.append(raw)
    return parse_tests(converted, default_fn_name=problem_fn_name)


class LCBEnv(CodeEnv):
    """SkyRL's `lcb` env on our sandbox: reward 1.0 iff every test passes (see the module docstring for the rules)."""

    def _parse_tests(self) -> list[CodeTest]:
        return parse_lcb_tests(self.ground_truth(), default_fn_name=self._default_fn_name())

    def _run_tests(self, program: str) -> TestReport:
        return run_tests(
            with_prelude(program),
            self.tests,
            self.limits,
            stop_at_first_failure=not self.partial_credit,
            total_timeout_s=self.total_timeout_s,
            match=lcb_outputs_match,
        )

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        output = super()._step(action)
        output["metadata"]["parsed_code"] = self.program
        return output
