"""The HTTP/1.1 client behind the SGLang client: trio sockets + a small HTTP/1.1 codec (``http1``), and nothing else.

This module is the pool (:class:`HTTPClient`) and the responses it returns; one connection (socket, TLS, HTTP state,
timeouts) is ``_http_connection``'s, and so is :func:`~proxy.upstream._http_connection.translate`, the only place
where socket, TLS and protocol exceptions (and our timeouts) become :mod:`proxy.upstream.errors` classes. No other
module of the package touches sockets or the codec.

Why not httpx/httpx2. py-spy on ``bench/overhead.py`` put httpx2's layers (client -> auth -> redirects ->
transport -> pool -> httpcore connection, six nested async generators per response body, Request/Response
models, an ``is_readable`` scan) at 20-25 % of the proxy's CPU per request. The proxy needs far less: one kind
of server (SGLang's uvicorn, or the embedded engine's hypercorn), plain HTTP/1.1, JSON request bodies, and
responses that are either a Content-Length JSON body or a chunked SSE stream. So these two modules are that and
only that: a keep-alive pool of TCP connections, the client side of HTTP/1.1 it needs (``http1``), explicit
timeouts, and one error translation. ``bench/upstream_client.py`` measures it against httpx2.

https: the TLS context is ``ssl.create_default_context()`` (system CAs, hostname verification, ALPN
``http/1.1``) unless the caller passes one; the handshake is part of connecting.

What it deliberately does not do: proxies, redirects, cookies, compression, HTTP/2, ``Expect: 100-continue``.

Cost notes (measured on the 2-core bench machine): a whole h11 request/response cycle was ~64 us, 4% of a
non-streaming request's CPU once the rest had been trimmed (issue 21 item 2); ``http1``'s is ~5 us (its docstring
says what it reads and refuses; docs/benchmarks.md has the figures).

At about 500 lines: the pool and the two kinds of response body it returns (Content-Length and chunked SSE) share
the connection's life cycle (checked out, drained, returned or closed), which one module keeps in one place.
"""

from __future__ import annotations

import math
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from ssl import SSLContext
from typing import Any

import attrs
import trio

from proxy.upstream import http1
from proxy.upstream._http_connection import (
    IO_ERRORS,
    Connection,
    Phase,
    PoolKey,
    Target,
    TLSConnection,
    is_connection_loss,
    translate,
)
from proxy.upstream.errors import UpstreamError
from proxy.upstream.events import Partial
from proxy.upstream.wire_json import dumps_body

__all__ = ["HTTPClient", "PoolStatistics", "Response", "SSLContext", "StreamResponse"]

@attrs.frozen
class PoolStatistics:
    """``HTTPClient.statistics()`` (and ``SGLangClient.pool_statistics()``): sockets now, and counters."""

    idle_connections: int  # open, in the pool, ready for reuse
    active_connections: int  # open, serving a request or a stream
    connections_opened: int  # TCP connections made since the start
    connections_reused: int  # requests sent on a pooled connection
    stale_discarded: int  # pooled connections found closed (or readable) by the peer when about to be reused
    retries: int  # requests resent on a fresh connection after a stale keep-alive race

    @property
    def open_connections(self) -> int:
        return self.idle_connections + self.active_connections


class Response:
    """A complete response (non-streaming requests)."""

    __slots__ = ("status", "headers", "content")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], content: bytes) -> None:
        self.status = status
        self.headers = headers  # lowercase names, bytes (``http1.Response.headers``)
        self.content = content

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        key = name.lower().encode("ascii")
        for header, value in self.headers:
            if header == key:
                return value.decode("latin-1")
        return None



