"""Inference: the `InferenceEngine` interface, the embedded `hf` engine and the multi-engine client."""

from skyrl_train.inference.base import InferenceEngine
from skyrl_train.inference.client import InferenceEngineClient
from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.types import InferenceEngineInput, InferenceEngineOutput, SamplingParams

__all__ = [
    "InferenceEngine",
    "InferenceEngineClient",
    "HFInferenceEngine",
    "InferenceEngineInput",
    "InferenceEngineOutput",
    "SamplingParams",
]
