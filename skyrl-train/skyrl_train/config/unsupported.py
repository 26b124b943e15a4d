"""Config keys that exist in the schema but are not supported yet: only the listed values are accepted.

Each entry names the key, the values accepted today, why others are not, and what brings them. Validation refuses
any other value with a message saying "not supported here yet" (`check_not_yet_supported`), and
`docs/reference/configuration.md` lists every entry (rendered by `docgen`). A key leaves this list when the code
that reads it lands, together with a test that shows its effect.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_train.config.root import SkyRLConfig


@dataclass(frozen=True)
class NotYetSupported:
    """One key that accepts only `accepted` values today."""

    key: str
    """Dotted config path, e.g. `trainer.strategy`."""

    accepted: tuple[Any, ...]
    """Values that work today (the default among them)."""

    reason: str
    """Why other values do not work yet."""

    planned: str
    """What brings the other values (an issue or a release)."""

    refused_example: Any
    """A value validation refuses (used by the test that walks this list)."""


_LORA_REASONS = {
    "ref": "the reference model is frozen (with a LoRA policy it is the policy's base model, adapters switched off)",
    "critic": "the critic is never exported as a Hugging Face model, so there is nothing to merge its adapters into",
}
_LORA_PLAN = {"ref": "nothing: a frozen model has no adapters to train", "critic": "a critic export, if one is added"}
_ROLES = ("policy", "ref", "critic")
_LORA_KEYS = (
    ("rank", (0,), 8),
    ("alpha", (16,), 32),
    ("dropout", (0.0,), 0.1),
    ("target_modules", ("all-linear",), ["q_proj"]),
    ("exclude_modules", (None,), ["lm_head"]),
    ("merge_on_export", (False,), True),
)

NOT_YET_SUPPORTED: tuple[NotYetSupported, ...] = (
    *(
        NotYetSupported(
            f"trainer.{role}.megatron.{name}",
            (1,),
            f"the Megatron strategy runs one {what} per rank: {why}",
            "a later release",
            2,
        )
        for role in ("policy", "ref")
        for name, what, why in (
            ("context_parallel_size", "whole sequence", "sequences are not split across ranks yet"),
        )
    ),
    *(
        NotYetSupported(
            f"trainer.{role}.model.lora.{name}",
            accepted,
            _LORA_REASONS[role],
            _LORA_PLAN[role],
            example,
        )
        for role in ("ref", "critic")
        for name, accepted, example in _LORA_KEYS
        if role == "ref" or name == "merge_on_export"
    ),
    NotYetSupported(
        "data.num_workers",
        (0,),
        "prompts are loaded and length-filtered in the driver process; no worker pool reads data",
        "a later release, if loading large prompt sets in the driver proves slow",
        8,
    ),
)
"""Every key that accepts only some values today."""


def _value_at(cfg: "SkyRLConfig", key: str) -> Any:
    value: Any = cfg
    for name in key.split("."):
        value = getattr(value, name)
    return value


def describe_accepted(entry: NotYetSupported) -> str:
    """The accepted values as config literals, e.g. `0` or `"fsdp2"`."""
    from skyrl_train.config.docgen import format_value

    return " or ".join(format_value(value) for value in entry.accepted)


def check_not_yet_supported(cfg: "SkyRLConfig") -> Iterator[str]:
    """A problem for every key of `NOT_YET_SUPPORTED` set to a value outside its accepted ones."""
    for entry in NOT_YET_SUPPORTED:
        value = _value_at(cfg, entry.key)
        if value not in entry.accepted:
            yield (
                f"{entry.key}={value!r} is not supported here yet: {entry.reason}. Accepted today:"
                f" {describe_accepted(entry)} (other values come with {entry.planned})"
            )
