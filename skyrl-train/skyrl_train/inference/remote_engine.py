"""The `remote` engine: generation through an OpenAI-compatible completions server that someone else started
(`vllm serve`, SGLang's server, or `python -m skyrl_train.entrypoints.serve --enable-weight-updates`).

Requests go to `POST /v1/completions` with the prompt as token ids, `logprobs` and `return_token_ids` (a vLLM
extension our own server also honours), so the trainer gets token-in/token-out data; connection failures and 5xx
answers are retried with back-off, each request has a time limit.

New weights reach the server through its own update endpoint: the weights a sync delivered to this engine are
written as a Hugging Face safetensors folder under `weights_dir` (a path the server can read: a temporary directory on
this machine by default), and the server is told to load it:

| server | detected by | loads new weights with |
|---|---|---|
| skyrl serve | `GET /skyrl/info` | `POST /skyrl/update_weights_from_disk` |
| vLLM (`VLLM_SERVER_DEV_MODE=1`) | `GET /is_sleeping` | `POST /collective_rpc` `reload_weights(weights_path=...)` |
| SGLang | `GET /get_model_info` | `POST /update_weights_from_disk` |

A server with none of these cannot follow training: `detect_server` refuses it at start-up with that reason.

In-flight weight updates (`in_flight_weight_updates`, the fully_async trainer's `weight_update_boundary: token`) need
skyrl serve started with `--in-flight-weight-updates`: its engines then take a new folder between two tokens of the
completions they are decoding, and each completion choice reports the version that sampled each token
(`token_versions`). Any other server is refused at start-up for them.

Auth: `api_key` goes as `Authorization: Bearer <key>` with every request (default: the `SKYRL_API_KEY` environment
variable), `weight_update_token` replaces it on skyrl serve's `/skyrl/*` routes (default: `SKYRL_WEIGHT_UPDATE_TOKEN`,
else the API key), and `headers` are added to every request (e.g. a gateway's own header).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import httpx
import torch
from safetensors.torch import save_file

from skyrl_train.inference.queued_engine import PendingRequest, QueuedEngine
from skyrl_train.inference.types import SamplingParams

logger = logging.getLogger(__name__)

SERVER_KINDS = ("skyrl", "vllm", "sglang")
"""Servers whose weight-update endpoint the remote engine knows."""

VLLM_CHECKSUM_METHOD = "skyrl_weights_checksum"
"""Worker method the vLLM extension `skyrl_train.inference.vllm_worker_extension.SkyRLWorkerExtension` adds (start
`vllm serve` with `--worker-extension-cls` set to it so a sync can be verified by checksum)."""


class RemoteServerError(RuntimeError):
    """A remote server refused, failed or cannot do what the run needs; the message names the URL."""


def _url(base: str, path: str) -> str:
    return base.rstrip("/") + path


def default_weights_root() -> Path:
    """The folder under which the remote engine writes synced weights by default, and the only one
    `python -m skyrl_train.entrypoints.serve --enable-weight-updates` loads from unless given `--weight-update-root`:
    `<tempdir>/skyrl-weights-<uid>`."""
    return Path(tempfile.gettempdir()) / f"skyrl-weights-{os.getuid()}"


def private_folder(path: Path) -> Path:
    """`path` created 0700 if missing; refused unless it is a real folder this user owns that no one else may write
    (a folder another user planted in a shared temp dir could swap the weights a server loads)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{path} must be a folder, not a link or a file")
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise ValueError(
            f"{path} belongs to uid {info.st_uid} with mode {oct(info.st_mode & 0o777)}: the weights folder must be "
            f"this user's (uid {os.getuid()}) and writable by no one else; remove it or set engine_init_kwargs.weights_dir"
        )
    return path


