"""Every HTTP exchange gets a request id: the ``X-Request-Id`` response header, ``error.request_id`` in every error
body (plain or SSE), and the proxy's log lines about that exchange.

OpenAI's API answers every request with an ``x-request-id`` header (the openai SDKs expose it as
``error.request_id`` / ``response._request_id``); the proxy does the same, in OpenAI's format (``req_`` + 32 hex
digits), and also puts the id inside its error objects so that a client that logs only bodies still has it. An
error body never carries internals (upstream URLs, exception text): the log line with the same id does.

The id lives in a context variable set by :class:`RequestIdMiddleware` (the outermost ASGI wrapper) for the
duration of the exchange. trio copies the spawning task's context into every task it starts, so the request's
handler, and the generation driver the handler starts in the app's nursery, all see it. A client-sent
``X-Request-Id`` is not reused: the proxy's ids are unique and safe to log as they are.
"""

from __future__ import annotations

import contextvars
from collections.abc import MutableMapping
from typing import Any

from proxy.asgi_wrapper import HttpExchangeWrapper
from proxy.random_ids import random_hex

#: the response header (lower case, as ASGI sends header names)
REQUEST_ID_HEADER = "x-request-id"

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("dressage_request_id", default=None)


def new_request_id() -> str:
    """A fresh id in OpenAI's format: ``req_`` + 32 lower-case hex digits."""
    return f"req_{random_hex()}"


def current_request_id() -> str | None:
    """The id of the HTTP exchange this task serves (None outside one, e.g. in unit tests)."""
    return _current.get()


class RequestIdMiddleware(HttpExchangeWrapper):
    """ASGI middleware: a new request id per HTTP exchange, set as the context's current id and sent as the
    ``X-Request-Id`` header of the response (every response: success, error, stream)."""

    async def exchange(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        request_id = new_request_id()
        header = (REQUEST_ID_HEADER.encode(), request_id.encode())

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                headers = [pair for pair in message.get("headers") or () if pair[0].lower() != header[0]]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        token = _current.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _current.reset(token)


__all__ = ["REQUEST_ID_HEADER", "RequestIdMiddleware", "current_request_id", "new_request_id"]
