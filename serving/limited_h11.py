"""hypercorn's HTTP/1.1 protocol with the two refusals it cannot write itself: a request head that outgrows
``max_header_bytes`` (or is malformed), and a head that trickles in slower than ``header_read_timeout``.

Why a subclass, and why installed by name. Both happen before the app sees a request, so only the protocol can
answer:

- hypercorn answers a head over ``h11_max_incomplete_size`` (h11's 431 hint) and a malformed one (400) with a
  bodiless response (``H11Protocol._send_error_response``); a client's SDK then shows a bare status. Here the body is
  the OpenAI-shaped error of :class:`~serving.http_limits.HTTPLimits`.
- hypercorn has no timer for a head in progress. Its keep-alive timer runs from the connection's opening (or its
  last response) until a head is complete, and closes silently; its ``read_timeout`` bounds every receive, also
  while a long response streams to a client with nothing more to say, so it would cut generations. The timer here
  starts at a head's first byte, stops when the head is complete, and answers 408 and closes when it fires.

And one fix the refusals need: a connection's own events (closing it, arming its keep-alive timer) are sent
shielded from the app task's cancellation (:meth:`LimitedH11Protocol._send`), else a ``Connection: close`` answer
leaves the socket open and a used keep-alive connection never times out.

Four savings on every exchange, same behaviour (issue 21 item 2, measured in docs/benchmarks.md, "The connection's
own work"):

- **One keep-alive timer a connection, not one a request.** hypercorn stops its timer task when a request arrives
  and starts a new one (``TrioSingleTask.restart``: a lock, ``nursery.start``, a task) after each answer, a twentieth
  of a short request's CPU. Here, after the first request, the connection keeps one watcher task (:meth:`_watch_idle`)
  whose cancel scope's deadline moves: infinite while a request is in progress, ``keep_alive_timeout`` after an
  answer. It closes the connection as hypercorn's timer did: idle past the timeout, or idle when the server shuts
  down. (hypercorn's own timer still covers a connection until its first request.)
- **The app hears a client leave without a task of its own.** An ASGI app learns of it from an
  ``http.disconnect`` message, so an app that waits for something else (a generation) needs a second task reading
  its messages. Here each request's scope carries a ``trio.CancelScope`` (:data:`CLIENT_GONE_KEY`) that the
  connection cancels when it closes before the answer is complete, exactly when hypercorn sends the app
  ``http.disconnect``; an app that runs inside that scope is cancelled then (``proxy/lean_http.py``).
- **A write the socket takes at once costs no task step.** hypercorn's send takes a lock and writes through trio's
  stream: two checkpoints a write, even when the kernel takes every byte. Here, when nobody else is sending, the
  bytes go to the non-blocking socket in one ``os.write`` (:meth:`LimitedH11Protocol._idle_socket`); only what it
  does not take goes through hypercorn's send, which waits for room and handles a broken connection as before.
- **A head and its body in one write.** hypercorn writes a response's head, its body and its (empty) end each on
  its own; the head of a response with a ``Content-Length`` (a whole body, sent right after it) is held and written
  with the body. A streamed answer (no length) still sends its head at once: a client sees it before the first
  token.

And the wire itself: **HTTP/1.1 is read and written by the project's own codec** (``serving/http1_server.py``), not
by h11. Measured inside the proxy under load, h11's server-side calls took ~140 us a request (its per-event state
machine and header validation, ~7% of a short request's CPU; docs/benchmarks.md, "The client-facing codec"); the
codec gives the same events and writes the same bytes (its tests run h11 beside it as the oracle). What changes
with it: a WebSocket upgrade request is answered as a plain HTTP request (the app's HTTP answer: no route here
speaks WebSocket), where hypercorn would have opened a WebSocket stream. An ``h2c`` upgrade and HTTP/2 prior
knowledge are handed to hypercorn's HTTP/2 protocol as before.

hypercorn builds its protocol by name (``hypercorn.protocol.ProtocolWrapper`` calls ``H11Protocol``), with no
option to pass another class; :func:`install` rebinds that one name (to a function that builds this class for a
:class:`LimitedConfig`, hypercorn's own otherwise), short of copying ``worker_serve``. A server whose config is not
a :class:`LimitedConfig` gets hypercorn's behaviour unchanged. HTTP/2 (TLS with ALPN, or prior knowledge) has
hypercorn's own limits only.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import hypercorn.protocol
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.events import Body, Data, EndBody, Request, Response, StreamClosed
from hypercorn.protocol.h11 import (
    STREAM_ID, H2CProtocolRequiredError, H2ProtocolAssumedError, H11Protocol,
)
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.trio.worker_context import TrioSingleTask

from serving import http1_server
from serving.http1_server import CLOSED, END, NEED_DATA, PAUSED, LocalProtocolError, RemoteProtocolError, ServerConnection
from serving.http_limits import HEADERS_TOO_LARGE, MALFORMED, TIMEOUT, HTTPLimits


#: the scope key of a request's "client gone" cancel scope (module docstring); absent under any other server
CLIENT_GONE_KEY = "dressage.client_gone"

#: hypercorn's own HTTP/1.1 protocol, for a server whose config is not a :class:`LimitedConfig` (:func:`install`)
_HYPERCORN_H11 = H11Protocol


class LimitedConfig(HypercornConfig):
    """hypercorn's config and the :class:`HTTPLimits` its connections apply."""

    def __init__(self, limits: HTTPLimits) -> None:
        super().__init__()
        self.http_limits = limits
        self.keep_alive_timeout = limits.keep_alive_timeout
        self.h11_max_incomplete_size = limits.max_header_bytes
        # protocol -> (the second, hypercorn's headers in it): see response_headers
        self._headers_of_second: dict[str, tuple[int, list[tuple[bytes, bytes]]]] = {}

    def response_headers(self, protocol: str) -> list[tuple[bytes, bytes]]:
        """hypercorn's headers of every response (``date``, ``server``...), built once a second: they change only
        with the ``date`` (whole seconds), and formatting it was ~2-5 us a response (issue 21 item 2)."""
        second = int(time.time())
        known = self._headers_of_second.get(protocol)
        if known is None or known[0] != second:
            known = self._headers_of_second[protocol] = (second, super().response_headers(protocol))
        return list(known[1])