class HTTPClient:
    """A pool of keep-alive HTTP/1.1 connections keyed by (scheme, host, port), plain or TLS.

    - ``max_connections`` requests (a stream counts until it is closed) run at once; waiting for a slot is
      bounded by ``pool_timeout``. Open sockets (idle + active) also stay within ``max_connections``: opening one
      when the bound is reached closes the oldest idle connection of another host.
    - Idle connections are kept ``keepalive_expiry`` seconds (trio's clock), newest reused first. Only the
      connection about to be reused is checked: readable means the peer closed it (or sent bytes nobody asked
      for), so it is closed and the next one tried.
    - A stale keep-alive race (the server closes an idle connection just as it is reused: sending fails, or the
      connection ends before any response byte) is retried once, on a new connection. Only then: the request
      cannot have been answered, and a server closing an idle connection has not read it. A timeout or a
      malformed response is never retried, nor is anything on a new connection.
    - Timeouts: connect, write and pool per client; read per request (generation requests have none).
    - A connection returns to the pool only after its response was read to the end and the codec says it can
      carry another request (HTTP/1.1, no ``Connection: close``, no trailing bytes); any other end closes it.
    - ``https://`` URLs connect through TLS with ``ssl_context``; by default ``ssl.create_default_context()``
      (the system CA store, certificate and hostname verification), made on the first TLS connection. The
      handshake is part of connecting (bounded by ``connect_timeout``); its failure is UpstreamUnavailable.
    """

    def __init__(
        self,
        *,
        max_connections: int,
        connect_timeout: float | None,
        write_timeout: float | None,
        pool_timeout: float | None,
        keepalive_expiry: float | None,
        ssl_context: SSLContext | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._max_connections = max_connections
        self._slots = trio.Semaphore(max_connections)
        self._connect_timeout = math.inf if connect_timeout is None else connect_timeout
        self._pool_timeout = math.inf if pool_timeout is None else pool_timeout
        self._write_timeout = write_timeout
        self._keepalive_expiry = keepalive_expiry
        self._ssl_context = ssl_context
        self._idle: dict[PoolKey, deque[Connection]] = {}
        self._active: set[Connection] = set()
        self._targets: dict[str, Target] = {}
        self._closed = False
        self._opened = self._reused = self._stale = self._retries = 0

    @staticmethod
    def check_url(url: str) -> None:
        """Raise ValueError unless the client can talk to ``url`` (``http://host[:port]`` or ``https://...``)."""
        Target(url)

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(
            idle_connections=sum(len(idle) for idle in self._idle.values()),
            active_connections=len(self._active),
            connections_opened=self._opened,
            connections_reused=self._reused,
            stale_discarded=self._stale,
            retries=self._retries,
        )

    def close(self) -> None:
        """Close every connection, idle or active (a stream being read then fails as cut). Synchronous."""
        self._closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
        for conn in list(self._active):
            conn.close()
        self._active.clear()

    # -- requests ------------------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        read_timeout: float | None = None,
    ) -> Response:
        """Send ``body`` (a JSON value; None for no body) and read the whole response.

        ``read_timeout`` bounds each receive, not the whole response. Network, protocol and timeout failures
        raise UpstreamError subclasses; the status is not checked (the caller's business). Besides those:
        ``trio.Cancelled``, ValueError for a bad URL or a body that is not JSON (NaN), RuntimeError once closed."""
        target = self._target(url)
        await trio.lowlevel.checkpoint_if_cancelled()
        await self._acquire(url)
        try:
            conn, head = await self._start(target, method, body, headers, read_timeout, url)
            pieces: list[bytes] = []
            try:
                while True:
                    event = await conn.next_event(read_timeout)
                    if type(event) is bytes:
                        pieces.append(event)
                    elif event is http1.END:
                        break
                    else:
                        raise http1.RemoteProtocolError(f"unexpected {event!r} in a response body")
            except IO_ERRORS as exc:
                self._discard(conn)
                raise translate(exc, url=url, phase="read", eof=conn.eof) from exc
            except BaseException:
                self._discard(conn)
                raise
            self._finish(conn)
        finally:
            self._slots.release()
        return Response(head.status_code, head.headers, b"".join(pieces))

    async def stream(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        partial: Callable[[], Partial] | None = None,
        read_timeout: float | None = None,
    ) -> StreamResponse:
        """Send the request and return once the response head has arrived; the body is read with
        :meth:`StreamResponse.receive`. ``read_timeout`` bounds each receive (head and body); None, the usual:
        none. The caller must :meth:`StreamResponse.close` it (it holds a pool slot). ``partial`` gives the tokens
        so far, for the errors raised while the body is read."""
        target = self._target(url)
        await trio.lowlevel.checkpoint_if_cancelled()
        await self._acquire(url)
        try:
            conn, head = await self._start(target, method, body, headers, read_timeout, url)
        except BaseException:
            self._slots.release()
            raise
        return StreamResponse(self, conn, head, url, partial, read_timeout)

    # -- plumbing ------------------------------------------------------------------------------------------

    def _target(self, url: str) -> Target:
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) >= 4096:  # URLs are a handful of base URLs x paths; never let it grow unbounded
                self._targets.clear()
            target = self._targets[url] = Target(url)
        return target

    async def _acquire(self, url: str) -> None:
        if self._closed:
            raise RuntimeError("the upstream HTTP client has been closed")
        try:
            self._slots.acquire_nowait()  # the common case: no scope, no scheduling
            return
        except trio.WouldBlock:
            pass
        try:
            with trio.fail_after(self._pool_timeout):
                await self._slots.acquire()
        except trio.TooSlowError as exc:
            raise translate(exc, url=url, phase="pool") from exc

    async def _start(
        self,
        target: Target,
        method: str,
        body: Any,
        headers: Mapping[str, str] | None,
        read_timeout: float | None,
        url: str,
    ) -> tuple[Connection, http1.Response]:
        """Send the request and read the response head, with the stale-connection retry. The connection is in
        ``_active`` on return; on an exception it is closed."""
        fields = [(b"host", target.host_header)]
        payload = None
        if body is not None:
            payload = dumps_body(body)
            fields.append((b"content-type", b"application/json"))
            fields.append((b"content-length", b"%d" % len(payload)))
        elif method != "GET":
            fields.append((b"content-length", b"0"))
        if headers:
            fields.extend((name.lower().encode("ascii"), value.encode("ascii")) for name, value in headers.items())
        try:
            head = http1.request_head(method.encode("ascii"), target.path, fields)
        except http1.LocalProtocolError as exc:  # e.g. a header value with a newline
            raise translate(exc, url=url, phase="write") from exc
        out = head if payload is None else head + payload
        head_only = method == "HEAD"

        conn = self._take_idle(target.key)
        may_retry = conn is not None
        if conn is None:
            conn = await self._connect(target, url)
        while True:
            self._active.add(conn)
            phase: Phase = "write"
            try:
                conn.http.sent_request(head_only=head_only)
                await conn.send_all(out, self._write_timeout)
                phase = "read"
                event = await conn.next_event(read_timeout)  # the final response's head (1xx are skipped)
                if type(event) is not http1.Response:
                    raise http1.RemoteProtocolError(f"unexpected {event!r} before the response")
                return conn, event
            except IO_ERRORS as exc:
                self._discard(conn)
                if may_retry and not conn.got_bytes and not self._closed and is_connection_loss(exc, conn.eof):
                    may_retry = False
                    self._retries += 1
                    conn = await self._connect(target, url)
                    continue
                raise translate(exc, url=url, phase=phase, eof=conn.eof) from exc
            except BaseException:
                self._discard(conn)
                raise

    def _take_idle(self, key: PoolKey) -> Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        expiry = self._keepalive_expiry
        now = trio.current_time()
        while idle:
            conn = idle.pop()  # the newest: least likely to have been closed by the server
            if expiry is not None and now - conn.idle_since > expiry:
                conn.close()  # expired, and every older one with it
                while idle:
                    idle.popleft().close()
                return None
            # One poll() on this connection only (the transport socket for TLS). Readable while idle means EOF
            # (the server's keep-alive timeout; uvicorn's and hypercorn's is 5 s), a TLS close_notify, or junk:
            # either way unusable.
            if conn.sock.is_readable():
                conn.close()
                self._stale += 1
                continue
            conn.got_bytes = False
            self._reused += 1
            return conn
        return None

    async def _connect(self, target: Target, url: str) -> Connection:
        self._make_room()
        tls = None
        try:
            with trio.fail_after(self._connect_timeout):
                stream = await trio.open_tcp_stream(target.host, target.port)  # sets TCP_NODELAY
                if target.tls:
                    tls = trio.SSLStream(
                        stream, self._tls_context(), server_hostname=target.host, https_compatible=True
                    )
                    try:
                        # Now, not on the first send: a bad certificate is then a connect failure, and the
                        # handshake is bounded by the connect timeout.
                        await tls.do_handshake()
                    except BaseException:  # failed, timed out or cancelled: nothing may stay open
                        stream.socket.close()
                        raise
        except (OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
            raise translate(exc, url=url, phase="connect") from exc
        self._opened += 1
        if tls is not None:
            return TLSConnection(tls, stream.socket, target.key)
        # The raw trio socket, not the SocketStream wrapper: one layer less per send and receive.
        return Connection(stream.socket, target.key)

    def _tls_context(self) -> SSLContext:
        context = self._ssl_context
        if context is None:  # made once, on the first https connection (loading the CA store takes a moment)
            context = self._ssl_context = ssl.create_default_context()
            context.set_alpn_protocols(["http/1.1"])
        return context

    def _make_room(self) -> None:
        """Before opening a socket: close idle connections (oldest first) while the open count is at the bound."""
        excess = len(self._active) + sum(len(idle) for idle in self._idle.values()) - self._max_connections + 1
        while excess > 0:
            queues = [idle for idle in self._idle.values() if idle]
            if not queues:
                return
            min(queues, key=lambda idle: idle[0].idle_since).popleft().close()
            excess -= 1

    def _finish(self, conn: Connection) -> None:
        """A response was read to its end: back to the pool if the codec allows another cycle, else close."""
        self._active.discard(conn)
        h = conn.http
        if conn.closed or self._closed or conn.eof or not h.reusable:
            conn.close()  # includes Connection: close, HTTP/1.0 and a body that ran to the end of the connection
            return
        h.start_next_cycle()
        if h.trailing_data:  # bytes after the response that nobody asked for
            conn.close()
            return
        conn.idle_since = now = trio.current_time()
        idle = self._idle.get(conn.key)
        if idle is None:
            idle = self._idle[conn.key] = deque()
        expiry = self._keepalive_expiry
        if expiry is not None:  # drop the expired ones while we are here (oldest on the left)
            while idle and now - idle[0].idle_since > expiry:
                idle.popleft().close()
        idle.append(conn)

    def _discard(self, conn: Connection) -> None:
        self._active.discard(conn)
        conn.close()


class StreamResponse:
    """A response whose body is read piece by piece (``/generate`` with ``stream: true``).

    It holds a pool slot and its connection until :meth:`close`. Closing after the end of the body returns the
    connection to the pool; closing before closes the socket at once, so the server sees the disconnect (SGLang
    aborts disconnected requests).
    """

    __slots__ = (
        "status", "headers", "url", "_pool", "_conn", "_partial", "_read_timeout", "_done", "_closed", "_failure",
    )

    def __init__(
        self,
        pool: HTTPClient,
        conn: Connection,
        head: http1.Response,
        url: str,
        partial: Callable[[], Partial] | None,
        read_timeout: float | None = None,
    ) -> None:
        self.status: int = head.status_code
        self.headers: list[tuple[bytes, bytes]] = head.headers
        self.url = url
        self._pool = pool
        self._conn = conn
        self._partial = partial
        self._read_timeout = read_timeout
        self._done = False  # EndOfMessage seen
        self._closed = False
        self._failure: BaseException | None = None  # an I/O error still to be raised (see receive)

    @property
    def complete(self) -> bool:
        """The whole body has been read."""
        return self._done

    async def receive(self) -> bytes | None:
        """The body bytes of the next receive (every piece already parsed, joined), or None at the end.

        Raises UpstreamStreamCut / UpstreamProtocolError / UpstreamTimeout (with ``partial``) and trio.Cancelled;
        after an error the connection is closed. The read timeout (if any) bounds each receive; usually there is
        none: token gaps, long prefills and pauses can last minutes."""
        if self._failure is not None:
            raise self._fail(self._failure)
        if self._done or self._closed:
            return None
        conn = self._conn
        h = conn.http
        pieces: list[bytes] = []
        try:
            while True:
                event = h.next_event()
                if type(event) is bytes:
                    pieces.append(event)
                elif event is http1.NEED_DATA:
                    if pieces:
                        break
                    await conn.receive(self._read_timeout)
                elif event is http1.END:
                    self._done = True
                    break
                else:
                    raise http1.RemoteProtocolError(f"unexpected {event!r} in a response body")
        except IO_ERRORS as exc:
            self.close()  # broken: close it now, whatever comes next
            if not pieces:
                raise self._fail(exc) from exc
            # Bad framing right after good pieces of the same receive: hand those out first (they hold tokens
            # the caller must see, and that the error's ``partial`` then includes); the next call raises.
            self._failure = exc
        if not pieces:
            return None
        return b"".join(pieces)

    def _fail(self, exc: BaseException) -> UpstreamError:
        self._failure = exc
        partial = self._partial() if self._partial is not None else None
        error = translate(exc, url=self.url, phase="read", partial=partial, eof=self._conn.eof)
        error.__cause__ = exc
        return error

    async def read(self) -> bytes:
        """The rest of the body, for an error status: not a token stream, so a connection lost here is
        UpstreamUnavailable (no ``partial``), as for any non-streaming body."""
        self._partial = None
        pieces = []
        while (piece := await self.receive()) is not None:
            pieces.append(piece)
        return b"".join(pieces)

    def close(self) -> None:
        """Release the connection (to the pool if the body was read to its end, else closed now) and the pool
        slot. Synchronous and idempotent: nothing here waits, so a cancelled caller still closes."""
        if self._closed:
            return
        self._closed = True
        if self._done:
            self._pool._finish(self._conn)
        else:
            self._pool._discard(self._conn)
        self._pool._slots.release()
