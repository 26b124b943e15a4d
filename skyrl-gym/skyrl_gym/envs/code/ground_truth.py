"""Parse and validate a code problem's tests (LiveCodeBench format) from `reward_spec.ground_truth`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

TEST_TYPES = ("stdin", "functional")


@dataclass(frozen=True)
class CodeTest:
    """One test. stdin tests feed `input` and compare stdout with `output`; functional tests call `fn_name` with the
    JSON-decoded lines of `input` as arguments and compare the return value with `expected` (decoded `output`)."""

    index: int
    input: str
    output: str
    testtype: str
    fn_name: Optional[str] = None
    args: Optional[tuple[Any, ...]] = None
    expected: Any = None


def _decode_args(text: str, where: str) -> tuple[Any, ...]:
    args = []
    for line_number, line in enumerate(text.split("\n")):
        if not line.strip():
            continue
        try:
            args.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{where}.input line {line_number} is not JSON ({exc.msg}); functional tests take one JSON argument "
                f"per line, got {line[:80]!r}"
            ) from None
    return tuple(args)


def load_test_list(ground_truth: Any) -> list[Any]:
    """The raw test list of a ground truth given as a list, a JSON string of one, or a numpy array (from parquet)."""
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"reward_spec.ground_truth is a string but not valid JSON ({exc.msg} at char {exc.pos}); expected a "
                "list of tests or its JSON encoding"
            ) from None
    if hasattr(ground_truth, "tolist") and not isinstance(ground_truth, (list, tuple)):
        ground_truth = ground_truth.tolist()  # numpy arrays from parquet
    if not isinstance(ground_truth, (list, tuple)):
        raise ValueError(
            f"reward_spec.ground_truth must be a list of tests ({{input, output, testtype}}), got "
            f"{type(ground_truth).__name__}"
        )
    if not ground_truth:
        raise ValueError("reward_spec.ground_truth is an empty list; a code problem needs at least one test")
    return list(ground_truth)


def parse_tests(ground_truth: Any, default_fn_name: Optional[str] = None) -> list[CodeTest]:
    """Validate the ground truth and return its tests; raise ValueError naming the bad test index and field.

    `ground_truth` is a list of `{"input": str, "output": str, "testtype": "stdin" | "functional"}` dicts or a JSON
    string of one. Functional tests take `fn_name` from the test or else `default_fn_name`
    (`extra_info.fn_name`).
    """
    tests = []
    for index, raw in enumerate(load_test_list(ground_truth)):
        where = f"reward_spec.ground_truth[{index}]"
        if not isinstance(raw, dict):
            raise ValueError(f"{where} is {type(raw).__name__}; expected a dict with 'input', 'output', 'testtype'")
        for field in ("input", "output", "testtype"):
            if field not in raw:
                raise ValueError(f"{where} is missing '{field}'; expected keys 'input', 'output', 'testtype'")
            if not isinstance(raw[field], str):
                raise ValueError(f"{where}.{field} is {type(raw[field]).__name__}; expected a string")
        testtype = raw["testtype"]
        if testtype not in TEST_TYPES:
            raise ValueError(f"{where}.testtype is {testtype!r}; expected one of {list(TEST_TYPES)}")
        if testtype == "stdin":
            tests.append(CodeTest(index, raw["input"], raw["output"], testtype))
            continue
        fn_name = raw.get("fn_name") or default_fn_name
        if not isinstance(fn_name, str) or not fn_name.isidentifier():
            raise ValueError(
                f"{where}.fn_name is {fn_name!r}; a functional test needs a function name (a Python identifier) "
                "in the test's 'fn_name' or in extra_info['fn_name']"
            )
        args = _decode_args(raw["input"], where)
        try:
            expected = json.loads(raw["output"])
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}.output is not JSON ({exc.msg}); functional tests compare JSON values") from None
        tests.append(CodeTest(index, raw["input"], raw["output"], testtype, fn_name, args, expected))
    return tests
