"""An OpenAI-compatible HTTP server over the inference engines (`python -m skyrl_train.entrypoints.serve`)."""

from skyrl_train.serving.app import OpenAIServer, create_app
from skyrl_train.serving.protocol import ChatCompletionRequest, CompletionRequest, ServingError
from skyrl_train.serving.tool_calls import parse_tool_calls

__all__ = [
    "ChatCompletionRequest",
    "CompletionRequest",
    "OpenAIServer",
    "ServingError",
    "create_app",
    "parse_tool_calls",
]
