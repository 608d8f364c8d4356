"""One HTTP/1.1 connection of the upstream HTTP client (``_httplib``): a trio socket (or a TLS stream over it), its
HTTP/1.1 state (``http1.ClientConnection``) and the timeouts of one send or receive; and :func:`translate`, the one
place where the exceptions of sockets, TLS, the HTTP codec and our timeouts become :mod:`proxy.upstream.errors` classes.

The pool (``_httplib.HTTPClient``) decides which connection serves a request, when one is reused, retried or
closed; a connection only moves bytes and raises the raw errors of :data:`IO_ERRORS`, which the pool translates.
The two modules are the package's whole HTTP layer: no other module touches sockets, TLS or the HTTP codec
(``tests/upstream/test_errors.py`` checks it).

https (an SGLang behind a TLS gateway or ingress) goes through ``trio.SSLStream`` over the same TCP connection:
:class:`TLSConnection` overrides only the send and the receive, so the plain http path (the raw trio socket's
``send``/``recv``) is untouched. The idle check and the synchronous close work on the transport socket in both
cases.
"""

from __future__ import annotations

import os
import ssl
from typing import Any, Literal
from urllib.parse import urlsplit

import trio

from proxy.upstream import http1
from proxy.upstream.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStreamCut,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from proxy.upstream.events import Partial

__all__ = [
    "IO_ERRORS", "RECEIVE_SIZE", "Connection", "Phase", "PoolKey", "TLSConnection", "Target", "is_connection_loss",
    "translate",
]

Phase = Literal["pool", "connect", "write", "read"]

#: Bytes asked of the kernel per receive. SSE chunks are small; a routed-experts final chunk can be megabytes.
RECEIVE_SIZE = 65536

#: What a socket exchange can raise besides cancellation: socket errors (trio raises OSError on its raw sockets,
#: Broken/ClosedResourceError when a socket is closed under a waiting task; an SSLStream raises
#: BrokenResourceError from the ``ssl.SSLError``), our own timeouts (``TooSlowError``), and the codec's protocol errors.
#: Everything else (``trio.Cancelled`` above all) passes through untouched.
IO_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, http1.ProtocolError)


def translate(
    exc: BaseException, *, url: str, phase: Phase, partial: Partial | None = None, eof: bool = False
) -> UpstreamError:
    """The one place where a socket, HTTP codec or timeout error becomes an :class:`UpstreamError`.

    ``phase`` is where it happened: waiting for a pool slot, connecting, sending the request, or reading the
    response (head or body). ``partial`` is given only while a stream's body is being read: a connection lost
    there is an :class:`UpstreamStreamCut`; lost anywhere before (or during a non-streaming body) it is
    :class:`UpstreamUnavailable`. ``eof`` says the peer had closed the connection: the codec then reports the
    incomplete message as a protocol error, but it is a lost connection, not a malformed one.

    TLS: an SSLStream raises ``trio.BrokenResourceError`` from the ``ssl.SSLError``; the detail is then the TLS
    error (certificate verification, hostname mismatch, bad record...). In the connect phase a
    BrokenResourceError can only come from the TLS handshake (TCP connecting raises OSError).
    """
    tls = exc if isinstance(exc, ssl.SSLError) else exc.__cause__ if isinstance(exc.__cause__, ssl.SSLError) else None
    if tls is not None:
        detail = f"{type(tls).__name__}: {tls}"  # e.g. SSLCertVerificationError: ... certificate verify failed: ...
    else:
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc.__cause__, BaseExceptionGroup):  # trio.open_tcp_stream: "all attempts ... failed"
        detail += f" ({'; '.join(str(e) for e in exc.__cause__.exceptions)})"
    if isinstance(exc, trio.TooSlowError):
        return UpstreamTimeout(f"SGLang {phase} timeout", phase=phase, url=url, partial=partial)
    if isinstance(exc, http1.ProtocolError) and not eof:
        return UpstreamProtocolError(f"HTTP protocol error ({detail})", url=url, partial=partial)
    if phase == "connect":
        if tls is not None or isinstance(exc, trio.BrokenResourceError):
            return UpstreamUnavailable(f"cannot connect to SGLang: TLS handshake failed ({detail})", url=url)
        return UpstreamUnavailable(f"cannot connect to SGLang ({detail})", url=url)
    if partial is not None:
        return UpstreamStreamCut(f"SGLang stream cut ({detail})", url=url, partial=partial)
    return UpstreamUnavailable(f"connection to SGLang lost ({detail})", url=url)


def is_connection_loss(exc: BaseException, eof: bool) -> bool:
    """A dead connection (reset, broken pipe, EOF mid-message), as opposed to a timeout or a malformed reply."""
    if isinstance(exc, (OSError, trio.BrokenResourceError)):
        return True
    return eof and isinstance(exc, http1.RemoteProtocolError)


#: A pool key: (scheme, host, port). The scheme keeps plain and TLS connections apart.
PoolKey = tuple[str, str, int]


