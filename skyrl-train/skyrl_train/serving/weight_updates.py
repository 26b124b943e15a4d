"""Weight-update routes of the OpenAI-compatible server, so a training run can use it as a `remote` engine.

Added by `create_app(..., weight_updates=True)` (`python -m skyrl_train.entrypoints.serve --enable-weight-updates`),
never by default: whoever can reach them can replace the served weights with any safetensors folder this machine can
read. They are the counterpart of vLLM's development endpoints (`/collective_rpc` `reload_weights`).

- `GET /skyrl/info`: served model name and weight version (the remote engine detects the server by it);
- `POST /skyrl/update_weights_from_disk` `{"path": folder, "version": n}`: load every `*.safetensors` file of the
  folder (Hugging Face parameter names) into the engines and serve them as version `n`;
- `POST /skyrl/weights_checksum` `{"names": [...] | null}`: per-parameter checksums of the served weights.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Optional

from fastapi import FastAPI
from pydantic import BaseModel, Field
from safetensors.torch import load_file

from skyrl_train.serving.protocol import ServingError


class UpdateFromDisk(BaseModel):
    """Body of `POST /skyrl/update_weights_from_disk`."""

    path: str
    version: int = Field(ge=1)


class ChecksumRequest(BaseModel):
    """Body of `POST /skyrl/weights_checksum`."""

    names: Optional[list[str]] = None


def read_weights_folder(path: str) -> list[tuple[str, Any]]:
    """Every tensor of the `*.safetensors` files of `path`; a clear error when there are none."""
    folder = Path(path)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        raise ServingError(f"path: {path} is not a folder holding *.safetensors files", param="path")
    named: list[tuple[str, Any]] = []
    for file in files:
        named.extend(load_file(str(file)).items())
    return named


def add_weight_update_routes(app: FastAPI, client: Any, model_name: str) -> None:
    """Register the `/skyrl/*` routes on `app` for `client` (an `InferenceEngineClient`)."""

    @app.get("/skyrl/info")
    async def info() -> dict[str, Any]:
        return {"model": model_name, "weight_versions": client.weight_versions}

    @app.post("/skyrl/update_weights_from_disk")
    async def update_weights_from_disk(body: UpdateFromDisk) -> dict[str, Any]:
        named = await asyncio.to_thread(read_weights_folder, body.path)
        try:
            await client.update_weights(named, body.version)
        except ValueError as exc:  # a name or shape the model does not have
            raise ServingError(f"path: {exc}", param="path") from exc
        return {"weight_versions": client.weight_versions, "num_tensors": len(named)}

    @app.post("/skyrl/weights_checksum")
    async def weights_checksum(body: ChecksumRequest) -> dict[str, float]:
        checksums = (await client.weights_checksums())[0]
        return {name: checksums[name] for name in (body.names or list(checksums)) if name in checksums}