class LimitedH11Protocol(H11Protocol):
    """One HTTP/1.1 connection: hypercorn's, on the project's codec, plus the head timer and OpenAI-shaped refusals."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits: HTTPLimits = self.config.http_limits
        # The wire (module docstring): hypercorn's h11 connection, made by its __init__, is replaced.
        self.connection: ServerConnection = ServerConnection(self.config.h11_max_incomplete_size)  # type: ignore[assignment]
        self._head_timer = TrioSingleTask()
        self._head_timer_running = False
        # The keep-alive watcher (module docstring): its scope while it runs; whether no request is in progress;
        # whether hypercorn's first timer was stopped; whether the connection closed.
        self._idle_scope: trio.CancelScope | None = None
        self._idle = False
        self._first_timer_stopped = False
        self._closed = False
        self._held_head = b""
        # The current request's "client gone" scope (module docstring), None before the first request.
        self._client_gone: trio.CancelScope | None = None
        # hypercorn's send lock and the socket it guards, for the direct write (:meth:`_idle_socket`)
        self._direct: tuple[trio.Lock, Any] | None = None
        self._connection_send = self.send
        self.send = self._send
        server = getattr(self._connection_send, "__self__", None)
        lock = getattr(server, "send_lock", None)
        socket = getattr(getattr(server, "stream", None), "socket", None)
        if isinstance(lock, trio.Lock) and socket is not None:
            self._direct = (lock, socket)

    # -- reading ---------------------------------------------------------------------------------------------------

    async def handle(self, event: Event) -> None:
        if isinstance(event, RawData):
            self.connection.receive_data(event.data)
            await self._handle_events()
            # Started only when a head is still incomplete after the data that came: a head that arrives whole (the
            # usual case) costs no timer task.
            if (
                event.data
                and self.stream is None
                and not self._head_timer_running
                and self._limits.header_read_timeout is not None
                and self.connection.their_idle
            ):
                self._head_timer_running = True
                await self._head_timer.restart(self.task_group, self._head_deadline)
        elif isinstance(event, Closed):
            self._closed = True
            if self.stream is not None and self._client_gone is not None:
                self._client_gone.cancel()  # gone before its answer was complete (hypercorn's http.disconnect)
            if self._idle_scope is not None:
                self._idle_scope.cancel()  # the watcher ends now, not at its deadline
            await self._stop_head_timer()
            if self.stream is not None:
                await self._close_stream()

    async def _handle_events(self) -> None:
        """hypercorn's loop over the connection's events, on the codec's (``http1_server``: the same events as h11's)."""
        connection = self.connection
        while True:
            if connection.they_are_waiting_for_100_continue:
                await self._write(connection.informational, 100, self.config.response_headers("h11"))
            try:
                event = connection.next_event()
            except RemoteProtocolError as error:
                if connection.can_respond:
                    await self._send_error_response(error.error_status_hint)
                await self.send(Closed())
                break
            if type(event) is http1_server.Request:
                await self.send(Updated(idle=False))
                await self._check_protocol(event)
                await self._create_stream(event)
            elif event is PAUSED:
                await self.can_read.clear()
                await self.can_read.wait()
            elif event is CLOSED or event is NEED_DATA or self.stream is None:
                break
            elif event is END:
                await self.stream.handle(EndBody(stream_id=STREAM_ID))
            else:
                await self.stream.handle(Body(stream_id=STREAM_ID, data=event))

    async def _check_protocol(self, request: http1_server.Request) -> None:  # type: ignore[override]
        """hypercorn's: an ``h2c`` upgrade without a body, or HTTP/2 prior knowledge, hands the connection to its
        HTTP/2 protocol (``ProtocolWrapper`` catches the two errors)."""
        upgrade = b""
        has_body = False
        for name, value in request.headers:
            if name == b"upgrade":
                upgrade = value.strip()
            elif name in (b"content-length", b"transfer-encoding"):
                has_body = True
        if upgrade.lower() == b"h2c" and not has_body:
            headers = [*self.config.response_headers("h11"), (b"connection", b"upgrade"), (b"upgrade", b"h2c")]
            await self._write(self.connection.informational, 101, headers)
            raise H2CProtocolRequiredError(self.connection.trailing_data[0], request)  # type: ignore[arg-type]
        if request.method == b"PRI" and request.target == b"*" and request.http_version == b"2.0":
            raise H2ProtocolAssumedError(b"PRI * HTTP/2.0\r\n\r\n" + self.connection.trailing_data[0])

    async def _create_stream(self, request: http1_server.Request) -> None:  # type: ignore[override]
        """hypercorn's HTTP stream for ``request`` (never a WebSocket one: module docstring), its app's scope given
        the "client gone" scope."""
        await self._stop_head_timer()  # the head is complete
        # The codec bounds only an incomplete head (as h11): one that arrives whole in a single receive (64 KiB)
        # passes its buffer check, so a complete head's size (as the codec received it) is checked here.
        if request.head_size > self._limits.max_header_bytes:
            await self._refuse_large_head()
            await self.send(Closed())
            return
        self.stream = HTTPStream(
            self.app, self.config, self.context, self.task_group, self.ssl, self.client, self.server, self.stream_send,
            STREAM_ID,
        )
        await self.stream.handle(
            Request(
                stream_id=STREAM_ID,
                headers=request.raw_headers if self.config.h11_pass_raw_headers else request.headers,
                http_version=request.http_version.decode(),
                method=request.method.decode("ascii").upper(),
                raw_path=request.target,
                state=self.connection_state,
            )
        )
        self.keep_alive_requests += 1
        await self.context.mark_request()
        scope = getattr(self.stream, "scope", None)  # the HTTP stream's scope, the dict its app got (not started yet)
        if isinstance(scope, dict):
            self._client_gone = scope[CLIENT_GONE_KEY] = trio.CancelScope()

    # -- writing ---------------------------------------------------------------------------------------------------

    async def stream_send(self, event: Any) -> None:
        """hypercorn's, on the codec: what the HTTP stream sends (the app's answer), as bytes on the connection."""
        connection = self.connection
        if isinstance(event, Body):
            await self._write(connection.data, event.data)
        elif isinstance(event, EndBody):
            await self._write(connection.end)
        elif isinstance(event, Response):
            headers = [*event.headers, *self.config.response_headers("h11")]
            if event.status_code < 200:
                await self._write(connection.informational, event.status_code, headers)
                return
            if self.keep_alive_requests >= self.config.keep_alive_max_requests:
                headers.append((b"connection", b"close"))
            await self._write(connection.response, event.status_code, headers, hold=_has_length(headers))
        elif isinstance(event, StreamClosed):
            await self._maybe_recycle()
        elif isinstance(event, Data):  # a WebSocket stream's bytes; none is opened here (module docstring)
            await self.send(RawData(data=event.data))
        # An InformationalResponse (ignored for HTTP/1, as hypercorn does) and EndData: nothing to write.

    async def _write(self, produce: Any, *args: Any, hold: bool = False) -> None:
        """The bytes ``produce(*args)`` frames, sent; the head of a response with a ``Content-Length`` (``hold``) is
        held and written with what follows it (module docstring), and an empty piece is not written. A write the
        codec refuses after the client broke the protocol is dropped (as hypercorn: nothing more can be said)."""
        try:
            data = produce(*args)
        except LocalProtocolError:
            if not self.connection.their_error:
                raise
            return
        if self._held_head:
            data, self._held_head = self._held_head + data, b""
        if hold:
            self._held_head = data
        elif data:
            await self.send(RawData(data=data))

    async def _maybe_recycle(self) -> None:
        """hypercorn's: the exchange is over; the next one may start on this connection, or it closes."""
        await self._close_stream()
        connection = self.connection
        if not self.context.terminated.is_set() and connection.our_done and connection.their_done:
            try:
                connection.start_next_cycle()
            except LocalProtocolError:
                await self.send(Closed())
            else:
                self.response = None
                self.scope = None
                await self.can_read.set()
                await self.send(Updated(idle=True))
        else:
            await self.can_read.set()
            await self.send(Closed())

    async def _send(self, event: Event) -> None:
        """The connection's ``send``: bytes straight to the socket (hypercorn shields its data sends itself); the
        connection's own events (closing it, the keep-alive timer's) shielded from cancellation.

        Both are sent from inside the app's task at the end of an exchange: hypercorn's ``_maybe_recycle`` first
        tells the app the exchange is over (``http.disconnect``), on which quart-trio cancels the app's nursery, and
        then, from that same, now cancelled, task, closes the socket (a response with ``Connection: close``, as
        every refusal here has) or arms the keep-alive timer (``Updated(idle=True)``). Cut at its first checkpoint,
        the close would leave the socket open, and a client waiting for the end of the answer would wait forever;
        the timer would never start, and an idle keep-alive connection would never be closed. The timer is this
        connection's own synchronous bookkeeping (:meth:`_keep_alive`: nothing there can be cut); what still goes to
        hypercorn (a close, the event that stops its first timer) is shielded and runs to its end (neither can
        block: a socket shutdown and close, stopping a timer)."""
        if isinstance(event, RawData):
            data = event.data
            socket = self._idle_socket()
            if socket is not None:
                try:
                    sent = os.write(socket.fileno(), data)
                except OSError:  # would block, or broken: hypercorn's send below waits, or meets the error
                    sent = 0
                if sent == len(data):
                    return
                event = RawData(data[sent:])
            await self._connection_send(event)
            return
        forward = self._keep_alive(event) if isinstance(event, Updated) else event
        if forward is not None:  # the keep-alive bookkeeping alone never waits: no scope (two a request)
            with trio.CancelScope(shield=True):
                await self._connection_send(forward)

    def _idle_socket(self) -> Any:
        """The connection's socket when nobody is sending on it, else None (hypercorn's send then orders the bytes).

        hypercorn's ``TCPServer.protocol_send`` takes a lock and sends through trio's stream, two checkpoints (task
        steps) for every write, each answer and each streamed chunk, even when the kernel takes the bytes at once
        (issue 21 item 2). A write here is one ``os.write`` on the non-blocking socket, synchronous, so nothing can
        interleave with it; whatever the kernel does not take at once goes through hypercorn's send. None as well
        when the socket side is not hypercorn's ``TCPServer`` over a plain socket (a test's recorder; a TLS stream
        has no ``socket``: its bytes must go through the TLS layer)."""
        direct = self._direct
        if direct is None or direct[0].locked():
            return None
        return direct[1]

    def _keep_alive(self, event: Updated) -> Event | None:
        """hypercorn's keep-alive timer events go to this connection's one watcher once hypercorn's first timer is
        stopped (module docstring); what hypercorn itself must still be sent (the event that stops its first timer,
        or a close while the server shuts down), else None. Synchronous: moving a deadline, starting a task."""
        if not event.idle:  # a request head arrived
            self._idle = False
            if self._idle_scope is not None:
                self._idle_scope.deadline = math.inf
            if not self._first_timer_stopped:
                self._first_timer_stopped = True
                return event
            return None
        if self.context.terminated.is_set():  # answered while the server shuts down: close now, as hypercorn
            return Closed()
        self._idle = True
        deadline = trio.current_time() + self.config.keep_alive_timeout
        if self._idle_scope is not None:
            self._idle_scope.deadline = deadline
        elif not self._closed:
            self._idle_scope = trio.CancelScope(deadline=deadline)
            self.task_group.spawn(self._watch_idle, self._idle_scope)
        return None

    async def _watch_idle(self, scope: trio.CancelScope) -> None:
        """Close the connection when ``scope``'s deadline passes while it is idle, or when the server shuts down
        while it is idle; end without closing when the connection closed, or when a request came in first (the
        next answer starts a new watcher)."""
        with scope:
            await self.context.terminated.wait()
        if self._idle_scope is scope:
            self._idle_scope = None
        if self._idle and not self._closed:
            with trio.CancelScope(shield=True):
                await self._connection_send(Closed())

    async def _stop_head_timer(self) -> None:
        if self._head_timer_running:
            self._head_timer_running = False
            await self._head_timer.stop()

    async def _head_deadline(self) -> None:
        assert self._limits.header_read_timeout is not None
        await trio.sleep(self._limits.header_read_timeout)
        self._head_timer_running = False
        with trio.CancelScope(shield=True):  # the close below cancels this very timer
            await self._send_refusal(
                *TIMEOUT, f"the request head was not received within {self._limits.header_read_timeout:g} s; "
                "the connection is closed",
            )
            await self.send(Closed())

    async def _send_error_response(self, status_code: int) -> None:
        """The codec refused the head: 431 (larger than its buffer) or 400 (malformed). hypercorn closes afterwards."""
        if status_code == HEADERS_TOO_LARGE[0]:
            await self._refuse_large_head()
        else:
            await self._send_refusal(*MALFORMED, "malformed HTTP request")

    async def _refuse_large_head(self) -> None:
        limit = self._limits.max_header_bytes
        await self._send_refusal(
            *HEADERS_TOO_LARGE, f"the request line and headers are over {limit} bytes", limit=limit
        )

    async def _send_refusal(self, status: int, code: str, message: str, **details: Any) -> None:
        """A whole error response, with ``Connection: close`` (the caller closes)."""
        body = self._limits.refusal(status, code, message, **details)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"connection", b"close"),
            *self.config.response_headers("h11"),
        ]
        connection = self.connection
        try:
            data = connection.response(status, headers) + connection.data(body) + connection.end()
        except LocalProtocolError:  # a response already under way: nothing more can be said
            return
        await self.send(RawData(data=data))


def _protocol(app: Any, config: HypercornConfig, *args: Any) -> H11Protocol:
    """What ``ProtocolWrapper`` builds for an HTTP/1.1 connection: :class:`LimitedH11Protocol` for a
    :class:`LimitedConfig`, hypercorn's own protocol for any other config."""
    protocol = LimitedH11Protocol if isinstance(config, LimitedConfig) else _HYPERCORN_H11
    return protocol(app, config, *args)


def install() -> None:
    """Make hypercorn build :class:`LimitedH11Protocol` for HTTP/1.1 connections of a :class:`LimitedConfig`
    (idempotent)."""
    hypercorn.protocol.H11Protocol = _protocol  # type: ignore[misc,assignment]


def _has_length(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a response with ``headers`` says its body's length (a whole body, sent right after the head)."""
    return any(name.lower() == b"content-length" for name, _ in headers)
