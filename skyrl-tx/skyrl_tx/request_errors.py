"""The errors the service's request handlers raise for ids and sessions, which `skyrl_tx.app` answers with their
HTTP status (user errors and conflicts are `skyrl_tx.futures`')."""


class NotFound(LookupError):
    """An id or path the caller does not own or that does not exist (HTTP 404)."""


class SessionEnded(RuntimeError):
    """A heartbeat for a session that was finished or expired (HTTP 410: the client stops heartbeating)."""