@dataclass(frozen=True)
class RemoteAuth:
    """The headers the remote engine sends: `api_key` as a bearer token on every route, `weight_update_token` instead
    on skyrl serve's weight-update routes (`/skyrl/*`), `headers` on every request."""

    api_key: Optional[str] = None
    weight_update_token: Optional[str] = None
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def build(
        cls,
        api_key: Optional[str] = None,
        weight_update_token: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        environ: Optional[Mapping[str, str]] = None,
    ) -> RemoteAuth:
        """From the engine's kwargs; a key not given comes from `SKYRL_API_KEY` / `SKYRL_WEIGHT_UPDATE_TOKEN`."""
        environ = os.environ if environ is None else environ
        api_key = api_key or environ.get("SKYRL_API_KEY") or None
        weight_update_token = weight_update_token or environ.get("SKYRL_WEIGHT_UPDATE_TOKEN") or None
        pairs = tuple((str(name), str(value)) for name, value in (headers or {}).items())
        return cls(api_key, weight_update_token, pairs)

    def for_path(self, path: str) -> dict[str, str]:
        """The headers of a request to `path`."""
        token = (self.weight_update_token or self.api_key) if path.startswith("/skyrl/") else self.api_key
        headers = dict(self.headers)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers


def _unauthorized(base_url: str, path: str, response: httpx.Response) -> Optional[str]:
    """A message naming the key to set when `response` is a 401/403, else None."""
    if response.status_code not in (401, 403):
        return None
    key = "weight_update_token (or api_key)" if path.startswith("/skyrl/") else "api_key (or headers)"
    return (
        f"{base_url}{path} answered {response.status_code}: the server wants credentials; set "
        f"generator.inference_engine.engine_init_kwargs.{key}, or the SKYRL_API_KEY / SKYRL_WEIGHT_UPDATE_TOKEN "
        f"environment variables ({response.text[:200]})"
    )


def detect_server(base_url: str, timeout_s: float = 10.0, auth: Optional[RemoteAuth] = None) -> dict[str, Any]:
    """`{"kind", "model", "max_model_len", "in_flight_weight_updates"}` of the server at `base_url` (the last: skyrl
    serve's engines take new weights between two tokens of running completions); raises `RemoteServerError` when it
    does not answer, refuses the credentials, serves no model, or has no endpoint to take new weights."""
    auth = auth or RemoteAuth()

    def get(http: httpx.Client, path: str) -> httpx.Response:
        return http.get(_url(base_url, path), headers=auth.for_path(path))

    try:
        with httpx.Client(timeout=timeout_s) as http:
            models = get(http, "/v1/models")
            refused = _unauthorized(base_url, "/v1/models", models)
            if refused:
                raise RemoteServerError(refused)
            models.raise_for_status()
            cards = models.json().get("data") or []
            if not cards:
                raise RemoteServerError(f"{base_url}/v1/models lists no model")
            probes = {
                "skyrl": get(http, "/skyrl/info"),
                "vllm": get(http, "/is_sleeping"),
                "sglang": get(http, "/get_model_info"),
            }
            version = get(http, "/version")
    except httpx.HTTPError as exc:
        raise RemoteServerError(f"remote engine {base_url} does not answer: {exc}") from exc
    refused = _unauthorized(base_url, "/skyrl/info", probes["skyrl"])
    if refused:
        raise RemoteServerError(refused)
    kind = next((name for name in SERVER_KINDS if probes[name].status_code == 200), None)
    if kind is None:
        hint = (
            "it looks like vLLM without its development endpoints: start it with VLLM_SERVER_DEV_MODE=1"
            if version.status_code == 200
            else "use `vllm serve` with VLLM_SERVER_DEV_MODE=1, SGLang's server, or "
            "`python -m skyrl_train.entrypoints.serve --enable-weight-updates`"
        )
        raise RemoteServerError(
            f"remote engine {base_url} has no endpoint to load new weights, so it cannot serve a policy that trains "
            f"(generator.inference_engine.backend=remote): {hint}"
        )
    card = cards[0]
    in_flight = kind == "skyrl" and bool(probes["skyrl"].json().get("in_flight_weight_updates"))
    return {
        "kind": kind,
        "model": card["id"],
        "max_model_len": card.get("max_model_len"),
        "in_flight_weight_updates": in_flight,
    }


