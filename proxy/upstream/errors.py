"""The project's upstream errors (pure: no I/O imports, so the sans-IO decoder can raise them too).

Socket, h11 and timeout errors become these in exactly one place, ``_http_connection.translate``; HTTP error
statuses and in-stream error chunks become :class:`UpstreamHTTPError` through :func:`error_from_response` /
:func:`error_from_chunk` below. ``trio.Cancelled`` is never caught or translated anywhere.

Their text (``str(error)``: the message, the URL, the tokens received, the underlying exception) is for the log
only: it names hosts, ports and exception classes. A client sees the message of the one error mapping
(``proxy/api/error_mapping.py:upstream_error``), which logs this text with the request id.

Hierarchy::

    UpstreamError                       base; ``url`` and, for failures after tokens arrived, ``partial``
      UpstreamUnavailable               connection refused, DNS failure, connection lost before a response
      UpstreamTimeout                   connect / write / pool (or read, where one is configured) timeout
      UpstreamHTTPError                 4xx/5xx response; ``status``, ``message`` from SGLang's error body
        UpstreamErrorChunk              ``data: {"error": ...}`` inside a 200 stream (§1.6)
      UpstreamStreamCut                 a stream ended without [DONE] and without a finish reason
      UpstreamProtocolError             a malformed or inconsistent body or chunk
      UpstreamNotConfigured             a worker-only call (pause, update, ...) without worker URLs
"""

from __future__ import annotations

import json
from typing import Any, Literal

from proxy.upstream.events import Partial

TimeoutPhase = Literal["connect", "read", "write", "pool"]


class UpstreamError(Exception):
    """Base of every error the SGLang client raises."""

    def __init__(self, message: str, *, url: str | None = None, partial: Partial | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.url = url
        self.partial = partial
        """Tokens received before the failure (streams only; None when nothing was being streamed)."""

    def __str__(self) -> str:
        where = f" ({self.url})" if self.url else ""
        got = f" after {len(self.partial.output_ids)} tokens" if self.partial is not None else ""
        return f"{self.message}{where}{got}"


class UpstreamUnavailable(UpstreamError):
    """The server could not be reached, or dropped the connection before answering. Nothing was generated."""


class UpstreamTimeout(UpstreamError):
    """An upstream timeout; ``phase`` says which one (pool, connect, write or read). Streams have a read timeout
    only when ``generation_read_timeout`` is set (off by default), so it is rarely ``read``."""

    def __init__(self, message: str, *, phase: TimeoutPhase, url: str | None = None, partial: Partial | None = None):
        super().__init__(message, url=url, partial=partial)
        self.phase = phase


class UpstreamHTTPError(UpstreamError):
    """SGLang answered with an error status (or an error chunk); ``message`` comes from its JSON error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        err_type: str | None = None,
        body: Any = None,
        url: str | None = None,
        partial: Partial | None = None,
    ) -> None:
        super().__init__(message, url=url, partial=partial)
        self.status = status
        self.err_type = err_type
        self.body = body

    def __str__(self) -> str:
        return f"HTTP {self.status}: {super().__str__()}"


class UpstreamErrorChunk(UpstreamHTTPError):
    """``data: {"error": {...}}`` inside a streamed 200 response; ``status`` is the chunk's ``code`` (or 500)."""


class UpstreamStreamCut(UpstreamError):
    """The stream ended (EOF or connection reset) without ``[DONE]`` and without a finish reason.

    ``partial`` always holds the tokens received so far.
    """


class UpstreamProtocolError(UpstreamError):
    """A body or chunk that is not what SGLang sends: bad JSON, a missing field, a cumulative chunk that does
    not extend the tokens received so far, a ``[DONE]`` without a finish reason."""


class UpstreamNotConfigured(UpstreamError):
    """A call that only workers serve (pause, continue, weight updates) while no worker URLs are configured."""


# --------------------------------------------------------------------------------------------------------------


def error_from_response(
    status: int, content: bytes, *, url: str | None = None, partial: Partial | None = None
) -> UpstreamHTTPError:
    """Build the error for an HTTP error status from SGLang's body.

    Understands ``{"error": {"message", "type"}}`` (SGLang), ``{"error": "..."}``, FastAPI's ``{"detail": ...}``
    and ``{"message": ...}``; anything else is quoted as text (truncated).
    """
    body: Any = None
    message = ""
    err_type = None
    try:
        body = json.loads(content) if content else None
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            message = str(error.get("message") or "")
            err_type = error.get("type") if isinstance(error.get("type"), str) else None
        elif isinstance(error, str):
            message = error
        elif "detail" in body:
            message = body["detail"] if isinstance(body["detail"], str) else json.dumps(body["detail"])
        elif isinstance(body.get("message"), str):
            message = body["message"]
    if not message:
        message = content[:2000].decode("utf-8", "replace").strip() or f"HTTP {status} with an empty body"
    return UpstreamHTTPError(status, message, err_type=err_type, body=body, url=url, partial=partial)


def error_from_chunk(error: Any, *, url: str | None = None, partial: Partial | None = None) -> UpstreamErrorChunk:
    """Build the error for an in-stream ``{"error": ...}`` chunk (§1.6)."""
    if isinstance(error, dict):
        code = error.get("code")
        status = code if isinstance(code, int) else 500
        message = str(error.get("message") or "error chunk without a message")
        err_type = error.get("type") if isinstance(error.get("type"), str) else None
    else:
        status, message, err_type = 500, str(error), None
    return UpstreamErrorChunk(status, message, err_type=err_type, body=error, url=url, partial=partial)
