"""`llm_as_a_judge`: SkyRL's LLM-as-a-judge example, a single-turn env whose reward a judge model decides.

The response and the row's `reward_spec.ground_truth` (the gold solution or answer) are put into one user message
under the grading instructions, sent to `{base_url}/chat/completions` (any OpenAI-compatible server: OpenAI, vLLM,
`skyrl_train.entrypoints.serve`, ...), and the judge's reply must hold a line `### Final Score: 1` or
`### Final Score: 0` (the last one counts; a bare `1` or `0` reply is accepted too). That score is the reward.

A judge that cannot be reached (after `max_attempts` tries of connection errors, 429 and 5xx answers), answers with
another HTTP error, or replies without a score raises `JudgeError`: the generator's guard turns it into a failed step
with the reason (`skyrl_gym.guarded_step`), so an outage never trains as a zero reward (SkyRL scores it 0.0).

env_config keys (SkyRL's `environment.skyrl_gym.llm_as_a_judge.*` section, the first two being SkyRL's):
    model: the judge model's name (default "gpt-4o-mini").
    base_url: the API root, e.g. "http://127.0.0.1:8000/v1" (default OpenAI's, https://api.openai.com/v1).
    api_key_env: the environment variable holding the API key (default OPENAI_API_KEY). It is required for OpenAI's
        API; for another server it is sent only when set.
    timeout_s: seconds one request may take (default 60).
    max_attempts: tries per judgement (default 3), with 0.5 s, 1 s, ... between them.
    instructions: the grading instructions (default: GSM8K's, where a solution ends with `#### <number>`).
"""

from __future__ import annotations

import functools
import math
import os
import re
import time
from typing import Any, Optional

import httpx

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType
from skyrl_gym.errors import SkyRLGymError
from skyrl_gym.tools.search import shared_ssl_context

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_ATTEMPTS = 3
BACKOFF_BASE_S = 0.5

GOLD_HEADER = "REFERENCE SOLUTION:"
RESPONSE_HEADER = "RESPONSE TO GRADE:"

GSM8K_INSTRUCTIONS = """You grade answers to grade-school math problems.

Below are a reference solution and a response to grade. The response earns 1 only when its last line has the form
`#### <number>` and that number equals the final answer of the reference solution; otherwise it earns 0. You may
reason before deciding. End your reply with one line holding the score and nothing after it:

### Final Score: 1

or

### Final Score: 0"""

_SCORE_LINE = re.compile(r"### Final Score:\s*([01])(?:\.0)?\b")


class JudgeError(SkyRLGymError):
    """The judge could not be reached, answered with an error, or replied without a score."""


@functools.cache
def _client(timeout_s: float) -> httpx.Client:
    """One HTTP client per timeout, shared by every judge env of the process (httpx clients are thread-safe)."""
    return httpx.Client(timeout=timeout_s, verify=shared_ssl_context())


def parse_score(reply: str) -> Optional[float]:
    """The score of a judge reply: its last `### Final Score: 0|1` line, or a bare reply of `0` or `1`."""
    text = reply.strip()
    if text in ("0", "1"):
        return float(text)
    scores = _SCORE_LINE.findall(text)
    return float(scores[-1]) if scores else None


def judge_message(instructions: str, gold: str, response: str) -> str:
    """The user message sent to the judge."""
    return f"{instructions}\n\n{GOLD_HEADER}\n{gold}\n\n{RESPONSE_HEADER}\n{response}"


def _positive(env_config: dict[str, Any], key: str, default: float, integer: bool = False) -> Any:
    value = env_config.get(key, default)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value) or value <= 0:
        wanted = "a positive integer" if integer else "a positive number"
        raise ValueError(f"env_config.{key} must be {wanted}, got {value!r}")
    return value