class RemoteInferenceEngine(QueuedEngine):
    """One remote OpenAI-compatible server as an `InferenceEngine` (see the module docstring).

    Args:
        base_url: the server's base URL (without `/v1`).
        tokenizer: the served model's tokenizer (renders message prompts; decodes nothing the server returns).
        max_model_len: prompt + response limit (default: what the server reports, else 4096).
        timeout_s: time limit of one HTTP request (a generation included).
        max_retries: attempts after the first for connection errors and 5xx answers (back-off 0.5 s, doubling).
        max_concurrency: most requests in flight to this server at once.
        weights_dir: where synced weights are written for the server to load (default: a new folder under
            `default_weights_root()`, the folder skyrl serve loads from by default).
        config_dir: a folder holding the model's `config.json` (copied next to the written weights).
        api_key: bearer key sent with every request (default: `SKYRL_API_KEY` from the environment).
        weight_update_token: bearer token for skyrl serve's `/skyrl/*` routes (default: `SKYRL_WEIGHT_UPDATE_TOKEN`,
            else `api_key`).
        headers: extra headers sent with every request.
        in_flight_weight_updates: weight updates land between two tokens of the server's running completions, and
            `pause` holds new calls only (needs skyrl serve with `--in-flight-weight-updates`).
    """

    def __init__(
        self,
        base_url: str,
        tokenizer: Any,
        max_model_len: Optional[int] = None,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        max_concurrency: int = 256,
        weights_dir: Optional[str] = None,
        config_dir: Optional[str] = None,
        api_key: Optional[str] = None,
        weight_update_token: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        in_flight_weight_updates: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.auth = RemoteAuth.build(api_key, weight_update_token, headers)
        info = detect_server(self.base_url, auth=self.auth)
        self.server_kind, self.model_name = info["kind"], info["model"]
        if in_flight_weight_updates and not info["in_flight_weight_updates"]:
            raise RemoteServerError(
                f"{self.base_url} cannot take weight updates between two tokens of running completions: start "
                "`python -m skyrl_train.entrypoints.serve --enable-weight-updates --in-flight-weight-updates`, or use "
                "trainer.async_rl.weight_update_boundary=turn"
            )
        self.in_flight_weight_updates = in_flight_weight_updates
        super().__init__(tokenizer, int(max_model_len or info["max_model_len"] or 4096), batch_wait_s=0.0)
        self.timeout_s, self.max_retries = float(timeout_s), int(max_retries)
        self.max_concurrency = int(max_concurrency)
        self._own_weights_dir = weights_dir is None
        self.weights_dir = Path(
            weights_dir or tempfile.mkdtemp(prefix="run-", dir=private_folder(default_weights_root()))
        )
        self.config_dir = config_dir
        self._staged: dict[str, torch.Tensor] = {}
        self._version = 0
        self._http: Optional[httpx.AsyncClient] = None
        self._limit: Optional[asyncio.Semaphore] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._tasks: set[asyncio.Task] = set()

    # ----- HTTP ---------------------------------------------------------------------------------------------------
    def _client(self) -> httpx.AsyncClient:
        """The HTTP client of the running event loop (connections belong to one loop: a new loop gets a new one)."""
        loop = asyncio.get_running_loop()
        if self._http is None or self._loop is not loop:
            self._http = httpx.AsyncClient(timeout=self.timeout_s)
            self._limit = asyncio.Semaphore(self.max_concurrency)
            self._loop = loop
        return self._http

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        """POST JSON with retries on connection errors and 5xx; 4xx raise at once with the server's message."""
        delay = 0.5
        for attempt in range(self.max_retries + 1):
            try:
                response = await self._client().post(
                    _url(self.base_url, path), json=body, headers=self.auth.for_path(path)
                )
            except httpx.TransportError as exc:
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 400:
                    return response.json() if response.content else None
                if response.status_code < 500:
                    refused = _unauthorized(self.base_url, path, response)
                    raise RemoteServerError(
                        refused or f"{self.base_url}{path} refused the request: {response.text[:500]}"
                    )
                failure = f"HTTP {response.status_code}: {response.text[:200]}"
            if attempt < self.max_retries:
                logger.warning("%s%s failed (%s); retrying in %.1f s", self.base_url, path, failure, delay)
                await asyncio.sleep(delay)
                delay *= 2
        raise RemoteServerError(f"{self.base_url}{path} failed after {self.max_retries + 1} attempts: {failure}")

    # ----- generation ---------------------------------------------------------------------------------------------
    @property
    def weight_version(self) -> int:
        """The version of the weights the server serves (as this engine last loaded them)."""
        return self._version

    def _check_servable(self) -> None:
        return None

    def completion_body(self, prompt: list[int], params: SamplingParams, seed: Optional[int]) -> dict[str, Any]:
        """The `/v1/completions` request of one prompt and `params.n` samples."""
        body: dict[str, Any] = {
            "model": self.model_name,
            "prompt": prompt,
            "n": params.n,
            "max_tokens": min(params.max_tokens, self.max_model_len - len(prompt)),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": params.top_logprobs if params.logprobs else None,
            "return_token_ids": True,
        }
        optional = {
            "top_k": (params.top_k, -1),
            "min_p": (params.min_p, 0.0),
            "seed": (seed, None),
            "stop": (list(params.stop), []),
            "stop_token_ids": (list(params.stop_token_ids), []),
            "include_stop_str_in_output": (params.include_stop_str_in_output, False),
            "ignore_eos": (params.ignore_eos, False),
            "repetition_penalty": (params.repetition_penalty, 1.0),
        }
        body.update({name: value for name, (value, default) in optional.items() if value != default})
        clashes = sorted(set(params.extra_kwargs) & set(body))
        if clashes:
            raise ValueError(f"sampling additional_kwargs {clashes} duplicate first-class sampling params")
        body.update(params.extra_kwargs)
        return body

    async def _serve(self, pending: list[PendingRequest]) -> None:
        """Send every prompt as its own request, all at once (the server batches them)."""
        for item in pending:
            task = asyncio.create_task(self._serve_one(item))
            self._tasks.add(task)  # held until done: the loop keeps only weak references to tasks
            task.add_done_callback(self._tasks.discard)

    async def _serve_one(self, item: PendingRequest) -> None:
        try:
            bodies = [self.completion_body(p, item.params, s) for p, s in zip(item.prompts, item.seeds)]
            answers = await asyncio.gather(*(self._complete(body) for body in bodies))
            rows = [row for answer in answers for row in self._rows(answer, item.params)]
            item.future.set_result(rows)
        except Exception as exc:
            if not item.future.done():
                item.future.set_exception(exc)

    async def _complete(self, body: dict[str, Any]) -> dict[str, Any]:
        self._client()
        async with self._limit:
            return await self._post("/v1/completions", body)

    def _rows(self, answer: dict[str, Any], params: SamplingParams) -> list[tuple]:
        choices = sorted(answer["choices"], key=lambda choice: choice["index"])
        rows = []
        for choice in choices:
            ids = choice.get("token_ids")
            if ids is None:
                raise RemoteServerError(
                    f"{self.base_url}/v1/completions returned no token_ids: the server ignores `return_token_ids`, "
                    "which token-in/token-out training needs (vLLM >= 0.10.2, skyrl serve)"
                )
            logprobs, tops = [], []
            if params.logprobs:
                block = choice.get("logprobs") or {}
                logprobs = [float(value) for value in block.get("token_logprobs") or []]
                if len(logprobs) != len(ids):
                    raise RemoteServerError(
                        f"{self.base_url}: {len(logprobs)} logprobs for {len(ids)} tokens in one completion"
                    )
                if params.top_logprobs > 0:
                    tops = [self._top_entries(step) for step in block.get("top_logprobs") or []]
            reason = "stop" if choice.get("finish_reason") == "stop" else choice.get("finish_reason") or "length"
            row = (choice.get("text", ""), list(ids), logprobs, reason, tops)
            if self.in_flight_weight_updates:  # the version that sampled each token, as the server reports it
                versions = choice.get("token_versions")
                if versions is None or len(versions) != len(ids):
                    raise RemoteServerError(f"{self.base_url}: a completion without one token version per token")
                row = (*row, [int(version) for version in versions])
            rows.append(row)
        return rows

    def _top_entries(self, step: dict[str, float]) -> list[tuple[int, float]]:
        ranked = sorted(step.items(), key=lambda item: -item[1])
        return [(self._token_id(token), float(value)) for token, value in ranked]

    def _token_id(self, token: str) -> int:
        if token.startswith("token_id:"):
            return int(token.split(":", 1)[1])
        return int(self.tokenizer.convert_tokens_to_ids(token))

    # ----- lifecycle and weights ----------------------------------------------------------------------------------
    async def sleep(self, level: int = 1) -> None:
        """A remote server shares no memory with the trainer: only new requests are held."""
        await self.pause()

    async def wake_up(self) -> None:
        """Admit requests again."""
        await self.resume()

    async def update_weights(self, named_tensors: Any, version: int) -> None:
        """Stage the tensors; on the sync's final chunk (a new `version`) write every staged tensor as a safetensors
        folder and have the server load it."""
        for name, tensor in named_tensors:
            self._staged[name] = tensor.detach().to("cpu", copy=True).contiguous()
        if version == self._version:
            return
        folder = await asyncio.to_thread(self._write_folder, version)
        await self._load_folder(folder, version)
        self._version = version
        for old in self.weights_dir.iterdir():
            if old != folder and old.name.startswith("v"):
                shutil.rmtree(old, ignore_errors=True)

    def _write_folder(self, version: int) -> Path:
        folder = self.weights_dir / f"v{version}"
        folder.mkdir(parents=True, exist_ok=True)
        save_file(self._staged, str(folder / "model.safetensors"))
        if self.config_dir is not None:
            for name in ("config.json", "generation_config.json"):
                source = Path(self.config_dir) / name
                if source.exists():
                    shutil.copy(source, folder / name)
        return folder

    async def _load_folder(self, folder: Path, version: int) -> None:
        if self.server_kind == "skyrl":
            await self._post("/skyrl/update_weights_from_disk", {"path": str(folder), "version": version})
        elif self.server_kind == "vllm":
            rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(folder), "is_checkpoint_format": True}}
            await self._post("/collective_rpc", rpc)
            await self._post("/reset_prefix_cache", {})
        else:
            answer = await self._post("/update_weights_from_disk", {"model_path": str(folder)})
            if isinstance(answer, dict) and answer.get("success") is False:
                raise RemoteServerError(f"{self.base_url} could not load {folder}: {answer.get('message')}")

    async def reset_prefix_cache(self) -> None:
        """Drop the server's cached prefixes (vLLM); others keep none across weight versions or drop them on load."""
        if self.server_kind == "vllm":
            await self._post("/reset_prefix_cache", {})

    async def weights_checksum(self, names: Optional[list[str]] = None) -> dict[str, float]:
        """Checksums of the weights the server holds: skyrl serve reports them; vLLM does with the worker extension
        (`VLLM_CHECKSUM_METHOD`); SGLang cannot."""
        if self.server_kind == "skyrl":
            return await self._post("/skyrl/weights_checksum", {"names": names})
        if self.server_kind == "vllm":
            try:
                answer = await self._post("/collective_rpc", {"method": VLLM_CHECKSUM_METHOD})
            except RemoteServerError as exc:
                raise NotImplementedError(
                    f"{self.base_url} cannot report weight checksums: start vllm serve with --worker-extension-cls "
                    f"skyrl_train.inference.vllm_worker_extension.SkyRLWorkerExtension ({exc})"
                ) from exc
            served = answer["results"][0]
            return {name: served[name] for name in (names or list(served)) if name in served}
        raise NotImplementedError(f"{self.base_url} (SGLang) cannot report weight checksums")

    async def teardown(self) -> None:
        """Close the HTTP client and remove the temporary weights folder (the server keeps running)."""
        self._closed = True
        if self._http is not None and self._loop is asyncio.get_running_loop():
            await self._http.aclose()
        self._http = None
        if self._own_weights_dir:
            shutil.rmtree(self.weights_dir, ignore_errors=True)
