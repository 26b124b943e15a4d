"""A small OpenEnv environment server to try the `openenv` env and tools against: guess a number from 1 to 20.

    python -m skyrl_gym.envs.openenv.demo_server --port 8000     # then env_config.base_url=http://127.0.0.1:8000

Written with openenv-core's server API (`Environment`, `create_fastapi_app`); the reset seed picks the secret
(`seed % 20 + 1`), each guess is answered `higher` / `lower`, a right guess earns reward 1.0 and ends the episode.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from typing import Any, Optional

from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app


class Guess(Action):
    """The action: a guessed integer."""

    guess: int


class Hint(Observation):
    """The observation: what the environment says."""

    message: str = ""


class GuessNumber(Environment):
    """Guess the secret (see the module docstring); sessions are independent."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.secret, self._state = 0, State(step_count=0)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> Hint:
        """A new secret from the seed."""
        self.secret = (seed or 0) % 20 + 1
        self._state = State(episode_id=episode_id, step_count=0)
        return Hint(message="guess a number from 1 to 20")

    def step(self, action: Guess, timeout_s: Optional[float] = None, **kwargs: Any) -> Hint:
        """Answer one guess."""
        self._state.step_count += 1
        if action.guess == self.secret:
            return Hint(message="correct", reward=1.0, done=True)
        return Hint(message="higher" if action.guess < self.secret else "lower", reward=0.0)

    @property
    def state(self) -> State:
        """Episode id and step count."""
        return self._state


def create_app(max_sessions: int = 64) -> Any:
    """The FastAPI app serving `GuessNumber`."""
    return create_fastapi_app(GuessNumber, Guess, Hint, max_concurrent_envs=max_sessions)


class DemoServer:
    """The demo server on 127.0.0.1 in a background thread (tests and examples): `with DemoServer() as url: ...`."""

    def __init__(self, port: int = 0) -> None:
        import uvicorn

        if port == 0:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="openenv-demo", daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the OpenEnv demo server did not start on {self.url}")
            time.sleep(0.05)
        return self.url

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def main(argv: Optional[list[str]] = None) -> None:
    """Serve until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(create_app(), host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()