class LLMJudgeEnv(BaseTextEnv):
    """One response, one judgement by a model over HTTP (see the module docstring)."""

    config_keys = ("model", "base_url", "api_key_env", "timeout_s", "max_attempts", "instructions")

    default_max_turns = 1

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        config = self.env_config
        self.model = config.get("model", DEFAULT_MODEL)
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"env_config.model must be a model name, got {self.model!r}")
        base_url = config.get("base_url") or OPENAI_BASE_URL
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"env_config.base_url must be an http(s) URL such as http://host:port/v1, got {base_url!r}"
            )
        self.url = base_url.rstrip("/") + "/chat/completions"
        key_env = config.get("api_key_env", DEFAULT_API_KEY_ENV)
        if not isinstance(key_env, str) or not key_env:
            raise ValueError(f"env_config.api_key_env must name an environment variable, got {key_env!r}")
        api_key = os.environ.get(key_env)
        if api_key is None and base_url == OPENAI_BASE_URL:
            raise ValueError(
                f"the llm_as_a_judge env calls OpenAI's API, which needs a key: set {key_env} (or set"
                " env_config.base_url to your own OpenAI-compatible judge server)"
            )
        self.headers = {} if api_key is None else {"Authorization": f"Bearer {api_key}"}
        self.timeout_s = float(_positive(config, "timeout_s", DEFAULT_TIMEOUT_S))
        self.max_attempts = int(_positive(config, "max_attempts", DEFAULT_MAX_ATTEMPTS, integer=True))
        self.backoff_s = BACKOFF_BASE_S
        """Wait after the first failed attempt, doubled after each further one."""
        self.instructions = config.get("instructions", GSM8K_INSTRUCTIONS)
        if not isinstance(self.instructions, str) or not self.instructions.strip():
            raise ValueError("env_config.instructions must be a non-empty string")
        self._gold = ""
        self._score: Optional[float] = None

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Start an episode; reads `reward_spec.ground_truth` (ValueError when the row has none)."""
        self._begin_episode()
        self._gold = str(self.ground_truth())
        self._score = None
        return prompt, {}

    def ask_judge(self, response: str) -> str:
        """The judge's reply about `response` (its text), retrying connection errors, 429 and 5xx answers."""
        payload = {
            "model": self.model,
            "messages": [{"role": "user", "content": judge_message(self.instructions, self._gold, response)}],
        }
        reason = ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                answer = _client(self.timeout_s).post(self.url, json=payload, headers=self.headers)
            except httpx.TransportError as exc:
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                if answer.status_code == 200:
                    return _reply_text(answer, self.url)
                reason = f"HTTP {answer.status_code}: {answer.text[:200]}"
                if answer.status_code != 429 and answer.status_code < 500:
                    break  # the request itself is wrong (a bad model name, key, ...): retrying changes nothing
            if attempt < self.max_attempts:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
        raise JudgeError(f"the judge at {self.url} failed after {attempt} attempt(s): {reason}")

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        reply = self.ask_judge(action)
        score = parse_score(reply)
        if score is None:
            raise JudgeError(f"the judge's reply has no '### Final Score: 0|1' line: {reply[-300:]!r}")
        self._score = score
        return BaseTextEnvStepOutput(
            observations=[], reward=score, done=True, metadata={"judge_score": score}, postprocessed_action=None
        )

    def get_metrics(self) -> dict[str, Any]:
        """Base metrics plus the episode's `judge_score` (absent before a judgement)."""
        metrics = super().get_metrics()
        if self._score is not None:
            metrics["judge_score"] = self._score
        return metrics


def _reply_text(answer: httpx.Response, url: str) -> str:
    """`choices[0].message.content` of a chat-completions answer; JudgeError naming what is missing."""
    try:
        content = answer.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise JudgeError(
            f"the judge at {url} answered without choices[0].message.content: {answer.text[:200]}"
        ) from exc
    if not isinstance(content, str):
        raise JudgeError(f"the judge at {url} answered with a non-text message content: {content!r}")
    return content
