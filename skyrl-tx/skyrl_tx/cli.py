"""`skyrl-tx serve | version`: start the Tinker-compatible service (compute in process or on Ray), or print the
version."""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import logging
import os
import secrets
import shutil
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from skyrl_tx import __version__
from skyrl_tx.limits import Limits

DEFAULT_BASE_MODEL = "skyrl/embedded-arithmetic"
"""The name the embedded default model is served under (hub-style: exactly one `/`)."""
DEFAULT_MODEL_SETTINGS = {"task": "addition", "difficulty": 2, "size": 2, "seed": 0, "train_examples": 8192}
"""The embedded model served by default: the quickstart's (2-digit addition, held-out greedy accuracy ~0.25)."""
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)


def default_checkpoint_dir() -> Path:
    """`$SKYRL_CACHE/tx`, else `~/.cache/skyrl/tx`."""
    return Path(os.path.expanduser(os.environ.get("SKYRL_CACHE") or "~/.cache/skyrl")) / "tx"


def tokenizer_folder(name: str, model_path: str, checkpoint_dir: Path) -> str:
    """The folder `get_info` names as `tokenizer_id`. A tokenizer saved as a plain `tokenizers` tokenizer (the
    embedded one) is copied without the model's `config.json`: next to it, `AutoTokenizer` would swap in the
    architecture's tokenizer class and lose the char vocabulary's spaces and newlines."""
    from skyrl_train.models.loading import saved_as_generic_fast_tokenizer

    if not saved_as_generic_fast_tokenizer(model_path):
        return model_path
    target = checkpoint_dir / "tokenizers" / name.replace("/", "--")
    target.mkdir(parents=True, exist_ok=True)
    for file in TOKENIZER_FILES:
        source = Path(model_path) / file
        if source.is_file():
            shutil.copyfile(source, target / file)
    return str(target)


def parse_base_models(values: Optional[Sequence[str]], check_folders: bool = True) -> dict[str, str]:
    """`NAME=PATH` pairs; none means the embedded default model (built and cached on first use). `check_folders`:
    refuse a PATH that is not a folder on this machine."""
    if not values:
        from skyrl_train.recipes.embedded import get_embedded_model
        from skyrl_train.recipes.warm_start import WarmStartSettings

        settings = WarmStartSettings(**DEFAULT_MODEL_SETTINGS)
        return {DEFAULT_BASE_MODEL: str(get_embedded_model(settings))}
    models = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--base-model expects NAME=PATH, got {value!r}")
        if check_folders and not Path(os.path.expanduser(path)).is_dir():
            raise SystemExit(f"--base-model {name}: {path} is not a folder with a Hugging Face model")
        models[name] = os.path.expanduser(path)
    return models


KEYS_ENV = "SKYRL_TX_API_KEYS"
"""Environment variable with accepted keys (comma- or newline-separated); unlike `--api-key` it is not visible to
other users in the process list."""
DEV_KEY_FILE = "dev-api-key"
"""Where dev mode keeps its generated key, in the checkpoint dir (0600): the same key, and so the same owner of the
runs and checkpoints, after a restart."""


def read_keys(
    keys: Optional[Sequence[str]], keys_file: Optional[str], environ: Optional[dict] = None
) -> frozenset[str]:
    """The accepted API keys: each `--api-key`, one key per non-empty line of `--api-keys-file`, and the keys in
    `$SKYRL_TX_API_KEYS`."""
    accepted = set(keys or [])
    if keys_file:
        try:
            lines = Path(os.path.expanduser(keys_file)).read_text().splitlines()
        except OSError as exc:
            raise SystemExit(f"--api-keys-file {keys_file}: cannot read it ({exc.strerror or exc})") from None
        accepted |= {line.strip() for line in lines if line.strip()}
    listed = (os.environ if environ is None else environ).get(KEYS_ENV, "")
    accepted |= {key.strip() for key in listed.replace(",", "\n").splitlines() if key.strip()}
    return frozenset(accepted)


def dev_key(checkpoint_dir: Path) -> str:
    """Dev mode's key: a random `tml-dev-...` made on the first start and kept (0600) in the checkpoint dir."""
    path = checkpoint_dir / DEV_KEY_FILE
    if path.is_file():
        key = path.read_text().strip()
        if key:
            return key
    key = f"tml-dev-{secrets.token_hex(16)}"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(key + "\n")
    return key


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback address (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(address.split("%")[0]).is_loopback for address in addresses)


