"""`python -m skyrl_train.entrypoints.serve`: an OpenAI-compatible server for a model, on one engine in this process.

    python -m skyrl_train.entrypoints.serve                       # the embedded model (built and cached on first use)
    python -m skyrl_train.entrypoints.serve --model /path/to/hf_model --port 8001
    python -m skyrl_train.entrypoints.serve --backend vllm --model /path/to/hf_model generator.inference_engine.model_dtype=float32
    python -m skyrl_train.entrypoints.serve --enable-weight-updates   # usable as a training run's `remote` engine

`key=value` overrides set the engine like a training run's config does (`generator.inference_engine.*`,
`trainer.device`, `trainer.seed`). The served model name is `--served-model-name`, else `skyrl/<folder name>`.
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


def build_server_parts(model_path: str, backend: str, overrides: Sequence[str]) -> tuple[Any, Any]:
    """`(client, tokenizer)` for `model_path` on one `backend` engine in this process, with config overrides."""
    from skyrl_train.config import SkyRLConfig
    from skyrl_train.inference.client import InferenceEngineClient
    from skyrl_train.inference.ray_engine import ENGINE_BUILDERS, EngineSettings, check_engine_backend
    from skyrl_train.models.loading import load_tokenizer

    cfg = SkyRLConfig.from_cli_overrides(
        [f"trainer.policy.model.path={model_path}", f"generator.inference_engine.backend={backend}", *overrides],
        validate=False,
    )
    settings = EngineSettings.from_config(cfg, model_path)
    check_engine_backend(settings)
    engine = ENGINE_BUILDERS.get(settings.backend)(settings)
    return InferenceEngineClient([engine]), load_tokenizer(model_path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse the arguments, build the engine, serve until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default=None, help="a Hugging Face model folder (default: the embedded model)")
    parser.add_argument("--backend", default="hf", choices=["hf", "vllm"])
    parser.add_argument("--served-model-name", default=None, help="the `model` clients send (default skyrl/<folder>)")
    parser.add_argument(
        "--enable-weight-updates",
        action="store_true",
        help="add /skyrl/* routes that load new weights from a local folder, so a training run can use this server "
        "as a `remote` engine (anyone who can reach the port can then replace the weights)",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_intermixed_args(argv)
    bad = [item for item in args.overrides if "=" not in item]
    if bad:
        parser.error(f"overrides must be key=value, got {bad}")
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
    client, tokenizer = build_server_parts(model_path, args.backend, args.overrides)
    name = served_name(model_path, args.served_model_name)
    logger.info("serving %s (%s engine) as %r on http://%s:%d/v1", model_path, args.backend, name, args.host, args.port)
    app = create_app(client, tokenizer, name, weight_updates=args.enable_weight_updates)
    serve_on(app, listener)


if __name__ == "__main__":
    raise SystemExit(main())
