"""Request and response types shared by every inference engine: sampling params, engine input and output."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Union

StopReason = str  # "stop" (eos, stop token or stop string) | "length" (max_tokens or context limit) | "abort"


class InvalidRequest(ValueError):
    """A generate request an engine refuses before it joins a batch (an empty or too long prompt, a token id outside
    the vocabulary): the caller's own mistake, which the OpenAI-compatible endpoint answers with 400."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. `temperature=0` is greedy. `logprobs=True` returns the log-probability of each sampled token;
    `top_logprobs=k` (needs `logprobs`) also returns the k most likely tokens of each step with their logprobs.

    Logprobs are taken from the temperature-scaled distribution `log_softmax(logits / temperature)` before top-k,
    top-p and min-p filtering (greedy uses temperature 1), which is what the trainer recomputes. A
    `repetition_penalty` != 1 changes the logits the engine samples from (before temperature), and the logprobs
    are those of the penalised distribution, the one the tokens were really drawn from; the trainer recomputes
    logprobs without the penalty, so the two then differ.

    `additional_kwargs` (pairs) are engine-specific extras: the `vllm` engine passes them to `vllm.SamplingParams`;
    the `hf` engine refuses any (it has no other knobs).
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    n: int = 1
    seed: Optional[int] = None
    logprobs: bool = True
    top_logprobs: int = 0
    repetition_penalty: float = 1.0
    additional_kwargs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        checks = [
            (self.max_tokens >= 1, f"max_tokens must be >= 1, got {self.max_tokens}"),
            (self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}"),
            (0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}"),
            (self.top_k == -1 or self.top_k >= 1, f"top_k must be -1 (off) or >= 1, got {self.top_k}"),
            (0 <= self.min_p < 1, f"min_p must be in [0, 1), got {self.min_p}"),
            (self.n >= 1, f"n must be >= 1, got {self.n}"),
            (self.top_logprobs >= 0, f"top_logprobs must be >= 0, got {self.top_logprobs}"),
            (self.top_logprobs == 0 or self.logprobs, "top_logprobs > 0 needs logprobs=True"),
            (self.repetition_penalty > 0, f"repetition_penalty must be > 0, got {self.repetition_penalty}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"SamplingParams: {message}")
        if isinstance(self.stop, (str, list)):
            object.__setattr__(self, "stop", tuple([self.stop] if isinstance(self.stop, str) else self.stop))
        if isinstance(self.stop_token_ids, list):
            object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if isinstance(self.additional_kwargs, dict):
            object.__setattr__(self, "additional_kwargs", tuple(sorted(self.additional_kwargs.items())))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SamplingParams:
        """Build from a mapping, rejecting unknown keys with the list of known ones."""
        known = set(cls.__dataclass_fields__)
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"SamplingParams: unknown keys {sorted(unknown)}; known keys are {sorted(known)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The params as a plain dict."""
        return asdict(self)

    @property
    def extra_kwargs(self) -> dict[str, Any]:
        """`additional_kwargs` as a dict."""
        return dict(self.additional_kwargs)


Messages = list[dict[str, str]]


@dataclass
class InferenceEngineInput:
    """One generate call: either token ids (preferred: token-in/token-out) or chat messages, one entry per prompt.

    `session_ids` (optional, one per prompt) let a client route every turn of a conversation to the same engine, and
    let the `hf` engine keep the conversation's KV cache between its turns (`enable_prefix_caching`).
    `seeds` (optional, one per prompt, None entries allowed) replace `sampling_params.seed` prompt by prompt, so one
    call can carry differently seeded prompts and still be decoded as one batch.
    """

    prompt_token_ids: Optional[list[list[int]]] = None
    prompts: Optional[list[Messages]] = None
    sampling_params: SamplingParams = field(default_factory=SamplingParams)
    session_ids: Optional[list[Union[str, int]]] = None
    seeds: Optional[list[Optional[int]]] = None

    def __post_init__(self) -> None:
        if (self.prompt_token_ids is None) == (self.prompts is None):
            raise ValueError("InferenceEngineInput needs exactly one of prompt_token_ids or prompts")
        if self.session_ids is not None and len(self.session_ids) != self.num_prompts:
            raise ValueError(
                f"InferenceEngineInput: {len(self.session_ids)} session_ids for {self.num_prompts} prompts; "
                "give one per prompt"
            )
        if self.seeds is not None and len(self.seeds) != self.num_prompts:
            raise ValueError(
                f"InferenceEngineInput: {len(self.seeds)} seeds for {self.num_prompts} prompts; give one per prompt"
            )

    def prompt_seeds(self) -> list[Optional[int]]:
        """The seed of each prompt: its `seeds` entry, else `sampling_params.seed`."""
        return list(self.seeds) if self.seeds is not None else [self.sampling_params.seed] * self.num_prompts

    @property
    def num_prompts(self) -> int:
        """How many prompts the call holds."""
        return len(self.prompt_token_ids if self.prompt_token_ids is not None else self.prompts)


@dataclass
class InferenceEngineOutput:
    """What generate returns: `n` outputs per prompt, prompt-major (prompt 0's samples first).

    `response_ids` are exactly the tokens the engine produced (including the eos / stop token that ended the
    sequence); `responses` is their text with a matched stop string cut off unless requested otherwise.
    `response_top_logprobs` (with `sampling_params.top_logprobs = k > 0`) holds, per output and per generated
    token, the k most likely `(token_id, logprob)` pairs of that step, most likely first, under the same
    distribution as `response_logprobs`. `response_token_versions` (engines that record it) holds, per output and
    per generated token, the weight version that sampled it; `weight_version` is the oldest of them (an in-flight
    weight update can change the version between two tokens of one output).
    """

    responses: list[str]
    response_ids: list[list[int]]
    stop_reasons: list[StopReason]
    response_logprobs: Optional[list[list[float]]] = None
    response_top_logprobs: Optional[list[list[list[tuple[int, float]]]]] = None
    weight_version: int = 0
    response_token_versions: Optional[list[list[int]]] = None

    def __len__(self) -> int:
        return len(self.response_ids)