def check_exposure(host: str, keys: frozenset[str], insecure: bool) -> None:
    """Refuse (SystemExit) serving a non-loopback `--host` without configured keys unless `--insecure` is given."""
    if not keys and not insecure and not is_loopback(host):
        raise SystemExit(
            f"--host {host} is reachable from other machines, and no keys are configured: give --api-keys-file (or "
            f"${KEYS_ENV}, or --api-key), or pass --insecure to serve the generated dev key there anyway"
        )


def private_state_dir(checkpoint_dir: Path) -> None:
    """Make the service's files private to its user: the checkpoint dir 0700, the SQLite files 0600, and a umask
    that keeps every file the server writes later (checkpoints, the database, logs) unreadable to others."""
    os.umask(0o077)
    checkpoint_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(checkpoint_dir, 0o700)
    for path in checkpoint_dir.glob("skyrl_tx.db*"):
        os.chmod(path, 0o600)


def resolve_device(device: str) -> str:
    """`auto` -> `cuda` when torch sees a GPU, else `cpu`; a CUDA device torch cannot see is refused by name."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {device}: torch sees no CUDA GPU on this machine (use --device cpu)")
    if not (device == "cpu" or device.startswith("cuda")):
        raise SystemExit(f"--device must be cpu, cuda, cuda:N or auto, got {device!r}")
    return device


def resolve_sampler(choice: str, device: str) -> str:
    """The sampler `--sampler` means on `device`: `auto` is `vllm` when the vllm package is installed and the compute
    runs on CUDA, `hf` otherwise (vLLM's CPU build sampled this project's small models at ~0.2x the hf engine's
    tokens/s: benchmarks/tx_sampler.py)."""
    if choice != "auto":
        return choice
    return "vllm" if device.startswith("cuda") and importlib.util.find_spec("vllm") is not None else "hf"


def check_compute_flags(args: argparse.Namespace) -> None:
    """Refuse (SystemExit naming the flag) Ray flags without `--compute ray`, a rank count below 1, and vLLM flags
    with `--sampler hf`."""
    if args.vllm_max_lora_rank is not None and args.sampler == "hf":
        raise SystemExit(f"--vllm-max-lora-rank needs --sampler vllm (the sampler is {args.sampler!r})")
    if args.vllm_max_lora_rank is not None and not 1 <= args.vllm_max_lora_rank <= 512:
        raise SystemExit(f"--vllm-max-lora-rank must be in [1, 512], got {args.vllm_max_lora_rank}")
    if args.compute != "ray":
        flags = (("--ray-workers", args.ray_workers), ("--ray-address", args.ray_address))
        for flag, value in (*flags, ("--ray-sharding", args.ray_sharding)):
            if value is not None:
                raise SystemExit(f"{flag} needs --compute ray (the compute is {args.compute!r})")
        return
    if args.ray_workers is not None and args.ray_workers < 1:
        raise SystemExit(f"--ray-workers must be >= 1, got {args.ray_workers}")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(prog="skyrl-tx", description="Tinker-compatible training and sampling service")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="start the service")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--base-model", action="append", metavar="NAME=PATH", help="a served base model (repeatable)")
    serve.add_argument("--database-url", default=None, help="SQLAlchemy URL (default: SQLite under --checkpoint-dir)")
    serve.add_argument(
        "--api-key",
        action="append",
        help=f"an accepted key (repeatable; visible in the process list: prefer --api-keys-file or ${KEYS_ENV}); "
        "none anywhere: dev mode, one generated key",
    )
    serve.add_argument("--api-keys-file", default=None, help="a file with one accepted key per line")
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback --host without configured keys (dev mode's generated key, over plain HTTP)",
    )
    serve.add_argument("--enable-docs", action="store_true", help="serve /docs, /redoc and /openapi.json")
    serve.add_argument("--checkpoint-dir", default=None, help="where checkpoints and the SQLite file live")
    serve.add_argument("--poll-seconds", type=float, default=25.0, help="longest retrieve_future long-poll")
    serve.add_argument("--max-request-mb", type=float, default=64.0, help="largest accepted request body")
    serve.add_argument(
        "--session-timeout-s",
        type=float,
        default=300.0,
        help="unload the models of sessions silent this long (0: never)",
    )
    serve.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, or auto (cuda when available)")
    serve.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="base weights")
    serve.add_argument(
        "--compute",
        default="local",
        choices=["local", "ray"],
        help="local: in this process on --device; ray: on --ray-workers data-parallel Ray actors per base model",
    )
    serve.add_argument(
        "--ray-workers", type=int, default=None, help="ranks per base model with --compute ray (default 1)"
    )
    serve.add_argument(
        "--ray-address",
        default=None,
        help="a running Ray cluster (auto, HOST:PORT, ray://...) for --compute ray; default: start a local Ray",
    )
    serve.add_argument(
        "--ray-sharding",
        default=None,
        choices=["replicate", "fsdp2"],
        help="with --compute ray: each rank holds the whole base model (replicate, the default) or an FSDP2 shard of it",
    )
    serve.add_argument(
        "--sampler",
        default="auto",
        choices=["auto", "hf", "vllm"],
        help="auto: vllm when installed and on CUDA, else hf; hf: sample on the compute host's hf engine; vllm: a "
        "vLLM engine (in this process, or a Ray actor with --compute ray) serving each sampler's "
        "saved LoRA weights as an adapter by name (needs vllm installed)",
    )
    serve.add_argument(
        "--vllm-max-lora-rank",
        type=int,
        default=None,
        help="with --sampler vllm: the largest LoRA rank sampled (vLLM reserves room for it; default 64)",
    )
    serve.add_argument("--log-level", default="info")
    serve.add_argument(
        "--dry-run",
        action="store_true",
        help="check the flags and print the settings the service would start with, then exit (no model, port or Ray)",
    )
    Limits.add_flags(serve.add_argument_group("per-request budgets (400) and per-key quotas (429)"))
    commands.add_parser("version", help="print the version")
    return parser


def serve(args: argparse.Namespace) -> None:
    """Build the service and run it under uvicorn (with `--dry-run`: print what it would start, start nothing)."""
    check_compute_flags(args)
    limits = Limits.from_args(args)
    if args.dry_run:
        print(describe_service(args, limits))
        return
    check_exposure(args.host, read_keys(args.api_key, args.api_keys_file), args.insecure)
    from skyrl_train.serving.listen import listen_socket

    listener = listen_socket(args.host, args.port)  # before the models load: a taken port fails now, not minutes later
    args.port = listener.getsockname()[1]  # --port 0: the one the OS gave
    try:
        _serve(args, listener)
    finally:
        listener.close()


def describe_service(args: argparse.Namespace, limits: Limits) -> str:
    """The settings `serve` would start with, one `name: value` line each, resolved as far as is possible without
    loading a model, taking the port or starting Ray. Model folders need not exist here and a named device is printed
    as given (`auto` is resolved on this machine), so a GPU machine's settings can be checked anywhere."""
    models = {DEFAULT_BASE_MODEL: "(the embedded model)"}
    if args.base_model:
        models = parse_base_models(args.base_model, check_folders=False)
    device = resolve_device("auto") if args.device == "auto" else args.device
    checkpoint_dir = Path(os.path.expanduser(args.checkpoint_dir)) if args.checkpoint_dir else default_checkpoint_dir()
    database = (args.database_url or f"sqlite:///{checkpoint_dir / 'skyrl_tx.db'}").split("@")[-1]
    keys_file = args.api_keys_file
    if keys_file and not Path(os.path.expanduser(keys_file)).is_file():  # a run script writes it before starting
        keys = "from " + keys_file + " (not there yet: a real start needs it)"
        check_exposure(args.host, frozenset({keys}), args.insecure)
    else:
        accepted = read_keys(args.api_key, keys_file)
        check_exposure(args.host, accepted, args.insecure)
        keys = f"{len(accepted)} configured" if accepted else "none configured: dev mode, one generated key"
    compute = args.compute
    if args.compute == "ray":
        compute += f" ({args.ray_workers or 1} rank(s) per model, {args.ray_sharding or 'replicate'})"
    lines = {
        "url": f"http://{args.host}:{args.port}",
        "base models": ", ".join(f"{name}={path}" for name, path in models.items()),
        "device": device,
        "dtype": args.dtype,
        "compute": compute,
        "sampler": resolve_sampler(args.sampler, device),
        "checkpoint dir": checkpoint_dir,
        "database": database,
        "api keys": keys,
        "max request": f"{args.max_request_mb} MB",
        "session timeout": f"{args.session_timeout_s} s",
        **{f"limit {name}": value for name, value in vars(limits).items()},
    }
    return "skyrl-tx serve --dry-run (nothing started)\n" + "\n".join(f"  {k}: {v}" for k, v in lines.items())


