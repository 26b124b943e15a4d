"""Weight-update routes of the OpenAI-compatible server, so a training run can use it as a `remote` engine.

Added by `create_app(..., weight_updates=True)` (`python -m skyrl_train.entrypoints.serve --enable-weight-updates`),
never by default. Whoever holds the weight-update token (`ServingAccess.update_token`; mounting the routes without
one is refused) can replace the served weights, from a folder under one root (`ServingAccess.weight_update_root`)
only. They are the counterpart of vLLM's development endpoints (`/collective_rpc` `reload_weights`), which have no
auth.

- `GET /skyrl/info`: served model name, weight versions and whether the engines take weight updates between two
  tokens of running completions (`in_flight_weight_updates`; the remote engine detects the server by it);
- `POST /skyrl/update_weights_from_disk` `{"path": folder, "version": n}`: load every `*.safetensors` file of the
  folder (Hugging Face parameter names) into the engines and serve them as version `n`. The engines check every
  tensor before copying any, so a folder with one bad tensor changes no weight and no version;
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


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def read_weights_folder(path: str, root: str) -> list[tuple[str, Any]]:
    """Every tensor of the `*.safetensors` files of `path` (relative paths are taken under `root`); refused with 403
    when the folder, or a file it links to, resolves outside `root`, and with 400 when it holds no such file."""
    base = Path(root).resolve()
    try:
        folder = (base / path).resolve()
    except (OSError, ValueError) as exc:  # e.g. a NUL byte, a symlink loop
        raise ServingError(f"path: {path!r} is not a usable path ({exc})", param="path") from exc
    outside = ServingError(
        f"path: {path} is outside the folder this server loads weights from ({base}); write the weights under it, or "
        "start the server with --weight-update-root set to a folder that holds them",
        param="path",
        status=403,
    )
    if not _inside(folder, base):
        raise outside
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        raise ServingError(f"path: {path} is not a folder holding *.safetensors files", param="path")
    if any(not _inside(file.resolve(), base) for file in files):
        raise outside
    named: list[tuple[str, Any]] = []
    for file in files:
        try:
            named.extend(load_file(str(file)).items())
        except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: the client's mistake, named
            raise ServingError(f"path: {file.name} is not a readable safetensors file ({exc})", param="path") from exc
    return named


def add_weight_update_routes(app: FastAPI, client: Any, model_name: str, root: str) -> None:
    """Register the `/skyrl/*` routes on `app` for `client` (an `InferenceEngineClient`), loading folders under
    `root` only (the token is checked by `serving.access.BearerAuth` before a request reaches them)."""

    engines = getattr(client, "engines", [client])
    in_flight = all(getattr(engine, "in_flight_weight_updates", False) for engine in engines)

    @app.get("/skyrl/info")
    async def info() -> dict[str, Any]:
        return {"model": model_name, "weight_versions": client.weight_versions, "in_flight_weight_updates": in_flight}

    @app.post("/skyrl/update_weights_from_disk")
    async def update_weights_from_disk(body: UpdateFromDisk) -> dict[str, Any]:
        named = await asyncio.to_thread(read_weights_folder, body.path, root)
        try:
            await client.update_weights(named, body.version)
        except ValueError as exc:  # a name, shape or dtype the model does not have: nothing was loaded
            raise ServingError(f"path: {exc}", param="path") from exc
        return {"weight_versions": client.weight_versions, "num_tensors": len(named)}

    @app.post("/skyrl/weights_checksum")
    async def weights_checksum(body: ChecksumRequest) -> dict[str, float]:
        checksums = (await client.weights_checksums())[0]
        return {name: checksums[name] for name in (body.names or list(checksums)) if name in checksums}
