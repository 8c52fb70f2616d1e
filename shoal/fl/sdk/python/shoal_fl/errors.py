"""Exceptions of the SDK. An HTTP error carries the server's own message (its
{"error": "..."} body), the status, and the request that got it."""

from __future__ import annotations


class ShoalError(Exception):
    """Base class of everything the SDK raises about the server or the protocol."""


class ConnectionFailed(ShoalError):
    """No HTTP response: refused, unresolvable, reset or timed out (after the retries)."""


class HttpError(ShoalError):
    """An HTTP error status. `message` is the server's; str() reads
    "POST /v1/jobs/j/updates: HTTP 400: tensor 'fc1.weight': shape [128,784] expected, ..."."""

    def __init__(self, status: int, message: str, method: str = "", path: str = "",
                 retry_after: "float | None" = None):
        self.status = status
        self.message = message
        self.method = method
        self.path = path
        self.retry_after = retry_after
        where = f"{method} {path}: " if method else ""
        super().__init__(f"{where}HTTP {status}: {message}")


class BadRequest(HttpError):
    """400/422: the request (an update's bytes, a report's fields) is malformed."""


class Unauthorized(HttpError):
    """401: no token, or not a valid one."""


class Forbidden(HttpError):
    """403: the token may not do this (another job's token, a bad client token)."""


class NotFound(HttpError):
    """404: unknown job, client, or a model version the server no longer keeps."""


class StaleUpdate(HttpError):
    """409: the update is too stale or a duplicate; fetch a new task."""


class PayloadTooLarge(HttpError):
    """413: the body is over the function's or the node's limit."""


class ServiceUnavailable(HttpError):
    """503 (or 429) after the retries: pool or queue full. `retry_after` is the last hint."""


class ServerError(HttpError):
    """Any other 5xx."""


_BY_STATUS = {400: BadRequest, 422: BadRequest, 401: Unauthorized, 403: Forbidden,
              404: NotFound, 409: StaleUpdate, 413: PayloadTooLarge, 429: ServiceUnavailable,
              503: ServiceUnavailable}


def error_for_status(status: int, message: str, method: str = "", path: str = "",
                     retry_after: "float | None" = None) -> HttpError:
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else HttpError)
    return cls(status, message, method, path, retry_after)


class ProtocolError(ShoalError):
    """A 2xx reply that is not what the protocol says (not JSON, a field missing)."""
