"""The hot routes served straight from ASGI, in the same hypercorn process, without quart's request machinery.

Why (issue 21, ``docs/benchmarks.md``): per non-streaming request quart builds a werkzeug ``Headers`` (title-casing
every name), a ``Request`` and ``Response``, matches werkzeug's URL map, runs the ``before_request`` hooks, copies
the request context, spawns two tasks (body reader and handler) and sends the body in three ASGI messages. For the
routes an agent calls on every turn that is a measurable share of the proxy's CPU. A route registered here with
:func:`lean_route` is served by :class:`LeanRoutes` (the innermost ASGI layer, inside the access rules, the request
end hooks, the exchange observer and the request id: every behaviour those give stays) when the request's method
and path are exactly the route's; everything else, and the same route reached otherwise (``//v1/...``, a GET's 405,
an OPTIONS), still goes to quart, where the route stays registered on the same handler (:func:`quart_view`).
Lean today: ``POST /v1/chat/completions`` (``proxy/routes/chat.py``), ``POST /v1/messages`` and
``POST /v1/responses`` (``proxy/routes/messages.py``, ``proxy/routes/responses.py``).

What the lean path keeps of quart's, so that both answer alike (``tests/e2e/test_lean_routes.py`` compares them):

- the body limits of ``serving/http_server.py`` (pitfall 1: the body is read whole before anything is answered;
  413 for a ``Content-Length`` or a chunked body over ``--max-body-bytes``, 408 past ``--body-read-timeout``, both
  with ``Connection: close``);
- the route's rule in the scope for the metric and access line (``proxy/observability/exchanges.py``);
- a client that disconnects cancels the handler: under the proxy's server the connection cancels the request's
  scope (``serving/limited_h11.py:CLIENT_GONE_KEY``, no task); under another, quart-trio's disconnect watcher (one
  task here, not two);
- every exception is answered through the app's one mapping (``proxy/api/error_mapping.py:api_error_for``);
- a streaming body is closed (``aclose``) however the exchange ends, as quart closes the body it sent.

A handler takes ``(headers, body, scope)`` and returns an :class:`Answer` (bytes, or an async iterator of bytes for
a stream). Answers are sent in one start and one body message (a stream: one message per chunk and an empty last).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, MutableMapping
from typing import Any

import attrs
import trio
from quart import Response, request
from quart_trio import QuartTrio

from proxy import channel_steps
from proxy.api import ApiError
from proxy.api.error_mapping import api_error_for
from proxy.asgi_wrapper import HttpExchangeWrapper
from proxy.observability.exchanges import ROUTE_KEY
from serving.http_limits import HTTPLimits
from serving.http_server import LIMITS_KEY, body_refusal_parts
from serving.limited_h11 import CLIENT_GONE_KEY

#: where an app keeps its lean routes: (method, path) -> (rule, handler)
LEAN_ROUTES_KEY = "dressage_lean_routes"


class ScopeHeaders:
    """The request headers of an ASGI scope, read as a client's ``Headers`` would be: names case-insensitive, every
    value kept in order (``getlist``), ``items()`` as (name, value) strings. Built without copying the scope's list
    until asked (Latin-1, as HTTP headers are bytes)."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Any) -> None:
        self._raw = raw or ()

    def items(self) -> Iterator[tuple[str, str]]:
        for name, value in self._raw:
            yield name.decode("latin-1"), value.decode("latin-1")

    def getlist(self, name: str) -> list[str]:
        wanted = name.lower().encode("latin-1")
        return [value.decode("latin-1") for key, value in self._raw if key.lower() == wanted]

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self.getlist(name)
        return values[0] if values else default

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(self.getlist(name))


@attrs.frozen
class Answer:
    """What a route answers: a status, a content type, a body (bytes, or an async iterator of bytes for a stream
    that is never cut by a timeout) and extra headers."""

    status: int
    content_type: str
    body: bytes | AsyncIterator[bytes]
    headers: Mapping[str, str] = attrs.field(factory=dict)


Handler = Callable[[Any, bytes, MutableMapping[str, Any]], Awaitable[Answer]]


def error_answer(error: ApiError) -> Answer:
    """An ``ApiError`` as every path answers it (the app's error handler too: ``proxy/app.py:error_response``)."""
    return Answer(error.status, "application/json", error.to_body(), dict(error.headers or {}))


def lean_route(app: QuartTrio, method: str, rule: str, handler: Handler) -> None:
    """Serve ``method rule`` (a plain path, no converters) with ``handler`` on the lean path, and register the same
    handler with quart for every other way the path is reached (see the module docstring)."""
    app.extensions.setdefault(LEAN_ROUTES_KEY, {})[(method, rule)] = (rule, handler)
    app.add_url_rule(rule, endpoint=rule, view_func=quart_view(handler), methods=[method])


def quart_view(handler: Handler) -> Callable[[], Awaitable[Response]]:
    async def view() -> Response:
        data = await request.get_data()
        return quart_response(await handler(request.headers, data, request.scope))

    return view


def quart_response(answer: Answer) -> Response:
    response = Response(answer.body, status=answer.status, content_type=answer.content_type)
    response.headers.update(answer.headers)
    if not isinstance(answer.body, bytes):
        response.timeout = None  # never cut a stream (stack-notes pitfall 2; the app-wide timeouts are off too)
    return response


