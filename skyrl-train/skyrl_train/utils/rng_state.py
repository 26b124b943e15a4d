"""Capture and restore the random number generator states of Python, NumPy and torch as JSON-safe values.

A resumed run restores these so the draws after a checkpoint are the same as if training had never stopped. The
states are plain Python values (lists, ints, strings), so they can live in a JSON file next to the rest of the
trainer state without pickling.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import random
from collections.abc import Iterator
from typing import Any, Optional

import numpy as np
import torch

logger = logging.getLogger(__name__)

RNG_STATE_VERSION = 1
"""Layout version of `capture_rng_state()` output; bumped when the layout changes."""


def _tensor_to_text(state: torch.Tensor) -> str:
    return base64.b64encode(state.cpu().numpy().tobytes()).decode("ascii")


def _text_to_tensor(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8).clone()


def capture_rng_state() -> dict[str, Any]:
    """The current states of `random`, NumPy's global generator, torch's CPU generator and (if in use) CUDA's."""
    version, python_internal, gauss_next = random.getstate()
    numpy_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "version": RNG_STATE_VERSION,
        "python": {"version": version, "internal": list(python_internal), "gauss_next": gauss_next},
        "numpy": {
            "bit_generator": numpy_state["bit_generator"],
            "key": numpy_state["state"]["key"].tolist(),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
        "torch": _tensor_to_text(torch.get_rng_state()),
        "torch_cuda": None,
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda"] = [_tensor_to_text(s) for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Set every generator back to a state returned by `capture_rng_state()`.

    Raises ValueError naming the missing key when `state` is not such a state. Saved CUDA states are skipped with a
    warning on a machine without CUDA.
    """
    missing = [key for key in ("version", "python", "numpy", "torch") if key not in state]
    if missing:
        raise ValueError(f"rng state is missing {missing}; expected the output of capture_rng_state()")
    if state["version"] != RNG_STATE_VERSION:
        raise ValueError(f"rng state has version {state['version']!r}; this code reads version {RNG_STATE_VERSION}")

    python_state = state["python"]
    random.setstate((python_state["version"], tuple(python_state["internal"]), python_state["gauss_next"]))

    numpy_state = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": numpy_state["bit_generator"],
            "state": {"key": np.asarray(numpy_state["key"], dtype=np.uint32), "pos": numpy_state["pos"]},
            "has_gauss": numpy_state["has_gauss"],
            "gauss": numpy_state["gauss"],
        }
    )

    torch.set_rng_state(_text_to_tensor(state["torch"]))

    cuda_states = state.get("torch_cuda")
    if cuda_states:
        if torch.cuda.is_available():
            torch.cuda.set_rng_state_all([_text_to_tensor(s) for s in cuda_states])
        else:
            logger.warning(
                "rng state holds %d CUDA generator states but CUDA is unavailable; skipped", len(cuda_states)
            )


def cuda_rng_devices() -> list[int]:
    """The CUDA devices whose generators `torch.manual_seed` reseeds: every visible one (none without CUDA)."""
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


@contextlib.contextmanager
def torch_seeded(seed: Optional[int]) -> Iterator[None]:
    """Run the block with torch's generators seeded `seed` (None: as they are), then put their states back: what the
    block draws repeats for a seed (e.g. the initial weights of a module built inside), and what is drawn after it is
    what would have been drawn without the block. `torch.manual_seed` reseeds the CPU generator and every CUDA
    device's, so all of them are saved and restored."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=cuda_rng_devices()):
        torch.manual_seed(seed)
        yield
