"""The limits a server puts on its clients (body and head sizes, read timeouts, idle keep-alive), and the OpenAI-shaped
error body a refused request gets.

One value, :class:`HTTPLimits`, handed to ``serving/http_server.py:serve_app``, which spreads it over the three
layers that enforce it (docs/operations.md, "Limits and timeouts", is the operator's view):

| limit | enforced by | answer |
|---|---|---|
| ``max_body_bytes`` | Quart's ``MAX_CONTENT_LENGTH``: from ``Content-Length`` before a byte of the body is read, else while a chunked body arrives (Quart stops buffering one receive past the limit) | 413 ``request_too_large`` |
| ``body_read_timeout`` | Quart's ``BODY_TIMEOUT`` around the body read every request does first | 408 ``request_timeout`` |
| ``max_header_bytes`` | hypercorn's ``h11_max_incomplete_size`` (h11 refuses a head that outgrows its buffer) | 431 ``headers_too_large`` |
| ``header_read_timeout`` | ``serving/limited_h11.py``: a timer from a head's first byte | 408 ``request_timeout`` |
| ``keep_alive_timeout`` | hypercorn's ``keep_alive_timeout`` (its timer until the first request, then ``serving/limited_h11.py``'s watcher): a connection without a request in progress | closed, no answer |

Every answer here closes the connection (``Connection: close``): the rest of a refused request may still be on its
way, and nothing after it can be read as a request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

#: ``(status, code, message, details) -> body``: how a limit's refusal is written. The proxy renders its own
#: table's errors (``proxy/http_limits.py``); the default is the same OpenAI shape without a request id.
ErrorBody = Callable[[int, str, str, Mapping[str, Any]], bytes]


def openai_error_body(status: int, code: str, message: str, details: Mapping[str, Any]) -> bytes:
    """``{"error": {"message", "type", "param", "code", ...details}}``, as OpenAI (and SGLang) write errors."""
    error: dict[str, Any] = {
        "message": message, "type": "invalid_request_error" if status < 500 else "server_error", "param": None,
        "code": code,
    }
    for key, value in details.items():
        error.setdefault(key, value)
    return json.dumps({"error": error}, separators=(",", ":")).encode()


@attrs.frozen
class HTTPLimits:
    """What a client may send and how slowly. The defaults are generous, for the embedded engine and for tests on
    trio's autojump clock (where a short timeout fires as soon as every task blocks); the proxy passes its flags
    (``proxy/http_limits.py``)."""

    #: largest request body in bytes (413 beyond); 256 MiB: prompts of hundreds of thousands of ids as JSON must
    #: reach the engine (Quart's own default is 16 MiB)
    max_body_bytes: int = 256 * 1024**2
    #: largest request head (request line and headers) in bytes (431 beyond)
    max_header_bytes: int = 64 * 1024
    #: seconds from the first byte of a request's head to its end (408 beyond); None: unbounded
    header_read_timeout: float | None = None
    #: seconds to read a request's whole body (408 beyond); None: unbounded
    body_read_timeout: float | None = None
    #: seconds a connection without a request in progress stays open (also a connection that never sends a byte)
    keep_alive_timeout: float = 3600.0
    error_body: ErrorBody = openai_error_body

    def refusal(self, status: int, code: str, message: str, **details: Any) -> bytes:
        return self.error_body(status, code, message, details)


#: the answers, written once for the HTTP layer and the app layer
TOO_LARGE = (413, "request_too_large")
TIMEOUT = (408, "request_timeout")
HEADERS_TOO_LARGE = (431, "headers_too_large")
MALFORMED = (400, "invalid_request")
