"""One scoring process of the `parallel` reward manager: load the user function, then score the calls its parent
sends over a socket until the parent closes it.

    python -m skyrl_train.rewards.pool_worker <socket fd> <package.module:name | /path/file.py:name>

Messages: parent -> child `(key, kwargs)` or None (stop); child -> parent `("ready", pid)` or `("load_error",
text)` once, then `(key, True, result)` or `(key, False, "ExceptionType: message")` per call.
"""

from __future__ import annotations

import os
import sys
import traceback
from multiprocessing.connection import Connection

from skyrl_train.rewards.functions import load_reward_function


def serve(connection: Connection, spec: str) -> int:
    """Load `spec` and answer calls on `connection` until it closes; returns the process exit status."""
    try:
        function = load_reward_function(spec)
    except BaseException as exc:  # user code at import time: report it to the parent, which stops the run
        connection.send(("load_error", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))))
        return 1
    connection.send(("ready", os.getpid()))
    while True:
        try:
            message = connection.recv()
        except EOFError:
            return 0
        if message is None:
            return 0
        key, kwargs = message
        try:
            result = function(**kwargs)
        except BaseException as exc:  # the user's function failed on this item: report it and keep serving
            connection.send((key, False, f"{type(exc).__name__}: {exc}"))
            continue
        try:
            connection.send((key, True, result))
        except Exception as exc:  # e.g. a result that cannot be pickled
            connection.send((key, False, f"returned a {type(result).__name__} that cannot be sent back: {exc}"))


def main(argv: list[str]) -> int:
    """Entry point: `argv` is `[socket fd, function spec]`."""
    if len(argv) != 2:
        print("usage: python -m skyrl_train.rewards.pool_worker <socket fd> <function spec>", file=sys.stderr)
        return 2
    connection = Connection(int(argv[0]))
    try:
        return serve(connection, argv[1])
    finally:
        connection.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
