"""Check one prompt-dataset row against the row contract and fill its defaults.

The contract (see the design notes): `data_source: str`, `prompt: [{role, content}, ...]`, `env_class: str`,
`reward_spec: {method: "rule" | "reward_model", ground_truth}`, `extra_info: {...}`; every other column is passed
to the environment as an extra. Errors name the file, the row index and the column, and say what was expected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn, Optional

ALLOWED_ROLES = ("system", "user", "assistant", "tool")
"""Chat roles a prompt message may have."""

REWARD_METHODS = ("rule", "reward_model")
"""Values of `reward_spec.method`; `rule` needs a `ground_truth`."""

Fail = Callable[[str, str], NoReturn]

DEFAULT_DATA_SOURCE = "unknown"
"""`data_source` given to rows that have none, so per-source metrics always have a key."""


class DatasetSchemaError(ValueError):
    """A dataset row breaks the row contract; the message names the file, row, column and what was expected."""

    def __init__(self, source: str, index: int, column: str, problem: str) -> None:
        self.source = source
        self.index = index
        self.column = column
        self.problem = problem
        super().__init__(f"{source}, row {index}, column '{column}': {problem}")


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def _check_prompt(messages: Any, fail: Fail, column: str) -> None:
    if not isinstance(messages, list) or not messages:
        fail(column, f"expected a non-empty list of {{role, content}} messages, got {_describe(messages)}")
    for position, message in enumerate(messages):
        where = f"{column}[{position}]"
        if not isinstance(message, Mapping):
            fail(where, f"expected a {{role, content}} message, got {_describe(message)}")
        for key in ("role", "content"):
            if key not in message:
                fail(where, f"message has no '{key}' key; expected {{role, content}} strings")
            if not isinstance(message[key], str):
                fail(f"{where}.{key}", f"expected a string, got {_describe(message[key])}")
        if message["role"] not in ALLOWED_ROLES:
            fail(f"{where}.role", f"expected one of {ALLOWED_ROLES}, got {message['role']!r}")


def _check_reward_spec(spec: Any, fail: Fail, unsupported: Mapping[str, str]) -> None:
    if not isinstance(spec, Mapping):
        fail("reward_spec", f"expected a {{method, ground_truth}} mapping, got {_describe(spec)}")
    if "method" not in spec:
        fail("reward_spec", f"has no 'method'; expected one of {REWARD_METHODS}")
    if spec["method"] not in REWARD_METHODS:
        fail("reward_spec.method", f"expected one of {REWARD_METHODS}, got {spec['method']!r}")
    if spec["method"] == "rule" and spec.get("ground_truth") is None:
        fail("reward_spec.ground_truth", "method 'rule' needs a ground_truth (missing or null)")
    if spec["method"] in unsupported:
        fail("reward_spec.method", f"{spec['method']!r} is not available in this run: {unsupported[spec['method']]}")


def validate_row(
    row: Any,
    *,
    source: str,
    index: int,
    default_env_class: Optional[str] = None,
    prompt_key: str = "prompt",
    env_class_key: str = "env_class",
    unsupported_reward_methods: Optional[Mapping[str, str]] = None,
) -> dict[str, Any]:
    """Check `row` (row `index` of file `source`) and return a copy with its defaults filled.

    Filled defaults: `env_class_key` from `default_env_class` when the row has none (null or missing),
    `data_source` = DEFAULT_DATA_SOURCE and `extra_info` = {} when missing or null. `reward_spec` is optional (an env
    may read its answer from another column), but when present it must follow the contract; a method listed in
    `unsupported_reward_methods` (method -> what to change, e.g. `reward_model` when no reward model is configured)
    is refused.
    Raises DatasetSchemaError naming the file, row and column.
    """

    def fail(column: str, problem: str) -> NoReturn:
        raise DatasetSchemaError(source, index, column, problem)

    if not isinstance(row, Mapping):
        fail("<row>", f"expected a mapping of column names to values, got {_describe(row)}")
    checked = dict(row)
    if prompt_key not in checked:
        fail(prompt_key, "missing; expected a non-empty list of {role, content} messages")
    _check_prompt(checked[prompt_key], fail, prompt_key)

    if checked.get(env_class_key) is None:
        if default_env_class is None:
            fail(env_class_key, "missing and no default env class was given; add the column or pass default_env_class")
        checked[env_class_key] = default_env_class
    if not isinstance(checked[env_class_key], str) or not checked[env_class_key]:
        fail(
            env_class_key,
            f"expected a non-empty string naming a registered env, got {_describe(checked[env_class_key])}",
        )

    if checked.get("data_source") is None:
        checked["data_source"] = DEFAULT_DATA_SOURCE
    if not isinstance(checked["data_source"], str):
        fail("data_source", f"expected a string, got {_describe(checked['data_source'])}")

    if checked.get("reward_spec") is not None:
        _check_reward_spec(checked["reward_spec"], fail, unsupported_reward_methods or {})

    if checked.get("extra_info") is None:
        checked["extra_info"] = {}
    if not isinstance(checked["extra_info"], Mapping):
        fail("extra_info", f"expected a mapping, got {_describe(checked['extra_info'])}")
    return checked
