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

hypercorn builds its protocol by name (``hypercorn.protocol.ProtocolWrapper`` calls ``H11Protocol``), with no
option to pass another class; :func:`install` rebinds that one name, short of copying ``worker_serve``. A server
whose config is not a :class:`LimitedConfig` gets hypercorn's behaviour unchanged. HTTP/2 (TLS with ALPN, or prior
knowledge) has hypercorn's own limits only.
"""

from __future__ import annotations

import math
import os
from typing import Any

import h11
import hypercorn.protocol
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.worker_context import TrioSingleTask

from serving.http_limits import HEADERS_TOO_LARGE, MALFORMED, TIMEOUT, HTTPLimits


#: the scope key of a request's "client gone" cancel scope (module docstring); absent under any other server
CLIENT_GONE_KEY = "dressage.client_gone"


class LimitedConfig(HypercornConfig):
    """hypercorn's config and the :class:`HTTPLimits` its connections apply."""

    def __init__(self, limits: HTTPLimits) -> None:
        super().__init__()
        self.http_limits = limits
        self.keep_alive_timeout = limits.keep_alive_timeout
        self.h11_max_incomplete_size = limits.max_header_bytes


class LimitedH11Protocol(H11Protocol):
    """One HTTP/1.1 connection: hypercorn's, plus the head timer and OpenAI-shaped refusals."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits: HTTPLimits | None = getattr(self.config, "http_limits", None)
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
        if self._limits is not None:
            self._connection_send = self.send
            self.send = self._send
            server = getattr(self._connection_send, "__self__", None)
            lock = getattr(server, "send_lock", None)
            socket = getattr(getattr(server, "stream", None), "socket", None)
            if isinstance(lock, trio.Lock) and socket is not None:
                self._direct = (lock, socket)

    async def handle(self, event: Event) -> None:
        if isinstance(event, Closed):
            self._closed = True
            if self.stream is not None and self._client_gone is not None:
                self._client_gone.cancel()  # gone before its answer was complete (hypercorn's http.disconnect)
            if self._idle_scope is not None:
                self._idle_scope.cancel()  # the watcher ends now, not at its deadline
            await self._stop_head_timer()
        await super().handle(event)
        # Started only when a head is still incomplete after the data that came: a head that arrives whole (the
        # usual case) costs no timer task.
        if (
            isinstance(event, RawData)
            and event.data
            and self.stream is None
            and not self._head_timer_running
            and self._limits is not None
            and self._limits.header_read_timeout is not None
            and self.connection.their_state is h11.IDLE
        ):
            self._head_timer_running = True
            await self._head_timer.restart(self.task_group, self._head_deadline)

    async def _create_stream(self, request: h11.Request) -> None:
        await self._stop_head_timer()  # the head is complete
        # h11 bounds only an incomplete head: one that arrives whole in a single receive (64 KiB) passes its
        # buffer check, so a complete head is measured again here.
        if self._limits is not None and _head_size(request) > self._limits.max_header_bytes:
            await self._refuse_large_head()
            await self.send(Closed())
            return
        await super()._create_stream(request)
        scope = getattr(self.stream, "scope", None)  # an HTTP stream's scope, the dict its app got (not started yet)
        if self._limits is not None and isinstance(scope, dict):
            self._client_gone = scope[CLIENT_GONE_KEY] = trio.CancelScope()

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

    async def _send_h11_event(self, event: Any) -> None:
        """hypercorn's, writing the head of a response with a ``Content-Length`` together with what follows it
        (module docstring), and no empty write for an end of message that has no bytes."""
        if self._limits is None:
            await super()._send_h11_event(event)
            return
        try:
            data = self.connection.send(event)
        except h11.LocalProtocolError:
            if self.connection.their_state != h11.ERROR:
                raise
            return
        if self._held_head:
            data, self._held_head = self._held_head + data, b""
        if type(event) is h11.Response and event.status_code >= 200 and _has_length(event):
            self._held_head = data
        elif data:
            await self.send(RawData(data=data))

    async def _stop_head_timer(self) -> None:
        if self._head_timer_running:
            self._head_timer_running = False
            await self._head_timer.stop()

    async def _head_deadline(self) -> None:
        assert self._limits is not None and self._limits.header_read_timeout is not None
        await trio.sleep(self._limits.header_read_timeout)
        self._head_timer_running = False
        with trio.CancelScope(shield=True):  # the close below cancels this very timer
            await self._send_refusal(
                *TIMEOUT, f"the request head was not received within {self._limits.header_read_timeout:g} s; "
                "the connection is closed",
            )
            await self.send(Closed())

    async def _send_error_response(self, status_code: int) -> None:
        """h11 refused the head: 431 (larger than its buffer) or 400 (malformed). hypercorn closes afterwards."""
        if self._limits is None:
            await super()._send_error_response(status_code)
        elif status_code == HEADERS_TOO_LARGE[0]:
            await self._refuse_large_head()
        else:
            await self._send_refusal(*MALFORMED, "malformed HTTP request")

    async def _refuse_large_head(self) -> None:
        assert self._limits is not None
        limit = self._limits.max_header_bytes
        await self._send_refusal(
            *HEADERS_TOO_LARGE, f"the request line and headers are over {limit} bytes", limit=limit
        )

    async def _send_refusal(self, status: int, code: str, message: str, **details: Any) -> None:
        """A whole error response, with ``Connection: close`` (the caller closes)."""
        assert self._limits is not None
        body = self._limits.refusal(status, code, message, **details)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"connection", b"close"),
            *self.config.response_headers("h11"),
        ]
        connection = self.connection
        try:
            data = connection.send(h11.Response(status_code=status, headers=headers))
            data += connection.send(h11.Data(data=body)) + connection.send(h11.EndOfMessage())
        except h11.LocalProtocolError:  # a response already under way: nothing more can be said
            return
        await self.send(RawData(data=data))


def install() -> None:
    """Make hypercorn build :class:`LimitedH11Protocol` for HTTP/1.1 connections (idempotent)."""
    hypercorn.protocol.H11Protocol = LimitedH11Protocol  # type: ignore[misc]


def _has_length(response: h11.Response) -> bool:
    """Whether ``response`` says its body's length (a whole body, sent right after the head)."""
    return any(name == b"content-length" for name, _ in response.headers)  # h11 lower-cases the names


def _head_size(request: h11.Request) -> int:
    """The bytes of ``request``'s head as sent (request line, ``name: value`` lines, CRLFs), near enough: h11 has
    stripped the whitespace around values."""
    size = len(request.method) + len(request.target) + len(b" HTTP/1.1\r\n\r\n") + 1
    for name, value in request.headers.raw_items():
        size += len(name) + len(value) + 4
    return size