class Target:
    """A parsed URL: where to connect, whether through TLS, and what to put in the request line. Cached per URL
    string."""

    __slots__ = ("key", "host", "port", "tls", "path", "host_header")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"the upstream HTTP client speaks http:// and https:// only, got {url!r}")
        if not parts.hostname:
            raise ValueError(f"URL without a host: {url!r}")
        self.host = parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.key: PoolKey = (parts.scheme, self.host, self.port)
        path = parts.path or "/"
        self.path = (path + "?" + parts.query if parts.query else path).encode("ascii")
        self.host_header = parts.netloc.rpartition("@")[2].encode("ascii")


class Connection:
    """One TCP connection and its HTTP/1.1 state. Raises raw socket/protocol/timeout errors (see IO_ERRORS)."""

    __slots__ = ("sock", "http", "key", "idle_since", "eof", "got_bytes", "closed")

    def __init__(self, sock: trio.socket.SocketType, key: PoolKey) -> None:
        self.sock = sock
        self.http = http1.ClientConnection()
        self.key = key
        self.idle_since = 0.0
        self.eof = False  # the peer closed its side
        self.got_bytes = False  # any response byte received during the current exchange
        self.closed = False

    def close(self) -> None:
        """Close the socket now. Synchronous (a local syscall), so no cancellation can skip it; a task blocked on
        this socket wakes up with ClosedResourceError."""
        if not self.closed:
            self.closed = True
            self.sock.close()

    async def send_all(self, data: bytes, timeout: float | None) -> None:
        sent = self._write_now(data)
        if sent == len(data):
            return  # the kernel took it all without a wait: nothing for a timeout to bound (a scope is ~7 µs)
        if timeout is None:
            await self._send_rest(data, sent)
            return
        # move_on_after is a bare CancelScope; fail_after is a generator context manager around one, which costs
        # more than the send itself.
        with trio.move_on_after(timeout) as scope:
            await self._send_rest(data, sent)
        if scope.cancelled_caught:
            raise trio.TooSlowError

    # The plain path writes and reads the (non-blocking) socket's descriptor itself and waits only when the kernel
    # says it would block: trio's ``send``/``recv`` checkpoint even when they did not wait, a task step each, two a
    # request (issue 21 item 2). A wait is trio's (cancellable; a socket closed under it raises
    # ClosedResourceError); a read or write after ``close`` meets the closed descriptor (-1) and raises OSError.

    def _write_now(self, data: bytes) -> int:
        """How much of ``data`` the kernel took at once (all of it, unless the body outgrows the socket buffer)."""
        try:
            return os.write(self.sock.fileno(), data)
        except BlockingIOError:
            return 0

    async def _send_rest(self, data: bytes, sent: int) -> None:
        with memoryview(data) as view:
            while sent < len(data):
                sent += await self.sock.send(view[sent:])

    async def _receive_some(self) -> bytes:
        while True:
            try:
                return os.read(self.sock.fileno(), RECEIVE_SIZE)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)

    async def receive(self, timeout: float | None) -> None:
        """One receive into the codec (an empty read tells it the peer closed). ``timeout`` bounds this receive."""
        if timeout is None:
            data = await self._receive_some()
        else:
            data = b""
            with trio.move_on_after(timeout) as scope:  # not fail_after: see send_all
                data = await self._receive_some()
            if scope.cancelled_caught:
                raise trio.TooSlowError
        if data:
            self.got_bytes = True
        else:
            self.eof = True
        self.http.receive_data(data)

    async def next_event(self, timeout: float | None) -> Any:
        h = self.http
        while True:
            event = h.next_event()
            if event is not http1.NEED_DATA:
                return event
            await self.receive(timeout)


class TLSConnection(Connection):
    """A connection through TLS: the same, with a ``trio.SSLStream`` between the codec and the socket. Only the send and
    the receive differ (a subclass, so the plain path pays nothing for TLS).

    ``sock`` is the transport socket: the idle check (``is_readable()``: a readable idle TLS connection holds a
    close_notify, an EOF or junk, so it is unusable) and :meth:`close` work on it exactly as on a plain
    connection. Closing the socket without a close_notify is an abrupt disconnect, which is what the "close now
    so SGLang sees it" path wants; the SSLStream holds no OS resource of its own, so nothing is left open. The
    SSLStream raises ``trio.BrokenResourceError`` from ``ssl.SSLError`` (see :func:`translate`); it was made with
    ``https_compatible=True``, so an EOF without close_notify reads as a plain EOF."""

    __slots__ = ("tls",)

    def __init__(self, tls: trio.SSLStream[trio.SocketStream], sock: trio.socket.SocketType, key: PoolKey) -> None:
        super().__init__(sock, key)
        self.tls = tls

    def _write_now(self, data: bytes) -> int:
        return 0  # every byte goes through the TLS stream

    async def _send_rest(self, data: bytes, sent: int) -> None:
        await self.tls.send_all(data[sent:])

    async def _receive_some(self) -> bytes:
        return await self.tls.receive_some(RECEIVE_SIZE)
