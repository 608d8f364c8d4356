"""Errors on the Anthropic paths (``/v1/messages``, ``/v1/messages/count_tokens``) in Anthropic's error shape.

Every error of the proxy is an :class:`~proxy.api.errors.ApiError` rendered in the OpenAI shape by whichever layer
met it: the app's error handler (``proxy/app.py``), the access rules (``proxy/access.py``: keys, media type, Host,
run before the app), the body limits (``serving/http_server.py``: 413, 408). Rather than teach each of them a second
shape, :class:`AnthropicErrorShape` (an ASGI wrapper just inside the request-id one) rewrites, on the Anthropic
paths only, every JSON error response into::

    {"type": "error", "error": {"type": "invalid_request_error", "message": "...", "code": "..."},
     "request_id": "req_..."}

keeping its status and headers (``Retry-After``, ``WWW-Authenticate``); ``code`` is the proxy's stable code
(``docs/api.md``), an extra member the SDKs ignore. Every response on these paths, errors or not, also carries the
exchange's id as ``request-id``, the header the Anthropic SDKs read (``_request_id``, ``error.request_id``). The
Anthropic ``type`` follows the status as Anthropic's API assigns them (:data:`ERROR_TYPES`). An error met after a
stream started is an ``event: error`` SSE event of the same shape (:func:`sse_error_event`, written by
``messages_stream.py``).
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

from proxy.api import dumps
from proxy.api.errors import ErrorCode, status_of
from proxy.asgi_wrapper import HttpExchangeWrapper
from proxy.request_id import current_request_id

#: the paths served in Anthropic's shape (the prefix itself and everything under it)
ANTHROPIC_PREFIX = "/v1/messages"

#: the response header the Anthropic SDKs read the request id from
REQUEST_ID_HEADER = b"request-id"

#: HTTP status -> Anthropic error type (anthropic.types.ErrorType; 413 is Anthropic's request_too_large)
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    """The Anthropic error type of an HTTP status (other 4xx: ``invalid_request_error``; other 5xx: ``api_error``)."""
    return ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def anthropic_error(openai_error: dict[str, Any], status: int) -> dict[str, Any]:
    """The Anthropic error body for the proxy's OpenAI-shaped ``{"error": {...}}`` body answered with ``status``."""
    inner = openai_error.get("error") if isinstance(openai_error.get("error"), dict) else {}
    error: dict[str, Any] = {"type": error_type(status), "message": str(inner.get("message") or "error")}
    if inner.get("code") is not None:
        error["code"] = inner["code"]
    body: dict[str, Any] = {"type": "error", "error": error}
    if inner.get("request_id") is not None:
        body["request_id"] = inner["request_id"]
    return body


def sse_error_event(openai_error: dict[str, Any]) -> bytes:
    """An ``event: error`` SSE event for an error a stream ended in (its status from its code)."""
    code = (openai_error.get("error") or {}).get("code")
    try:
        status = status_of(code)
    except (KeyError, ValueError):
        status = status_of(ErrorCode.INTERNAL_ERROR)
    return b"event: error\ndata: " + dumps(anthropic_error(openai_error, status)) + b"\n\n"


def is_anthropic_path(path: str) -> bool:
    return path == ANTHROPIC_PREFIX or path.startswith(ANTHROPIC_PREFIX + "/")


class AnthropicErrorShape(HttpExchangeWrapper):
    """ASGI wrapper: JSON error responses on the Anthropic paths rewritten in Anthropic's shape (module docstring).
    Other paths and every non-error response pass untouched (a stream is never buffered)."""

    async def exchange(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if not is_anthropic_path(str(scope.get("path", ""))):
            await self.app(scope, receive, send)
            return
        held: dict[str, Any] | None = None
        body = bytearray()
        request_id = current_request_id()

        async def reshaping_send(message: MutableMapping[str, Any]) -> None:
            nonlocal held
            kind = message.get("type")
            if kind == "http.response.start" and request_id is not None:
                message = {**message, "headers": [*(message.get("headers") or ()),
                                                   (REQUEST_ID_HEADER, request_id.encode())]}
            if kind == "http.response.start" and int(message.get("status", 200)) >= 400 and _is_json(message):
                held = dict(message)
                return
            if held is None or kind != "http.response.body":
                await send(message)
                return
            body.extend(message.get("body") or b"")
            if message.get("more_body"):
                return
            start, held = held, None
            await _send_reshaped(send, start, bytes(body))

        await self.app(scope, receive, reshaping_send)


async def _send_reshaped(send: Any, start: dict[str, Any], body: bytes) -> None:
    status = int(start["status"])
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        body = dumps(anthropic_error(parsed, status))
    headers = [(name, value) for name, value in start.get("headers") or () if name.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _is_json(start: MutableMapping[str, Any]) -> bool:
    for name, value in start.get("headers") or ():
        if name.lower() == b"content-type":
            return value.split(b";")[0].strip().lower() == b"application/json"
    return False


__all__ = [
    "ANTHROPIC_PREFIX", "ERROR_TYPES", "AnthropicErrorShape", "anthropic_error", "error_type", "is_anthropic_path",
    "sse_error_event",
]