def _serve(args: argparse.Namespace, listener: socket.socket) -> None:
    """`serve` once its port is held: build the service, then answer on `listener` until interrupted."""
    from skyrl_train.serving.listen import serve_on
    from skyrl_tx.app import ApiKeys, create_app
    from skyrl_tx.compute import Sampler
    from skyrl_tx.db import Database
    from skyrl_tx.service import BaseModel, Service

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    log = logging.getLogger("skyrl_tx")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    checkpoint_dir = Path(os.path.expanduser(args.checkpoint_dir)) if args.checkpoint_dir else default_checkpoint_dir()
    private_state_dir(checkpoint_dir)
    url = args.database_url or f"sqlite:///{checkpoint_dir / 'skyrl_tx.db'}"
    accepted = read_keys(args.api_key, args.api_keys_file)
    generated = None if accepted else dev_key(checkpoint_dir)
    keys = ApiKeys.of(accepted or {generated})
    base_models = {
        name: BaseModel(name, path, tokenizer_folder(name, path, checkpoint_dir))
        for name, path in parse_base_models(args.base_model).items()
    }
    started_ray, make_host = False, None
    if args.compute == "ray":
        from skyrl_tx.ray_compute import RayLoraHost, ray_device, start_ray

        started_ray = start_ray(args.ray_address)
        workers = args.ray_workers or 1
        device = ray_device(args.device, workers, len(base_models))
        sampler = resolve_sampler(args.sampler, device)
        if sampler == "vllm":  # a vLLM actor per base model next to its ranks: check the cluster has room for it too
            ray_device(args.device, workers, len(base_models), samplers=1)

        def make_host(base: BaseModel) -> RayLoraHost:
            sharding = args.ray_sharding or "replicate"
            return RayLoraHost(base.name, base.path, workers, device=device, dtype=args.dtype, sharding=sharding)

    else:
        device = resolve_device(args.device)
        sampler = resolve_sampler(args.sampler, device)
    if args.vllm_max_lora_rank is not None and sampler != "vllm":
        raise SystemExit(f"--vllm-max-lora-rank: --sampler {args.sampler} resolved to {sampler} on {device}")
    make_sampler = None
    if sampler == "vllm":
        max_lora_rank = args.vllm_max_lora_rank or 64

        def make_sampler(base: BaseModel) -> Sampler:
            assert base.host is not None
            options = {"device": device, "dtype": args.dtype, "max_lora_rank": max_lora_rank}
            if args.compute == "ray":
                from skyrl_tx.ray_vllm_sampler import RayVLLMSampler

                return RayVLLMSampler(base.path, base.host.max_context, **options)
            from skyrl_tx.vllm_sampler import VLLMSampler

            return VLLMSampler(base.path, base.host.max_context, **options)

    service = Service(
        Database(url),
        checkpoint_dir,
        base_models,
        session_timeout_s=args.session_timeout_s,
        device=device,
        dtype=args.dtype,
        make_host=make_host,
        make_sampler=make_sampler,
        limits=Limits.from_args(args),
    )
    try:
        service.start()
    except BaseException:
        service.stop()
        _stop_ray(started_ray)
        raise
    if generated is not None:
        print(
            f"skyrl-tx: no API keys configured (dev mode): the one accepted key is {generated} (kept in "
            f"{checkpoint_dir / DEV_KEY_FILE}); export TINKER_API_KEY={generated}",
            flush=True,
        )
    compute = device
    if args.compute == "ray":
        compute = f"{args.ray_workers or 1} Ray rank(s) per model ({args.ray_sharding or 'replicate'}) on {device}"
    compute += ", sampling on vLLM" if sampler == "vllm" else ""
    log.info(
        "serving %s on http://%s:%d (%s, %s; database %s)",
        sorted(base_models),
        args.host,
        args.port,
        compute,
        args.dtype,
        url.split("@")[-1],
    )
    app = create_app(service, keys, args.poll_seconds, int(args.max_request_mb * (1 << 20)), docs=args.enable_docs)
    try:
        serve_on(app, listener)
    finally:
        service.stop()
        _stop_ray(started_ray)


def _stop_ray(started: bool) -> None:
    """Shut down the local Ray this process started (a cluster it only connected to keeps running)."""
    if started:
        import ray

        ray.shutdown()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the `skyrl-tx` console script."""
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(__version__)
        return 0
    serve(args)
    return 0