class LeanRoutes(HttpExchangeWrapper):
    """ASGI layer: the app's lean routes (exact method and path), everything else to quart (``app``)."""

    def __init__(self, app: Callable[..., Any], quart_app: QuartTrio) -> None:
        super().__init__(app)
        self._routes: dict[tuple[str, str], tuple[str, Handler]] = quart_app.extensions.setdefault(
            LEAN_ROUTES_KEY, {})
        self._config = quart_app.config

    async def exchange(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        route = self._routes.get((scope.get("method"), scope.get("path")))
        if route is None or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        rule, handler = route
        scope[ROUTE_KEY] = rule
        headers = ScopeHeaders(scope.get("headers"))
        body = await self._read_body(receive, send, self._config[LIMITS_KEY], headers)
        if body is None:
            return
        client_gone = scope.get(CLIENT_GONE_KEY)
        if client_gone is not None:
            # The connection cancels this scope when its client leaves (serving/limited_h11.py): no watcher task.
            with client_gone:
                await _answer(handler, headers, body, scope, send)
            return
        async with trio.open_nursery() as nursery:
            # Under another server, quart-trio's way: a task that reads the disconnect and cancels the handler.
            nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
            await _answer(handler, headers, body, scope, send)
            nursery.cancel_scope.cancel()

    @staticmethod
    async def _read_body(receive: Any, send: Any, limits: HTTPLimits, headers: ScopeHeaders) -> bytes | None:
        """The whole body within the limits; None when it was refused (answered here) or the client left."""
        limit = limits.max_body_bytes
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await _send_answer(send, _refusal("too_large", limits))
            return None
        body = _BodyParts(limit)
        channel = _server_channel(receive)
        if channel is not None:
            # A body that came with its head is queued whole: taken without a wait, so without the read timeout's
            # scope (~7 µs a request, issue 21 item 2). Whatever is missing is waited for below, bounded.
            while body.wants_more and (message := channel_steps.queued(channel)) is not None:
                body.take(message)
        if body.wants_more:
            timeout = limits.body_read_timeout
            with trio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
                while body.wants_more:
                    body.take(await (channel_steps.receive(channel) if channel is not None else receive()))
            if scope.cancelled_caught:
                await _send_answer(send, _refusal("timeout", limits))
                return None
        if body.too_large:
            await _send_answer(send, _refusal("too_large", limits))
            return None
        return body.joined()


@attrs.define(eq=False)
class _BodyParts:
    """The ``http.request`` messages of one body, taken one by one: complete, over ``limit``, or the client left."""

    limit: int
    chunks: list[bytes] = attrs.field(factory=list)
    size: int = 0
    wants_more: bool = True
    too_large: bool = False
    gone: bool = False

    def take(self, message: Mapping[str, Any]) -> None:
        if message["type"] != "http.request":
            self.gone, self.wants_more = True, False  # http.disconnect: nobody to answer
            return
        chunk = message.get("body", b"")
        self.size += len(chunk)
        if self.size > self.limit:
            self.too_large, self.wants_more = True, False
            return
        self.chunks.append(chunk)
        self.wants_more = bool(message.get("more_body", False))

    def joined(self) -> bytes | None:
        """The body (None when the client left)."""
        if self.gone:
            return None
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)


def _refusal(kind: str, limits: HTTPLimits) -> Answer:
    status, body, headers = body_refusal_parts(kind, limits)
    return Answer(status, "application/json", body, headers)


async def _answer(handler: Handler, headers: ScopeHeaders, body: bytes, scope: MutableMapping[str, Any],
                  send: Any) -> None:
    """Run the route's handler and send its answer (a stream's body too); a client that leaves cancels it."""
    try:
        answer = await handler(headers, body, scope)
    except Exception as error:  # every error through the app's one mapping, as quart's handler does
        answer = error_answer(api_error_for(error))
    await _send_answer(send, answer)


def _server_channel(receive: Any) -> trio.MemoryReceiveChannel[Any] | None:
    """The memory channel behind hypercorn's ``receive`` (a channel's bound ``receive``), else None.

    A request's body is queued before its app runs: taken from the channel without the checkpoint ``receive`` adds
    (``proxy/channel_steps.py``; a task step each, two a request, issue 21 item 2). Any other ``receive`` is awaited
    as it is."""
    channel = getattr(receive, "__self__", None)
    return channel if isinstance(channel, trio.MemoryReceiveChannel) else None


async def _cancel_on_disconnect(receive: Any, cancel_scope: trio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    cancel_scope.cancel()


async def _send_answer(send: Any, answer: Answer) -> None:
    headers = [(b"content-type", answer.content_type.encode("latin-1"))]
    headers += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers.items()]
    body = answer.body
    if isinstance(body, bytes):
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
        return
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    try:
        async for chunk in body:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    finally:
        close = getattr(body, "aclose", None)
        if close is not None:
            await close()
    await send({"type": "http.response.body", "body": b"", "more_body": False})


__all__ = ["Answer", "LeanRoutes", "ScopeHeaders", "error_answer", "lean_route", "quart_response", "quart_view"]
