"""`python -m skyrl_train.entrypoints.serve`: an OpenAI-compatible server for a model, on one engine in this process.

    python -m skyrl_train.entrypoints.serve                       # the embedded model (built and cached on first use)
    python -m skyrl_train.entrypoints.serve --model /path/to/hf_model --port 8001
    python -m skyrl_train.entrypoints.serve --backend vllm --model /path/to/hf_model generator.inference_engine.model_dtype=float32
    SKYRL_API_KEY=... python -m skyrl_train.entrypoints.serve --enable-weight-updates   # a training run's `remote` engine

`key=value` overrides set the engine like a training run's config does (`generator.inference_engine.*`,
`trainer.device`, `trainer.seed`). The served model name is `--served-model-name`, else `skyrl/<folder name>`.
Keys come from `--api-key` / `--weight-update-token` or, kept out of the process list, from the `SKYRL_API_KEY` /
`SKYRL_WEIGHT_UPDATE_TOKEN` environment variables; `--enable-weight-updates` is refused without a token.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
from collections.abc import Sequence
from typing import Any, Optional

logger = logging.getLogger(__name__)


def served_name(model_path: str, given: Optional[str]) -> str:
    """`given`, else `skyrl/<the model folder's name>`."""
    return given or f"skyrl/{os.path.basename(os.path.normpath(model_path))}"


def build_server_parts(
    model_path: str, backend: str, overrides: Sequence[str], in_flight_weight_updates: bool = False
) -> tuple[Any, Any]:
    """`(client, tokenizer)` for `model_path` on one `backend` engine in this process, with config overrides;
    `in_flight_weight_updates`: the engine takes new weights between two tokens of running completions."""
    from skyrl_train.config import SkyRLConfig
    from skyrl_train.inference.client import InferenceEngineClient
    from skyrl_train.inference.ray_engine import ENGINE_BUILDERS, EngineSettings, check_engine_backend
    from skyrl_train.models.loading import load_tokenizer

    cfg = SkyRLConfig.from_cli_overrides(
        [f"trainer.policy.model.path={model_path}", f"generator.inference_engine.backend={backend}", *overrides],
        validate=False,
    )
    settings = EngineSettings.from_config(cfg, model_path, in_flight_weight_updates=in_flight_weight_updates)
    check_engine_backend(settings)
    engine = ENGINE_BUILDERS.get(settings.backend)(settings)
    return InferenceEngineClient([engine]), load_tokenizer(model_path)


def access_from_args(args: argparse.Namespace, environ: Optional[dict[str, str]] = None) -> Any:
    """The server's `ServingAccess` from the parsed flags (keys not given come from the environment); raises
    `ValueError` naming the flag for a combination that would leave a route open or a flag without effect."""
    from skyrl_train.serving.access import API_KEY_ENV, WEIGHT_UPDATE_TOKEN_ENV, ServingAccess

    environ = dict(os.environ) if environ is None else environ
    api_key = args.api_key or environ.get(API_KEY_ENV) or None
    token = args.weight_update_token or environ.get(WEIGHT_UPDATE_TOKEN_ENV) or None
    if not args.enable_weight_updates:
        given = [flag for flag, value in (("--weight-update-token", args.weight_update_token),
                 ("--weight-update-root", args.weight_update_root)) if value]  # fmt: skip
        if given:
            raise ValueError(f"{' and '.join(given)} only apply with --enable-weight-updates")
        token = None
    elif not (token or api_key):
        raise ValueError(
            "--enable-weight-updates needs a token: --weight-update-token (or the SKYRL_WEIGHT_UPDATE_TOKEN environment "
            "variable), or --api-key / SKYRL_API_KEY; without one anyone who reaches the port could replace the weights"
        )
    if args.weight_update_root is not None and not os.path.isdir(args.weight_update_root):
        raise ValueError(f"--weight-update-root {args.weight_update_root} is not a folder")
    if args.max_request_mb <= 0:
        raise ValueError(f"--max-request-mb must be > 0, got {args.max_request_mb}")
    return ServingAccess(
        api_key=api_key,
        weight_update_token=token,
        weight_update_root=args.weight_update_root,
        max_request_mb=args.max_request_mb,
        docs=args.enable_docs,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse the arguments, build the engine, serve until interrupted."""
    from skyrl_train.config.generator import HttpEndpointConfig  # light: a parse error stays instant

    default_mb = HttpEndpointConfig.max_request_mb
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default=None, help="a Hugging Face model folder (default: the embedded model)")
    parser.add_argument("--backend", default="hf", choices=["hf", "vllm"])
    parser.add_argument("--served-model-name", default=None, help="the `model` clients send (default skyrl/<folder>)")
    parser.add_argument(
        "--enable-weight-updates",
        action="store_true",
        help="add /skyrl/* routes that load new weights from a folder under --weight-update-root, so a training run "
        "can use this server as a `remote` engine (they need --weight-update-token or --api-key)",
    )
    parser.add_argument(
        "--in-flight-weight-updates",
        action="store_true",
        help="with --enable-weight-updates: a new folder lands between two tokens of running completions instead of "
        "waiting for them, and every completion choice reports the weight version of each token (`token_versions`); "
        "what a fully_async run with trainer.async_rl.weight_update_boundary=token needs",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help="bearer key every route but /health requires (the openai client's api_key); default: $SKYRL_API_KEY, "
        "else none",
    )
    parser.add_argument(
        "--weight-update-token",
        default=None,
        help="bearer token the /skyrl/* routes require; default: $SKYRL_WEIGHT_UPDATE_TOKEN, else the API key",
    )
    parser.add_argument(
        "--weight-update-root",
        default=None,
        help="the only folder (with its subfolders) weights are loaded from; default: <tempdir>/skyrl-weights-<uid>, "
        "where the remote engine writes them",
    )
    parser.add_argument(
        "--max-request-mb",
        type=float,
        default=default_mb,
        help=f"request-body cap in MiB, counted as the body streams in (413 past it; default {default_mb:g})",
    )
    parser.add_argument("--enable-docs", action="store_true", help="serve /docs, /redoc and /openapi.json")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_intermixed_args(argv)
    bad = [item for item in args.overrides if "=" not in item]
    if bad:
        parser.error(f"overrides must be key=value, got {bad}")
    if args.in_flight_weight_updates and not args.enable_weight_updates:
        parser.error("--in-flight-weight-updates needs --enable-weight-updates (it is how weight updates land)")
    try:
        args.access = access_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from skyrl_train.serving.listen import listen_socket

    listener = listen_socket(args.host, args.port)  # before the engine loads: a taken port fails now
    args.port = listener.getsockname()[1]  # --port 0: the one the OS gave
    try:
        _serve(args, listener)
    finally:
        listener.close()
    return 0


def _serve(args: argparse.Namespace, listener: socket.socket) -> None:
    """Build the engine and serve the OpenAI-compatible API on `listener` until interrupted."""
    from skyrl_train.serving import create_app
    from skyrl_train.serving.listen import serve_on

    model_path = args.model
    if model_path is None:
        from skyrl_train.recipes.embedded import get_embedded_model

        model_path = str(get_embedded_model())
    client, tokenizer = build_server_parts(model_path, args.backend, args.overrides, args.in_flight_weight_updates)
    name = served_name(model_path, args.served_model_name)
    logger.info("serving %s (%s engine) as %r on http://%s:%d/v1", model_path, args.backend, name, args.host, args.port)
    if args.access.api_key is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("--host %s without --api-key: anyone who reaches the port can use the model", args.host)
    if args.enable_weight_updates:
        from skyrl_train.inference.remote_engine import default_weights_root

        root = args.access.weight_update_root or default_weights_root()
        logger.info("weight updates on: /skyrl/* take the weight-update token and load folders under %s", root)
    app = create_app(client, tokenizer, name, weight_updates=args.enable_weight_updates, access=args.access)
    serve_on(app, listener)


if __name__ == "__main__":
    raise SystemExit(main())
