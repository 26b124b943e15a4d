"""A stand-in judge to try the `llm_as_a_judge` env without a model: an OpenAI-compatible chat-completions server on
127.0.0.1 that grades GSM8K-style responses by rule.

    python -m skyrl_gym.envs.llm_judge.demo_judge --port 8001   # then env_config.base_url=http://127.0.0.1:8001/v1

It reads the reference and the graded response from the env's message (the parts after `REFERENCE SOLUTION:` and
`RESPONSE TO GRADE:`), and replies with a short verdict ending in `### Final Score: 1` when the response's number
after its last `#### ` equals the reference's final number, else `### Final Score: 0`. `POST /v1/chat/completions`
answers in the chat-completions shape; `GET /v1/models` lists the one model, `demo-judge`. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

from skyrl_gym.envs.llm_judge.env import GOLD_HEADER, RESPONSE_HEADER
from skyrl_gym.rewards.numbers import extract_flexible_answer, extract_strict_answer

MODEL_NAME = "demo-judge"


def grade(message: str) -> str:
    """The demo judge's reply to one env message (see the module docstring)."""
    if GOLD_HEADER not in message or RESPONSE_HEADER not in message:
        return "I cannot find the reference and the response in this message.\n### Final Score: 0"
    gold_part, response = message.split(GOLD_HEADER, 1)[1].split(RESPONSE_HEADER, 1)
    gold = extract_strict_answer(gold_part) or extract_flexible_answer(gold_part)
    answer = extract_strict_answer(response)
    correct = answer is not None and answer == gold
    verdict = f"The response's final answer is {answer!r}; the reference's is {gold!r}."
    return f"{verdict}\n### Final Score: {1 if correct else 0}"


def _handler(requests: list[dict[str, Any]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
            return None

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                message = body["messages"][-1]["content"]
            except (ValueError, KeyError, IndexError, TypeError):
                self._send(400, {"error": {"message": "expected a JSON body with messages[-1].content"}})
                return
            requests.append({"model": body.get("model"), "authorization": self.headers.get("Authorization")})
            reply = grade(message)
            self._send(
                200,
                {
                    "object": "chat.completion",
                    "model": body.get("model", MODEL_NAME),
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}
                    ],
                },
            )

    return Handler


class DemoJudge:
    """The demo judge serving in a background thread; `base_url` is its API root, `requests` what it was asked
    (model and Authorization header of each judgement)."""

    def __init__(self, port: int = 0) -> None:
        self.requests: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self.requests))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="demo-judge", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>/v1`."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> DemoJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: Optional[list[str]] = None) -> None:
    """Serve on `--port` until interrupted."""
    parser = argparse.ArgumentParser(description="A rule-based OpenAI-compatible judge for the llm_as_a_judge env.")
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args(argv)
    judge = DemoJudge(args.port)
    print(f"demo judge at {judge.base_url} (model {MODEL_NAME})", flush=True)
    try:
        judge._thread.join()
    except KeyboardInterrupt:
        judge.close()


if __name__ == "__main__":
    main()
