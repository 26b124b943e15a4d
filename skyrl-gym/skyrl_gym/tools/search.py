"""Search tool group: an HTTP client of a retrieval server (`POST {search_url}/retrieve`) with retries and backoff.

Connection errors, timeouts and 5xx answers are retried with exponential backoff; when the server stays
unreachable the tool returns a failed `ToolResult` whose error says so ("search server unavailable at URL after N
attempts: reason"), never an exception and never a silent empty result. Failures of the server (unreachable, an HTTP
error status, a malformed response) are flagged `service_error=True`; an empty query is the caller's failure.
"""

from __future__ import annotations

import functools
import logging
import ssl
import time
from collections.abc import Mapping
from typing import Any, Optional

import httpx

from skyrl_gym.tools.core import ToolGroup, ToolResult, tool

DEFAULT_SEARCH_URL = "http://127.0.0.1:8000"
DEFAULT_TOPK = 3
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_BACKOFF_BASE_S = 0.5
DEFAULT_BACKOFF_MAX_S = 8.0

logger = logging.getLogger(__name__)


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """The SSL context every search client uses (httpx's default one: certifi's roots, `SSL_CERT_FILE` /
    `SSL_CERT_DIR` honoured), built once: building one costs tens of milliseconds of CPU, which a batch of search
    episodes would otherwise pay per env instance, every step."""
    return httpx.create_ssl_context()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def retrieve_endpoint(search_url: str) -> str:
    """The `/retrieve` URL of a server: `search_url` + "/retrieve", unless it already ends with it."""
    if not isinstance(search_url, str) or not search_url.startswith(("http://", "https://")):
        raise ValueError(f"search_url must be an http(s) URL, got {search_url!r}")
    base = search_url.rstrip("/")
    return base if base.endswith("/retrieve") else f"{base}/retrieve"


def _document_fields(item: Any) -> tuple[str, str]:
    """(title, text) of one result item: {"title", "text"}, or {"document": {"contents"}} as Search-R1 servers send."""
    if not isinstance(item, dict):
        raise ValueError(f"a result item is {type(item).__name__}, expected an object")
    doc = item.get("document", item)
    if not isinstance(doc, dict):
        raise ValueError("a result item's 'document' is not an object")
    title = doc.get("title") or ""
    text = doc.get("text", doc.get("contents"))
    if not isinstance(text, str):
        raise ValueError("a result item has no 'text' (or 'contents') string")
    if not title and "text" not in doc and text.startswith('"') and '"\n' in text:
        title, text = text[1:].split('"\n', 1)  # Search-R1 corpora store '"Title"\ntext' in contents
    return str(title), text


def format_documents(documents: list[dict[str, Any]]) -> str:
    """Render results as numbered lines `Doc i (Title: ...): text`; an empty list says no documents matched."""
    if not documents:
        return "No documents matched the query."
    lines = []
    for index, item in enumerate(documents, start=1):
        title, text = _document_fields(item)
        label = f"Doc {index} (Title: {title})" if title else f"Doc {index}"
        lines.append(f"{label}: {text.strip()}")
    return "\n".join(lines)


class SearchToolGroup(ToolGroup):
    """The `search` tool: asks a retrieval server for the `topk` passages that best match a query."""

    def __init__(
        self,
        search_url: str = DEFAULT_SEARCH_URL,
        topk: int = DEFAULT_TOPK,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff_base_s: float = DEFAULT_BACKOFF_BASE_S,
        backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
        name: str = "search",
        log_requests: bool = False,
    ) -> None:
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise ValueError(f"SearchToolGroup: topk must be a positive integer, got {topk!r}")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"SearchToolGroup: max_attempts must be a positive integer, got {max_attempts!r}")
        if not _is_number(timeout_s) or timeout_s <= 0:
            raise ValueError(f"SearchToolGroup: timeout_s must be a positive number, got {timeout_s!r}")
        for label, value in (("backoff_base_s", backoff_base_s), ("backoff_max_s", backoff_max_s)):
            if not _is_number(value) or value < 0:
                raise ValueError(f"SearchToolGroup: {label} must be a number >= 0, got {value!r}")
        if not isinstance(log_requests, bool):
            raise ValueError(f"SearchToolGroup: log_requests must be true or false, got {log_requests!r}")
        self.url = retrieve_endpoint(search_url)
        self.log_requests = log_requests
        """Log each query and its outcome at INFO level (logger `skyrl_gym.tools.search`)."""
        self.topk = topk
        self.max_attempts = max_attempts
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self._client = httpx.Client(timeout=timeout_s, verify=shared_ssl_context())
        super().__init__(name)

    @classmethod
    def from_env_config(cls, config: Mapping[str, Any]) -> SearchToolGroup:
        """The group an env's config asks for: keys `search_url`, `topk`, `timeout`, `max_attempts`, `backoff_base`,
        `backoff_max` and `log_requests` (the `search` env's names), each defaulting like the constructor."""
        return cls(
            search_url=config.get("search_url", DEFAULT_SEARCH_URL),
            topk=config.get("topk", DEFAULT_TOPK),
            timeout_s=config.get("timeout", DEFAULT_TIMEOUT_S),
            max_attempts=config.get("max_attempts", DEFAULT_MAX_ATTEMPTS),
            backoff_base_s=config.get("backoff_base", DEFAULT_BACKOFF_BASE_S),
            backoff_max_s=config.get("backoff_max", DEFAULT_BACKOFF_MAX_S),
            log_requests=config.get("log_requests", False),
        )

    def _post_with_retries(self, payload: dict[str, Any]) -> tuple[Optional[httpx.Response], str]:
        """POST `payload`, retrying transport errors and 5xx; return (response or None, last failure reason)."""
        reason = ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                response = self._client.post(self.url, json=payload)
            except httpx.TransportError as exc:
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                if response.status_code < 500:
                    return response, ""
                reason = f"HTTP {response.status_code}: {response.text[:200]}"
            if attempt < self.max_attempts:
                time.sleep(min(self.backoff_base_s * 2 ** (attempt - 1), self.backoff_max_s))
        return None, reason

    @tool
    def search(self, query: str) -> ToolResult:
        """Search the document collection and return the best-matching passages with their titles.

        Args:
            query: What to look for, e.g. "capital of France".
        """
        if not query.strip():
            return ToolResult("search", False, error="the search query is empty")
        payload = {"query": query, "topk": self.topk, "return_scores": False}
        response, reason = self._post_with_retries(payload)
        if self.log_requests:
            status = reason if response is None else f"HTTP {response.status_code}"
            logger.info("search %s query=%r topk=%d -> %s", self.url, query, self.topk, status)
        if response is None:
            message = f"search server unavailable at {self.url} after {self.max_attempts} attempts: {reason}"
            return ToolResult("search", False, error=message, service_error=True)
        if response.status_code != 200:
            message = (
                f"search server at {self.url} rejected the query (HTTP {response.status_code}): {response.text[:300]}"
            )
            return ToolResult("search", False, error=message, service_error=True)
        try:
            body = response.json()
            documents = body["result"][0]
            if not isinstance(documents, list):
                raise ValueError("'result[0]' is not a list")
            text = format_documents(documents)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            message = f"search server at {self.url} sent an unexpected response ({exc}): {response.text[:200]}"
            return ToolResult("search", False, error=message, service_error=True)
        return ToolResult("search", True, output=text, data=documents)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()
