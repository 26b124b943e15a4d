"""`tinker://<model_id>/<weights|sampler_weights>/<name>` paths and the checkpoint names the service accepts."""

from __future__ import annotations

import re
from dataclasses import dataclass

from skyrl_tx.futures import UserError

CHECKPOINT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SEGMENTS = {"weights": "training", "sampler_weights": "sampler"}


@dataclass
class TinkerPath:
    """A parsed `tinker://<model_id>/<weights|sampler_weights>/<name>`."""

    model_id: str
    segment: str
    name: str

    @classmethod
    def parse(cls, path: str) -> TinkerPath:
        """Parse `path`; raises `UserError` naming the expected form."""
        parts = path[len("tinker://") :].split("/") if path.startswith("tinker://") else []
        if len(parts) != 3 or parts[1] not in SEGMENTS or not parts[0] or not parts[2]:
            raise UserError(f"path {path!r} is not tinker://<model_id>/weights|sampler_weights/<name>")
        return cls(parts[0], parts[1], parts[2])

    def __str__(self) -> str:
        return f"tinker://{self.model_id}/{self.segment}/{self.name}"
