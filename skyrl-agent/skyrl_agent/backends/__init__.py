"""Inference backends of the agent layer: `skyrl_train`, `openai` and `tinker`, one interface."""

from __future__ import annotations

from typing import Any

from skyrl_agent.backends.base import AgentBackend, Generation, TurnRequest
from skyrl_agent.backends.openai_backend import OpenAIBackend
from skyrl_agent.backends.skyrl_train_backend import SkyRLTrainBackend
from skyrl_agent.backends.tinker_backend import TinkerBackend

__all__ = [
    "AgentBackend",
    "Generation",
    "TurnRequest",
    "OpenAIBackend",
    "SkyRLTrainBackend",
    "TinkerBackend",
    "build_backend",
]

_ARGS = {
    "openai": {"base_url", "model", "api_key", "mode", "timeout_s"},
    "tinker": {"base_url", "model_path", "base_model", "api_key"},
}


def build_backend(name: str, args: dict[str, Any], tokenizer: Any) -> AgentBackend:
    """The backend `generator.backend` names, from `generator.backend_args`. `skyrl_train` cannot be built from
    config: it is the trainer's engine client, passed in (`AgentRunner(cfg, SkyRLTrainBackend(client, tok), tok)`)."""
    if name == "skyrl_train":
        raise ValueError(
            "generator.backend=skyrl_train needs the trainer's engine client: pass "
            "SkyRLTrainBackend(client, tokenizer) to AgentRunner (training runs do this through AgentGenerator)"
        )
    unknown = set(args) - _ARGS[name]
    if unknown:
        raise ValueError(
            f"generator.backend_args: unknown keys {sorted(unknown)} for backend {name}; known: {sorted(_ARGS[name])}"
        )
    if name == "openai":
        missing = {"base_url", "model"} - set(args)
        if missing:
            raise ValueError(f"generator.backend_args needs {sorted(missing)} for the openai backend")
        return OpenAIBackend(tokenizer=tokenizer, **args)
    import tinker

    if "base_url" not in args or not ({"model_path", "base_model"} & set(args)):
        raise ValueError("generator.backend_args needs base_url and model_path (or base_model) for the tinker backend")
    service = tinker.ServiceClient(base_url=args["base_url"], api_key=args.get("api_key"))  # None: $TINKER_API_KEY
    sampler = service.create_sampling_client(model_path=args.get("model_path"), base_model=args.get("base_model"))
    return TinkerBackend(sampler, tokenizer, service=service)  # close() finishes the session it opened
