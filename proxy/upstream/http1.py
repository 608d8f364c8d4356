"""The client side of HTTP/1.1 as the upstream connections speak it: a request's bytes out, a response's events in.

Why not h11, the parser hypercorn uses and this module replaced on the client side (issue 21 item 2; measured in
docs/benchmarks.md): a whole h11 request/response cycle cost ~64 µs on the bench machine (its connection state
machine, per-event validation and header normalisation), 4% of a non-streaming request's CPU, and every streamed
chunk paid its event machinery again. The upstream client needs a small, fixed part of HTTP/1.1, so this is that
part and nothing else (~13 µs a cycle where h11's took ~64, timeit):

- **Requests**: one at a time on a connection, sent whole (head and body together, built by the caller). Header
  names must be tokens and values free of CR, LF and NUL (:func:`request_head`), else ``LocalProtocolError``.
- **Responses** (RFC 9112 section 6.3): 1xx interim responses are skipped (``101`` is refused: nothing here
  upgrades); a response to ``HEAD``, a ``204`` and a ``304`` have no body; ``Transfer-Encoding: chunked`` (the only
  coding accepted; chunk extensions and trailers are read and dropped); else ``Content-Length`` (repeated values
  must agree); else the body runs to the end of the connection. A response is reusable (keep-alive) when it is
  HTTP/1.1, has no ``Connection: close`` and its body was framed by length or chunks.
- **Refused** (``RemoteProtocolError``; the pool then closes the connection): a malformed status or header line
  (header lines read as h11 reads them, :func:`serving.http1_wire.header_fields`: a line folded onto the previous
  one is unfolded, as RFC 9112 asks of a client), a head over :data:`MAX_HEAD_BYTES`, a malformed chunk,
  conflicting lengths, an unknown transfer coding, and the end of the connection before the end of a response
  (``_http_connection.is_connection_loss`` reads that one as a lost connection).

Events from :meth:`ClientConnection.next_event`: a :class:`Response` (the head), ``bytes`` (a piece of the body, as
much as has arrived), :data:`END` (the body is complete), or :data:`NEED_DATA` (feed
:meth:`ClientConnection.receive_data` and ask again).
"""

from __future__ import annotations

import re
from typing import Any

# The errors, markers and header field lines are the server codec's too (serving/http1_wire.py).
from serving.http1_wire import (
    END, NEED_DATA, TOKEN, LocalProtocolError, ProtocolError, RemoteProtocolError, content_length, head_end,
    header_fields, take,
)

__all__ = [
    "END", "MAX_HEAD_BYTES", "NEED_DATA", "ClientConnection", "LocalProtocolError", "ProtocolError",
    "RemoteProtocolError", "Response", "request_head",
]

#: A response head (status line and fields) larger than this is refused, as are chunk-size and trailer lines
#: over :data:`MAX_LINE_BYTES`: SGLang's heads are a few hundred bytes, and a peer that never ends one must not grow
#: the buffer without bound.
MAX_HEAD_BYTES = 64 * 1024
MAX_LINE_BYTES = 8 * 1024


class Response:
    """A final response's head: status, fields (names lower-cased, in order, repeats kept), version, reason."""

    __slots__ = ("status_code", "headers", "http_version", "reason")

    def __init__(self, status_code: int, headers: list[tuple[bytes, bytes]], http_version: bytes,
                 reason: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.http_version = http_version
        self.reason = reason

    def __repr__(self) -> str:
        return f"Response(status_code={self.status_code}, http_version={self.http_version!r})"


_BAD_VALUE = re.compile(rb"[\x00\r\n]")
_STATUS_LINE = re.compile(rb"HTTP/(1\.[01]) ([0-9]{3})(?: ([^\x00]*))?")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;.*)?")
_NO_BODY_STATUSES = frozenset((204, 304))


def request_head(method: bytes, target: bytes, fields: list[tuple[bytes, bytes]]) -> bytes:
    """A request's head (request line, fields, blank line); ``LocalProtocolError`` for a field it will not send."""
    if not TOKEN.fullmatch(method) or not target or _BAD_VALUE.search(target) or b" " in target:
        raise LocalProtocolError(f"illegal request line: {method!r} {target!r}")
    for name, value in fields:
        if not TOKEN.fullmatch(name):
            raise LocalProtocolError(f"illegal header name {name!r}")
        if _BAD_VALUE.search(value):
            raise LocalProtocolError(f"illegal header value {value!r}")
    lines = [b"%s %s HTTP/1.1\r\n" % (method, target)]
    lines.extend(b"%s: %s\r\n" % field for field in fields)
    lines.append(b"\r\n")
    return b"".join(lines)


# Parser states (small ints: compared on every event).
_IDLE, _HEAD, _LENGTH, _CHUNK_SIZE_LINE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _UNTIL_CLOSE, _DONE = range(9)


class ClientConnection:
    """One connection's HTTP/1.1 state: a request in flight (:meth:`sent_request`), its response parsed from the
    bytes fed in (:meth:`receive_data`, ``b""`` for the end of the connection) by :meth:`next_event`."""

    __slots__ = ("_buffer", "_state", "_remaining", "_no_body", "_keep_alive", "_eof", "_scanned")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._state = _IDLE
        self._remaining = 0
        self._no_body = False
        self._keep_alive = False
        self._eof = False
        # How much of the buffer a head's end was looked for in, in vain: a head arriving in many pieces is searched
        # once overall, not once a piece (a trickling peer would make that quadratic).
        self._scanned = 0

    # -- our side ---------------------------------------------------------------------------------------------------

    def sent_request(self, *, head_only: bool = False) -> None:
        """A request went out whole (``head_only``: it was a ``HEAD``, whose response has no body)."""
        if self._state is not _IDLE:
            raise LocalProtocolError("a request is already in flight on this connection")
        self._state, self._no_body = _HEAD, head_only

    @property
    def reusable(self) -> bool:
        """The response was read to its end and the connection may carry another request."""
        return self._state is _DONE and self._keep_alive and not self._eof

    def start_next_cycle(self) -> None:
        """Ready for the next request (only when :attr:`reusable`)."""
        if not self.reusable:
            raise LocalProtocolError("the connection cannot carry another request")
        self._state = _IDLE

    @property
    def trailing_data(self) -> bool:
        """Bytes arrived that no request asked for (after the response, or before any)."""
        return bool(self._buffer) and self._state in (_IDLE, _DONE)

    # -- their side -------------------------------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Bytes from the peer; ``b""``: the peer closed its side."""
        if data:
            self._buffer += data
        else:
            self._eof = True

    def next_event(self) -> Any:
        """The next event (see the module docstring)."""
        state = self._state
        if state is _HEAD:
            return self._head()
        if state is _LENGTH or state is _CHUNK_DATA:
            return self._counted()
        if state is _CHUNK_SIZE_LINE:
            return self._chunk_size()
        if state is _CHUNK_END:
            return self._chunk_end()
        if state is _TRAILERS:
            return self._trailers()
        if state is _UNTIL_CLOSE:
            return self._until_close()
        raise LocalProtocolError("no response is expected now")

    def _head(self) -> Any:
        buffer = self._buffer
        while True:
            # Blank lines before a status line are ignored (RFC 9112 section 2.2).
            while buffer[:1] == b"\n" or buffer[:2] == b"\r\n":
                del buffer[:1 if buffer[:1] == b"\n" else 2]
                self._scanned = 0
            found, self._scanned = head_end(buffer, self._scanned)
            if found is None:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise RemoteProtocolError(f"response head over {MAX_HEAD_BYTES} bytes")
                if self._eof:
                    raise RemoteProtocolError("the connection closed before a complete response head")
                return NEED_DATA
            head = bytes(buffer[:found.start()])
            del buffer[:found.end()]
            if len(head) > MAX_HEAD_BYTES:
                raise RemoteProtocolError(f"response head over {MAX_HEAD_BYTES} bytes")
            response = _parse_head(head)
            status = response.status_code
            if status >= 200:
                return self._framed(response)
            if status == 101:
                raise RemoteProtocolError("unexpected 101 Switching Protocols (no upgrade was asked for)")
            # 1xx interim response (100 Continue, 103 Early Hints): the final one follows

    def _framed(self, response: Response) -> Response:
        """Choose the body's framing from the head (RFC 9112 section 6.3)."""
        fields = response.headers
        connection_tokens = _tokens(fields, b"connection")
        self._keep_alive = response.http_version == b"1.1" and b"close" not in connection_tokens
        if self._no_body or response.status_code in _NO_BODY_STATUSES:
            self._remaining = 0
            self._state = _LENGTH  # a zero-length body: END on the next call
            return response
        codings = _tokens(fields, b"transfer-encoding")
        if codings:
            if codings != [b"chunked"]:
                raise RemoteProtocolError(f"unsupported Transfer-Encoding {b', '.join(codings)!r}")
            self._state = _CHUNK_SIZE_LINE
            return response
        lengths = {content_length(value, RemoteProtocolError) for name, value in fields if name == b"content-length"}
        if lengths:
            if len(lengths) != 1:
                raise RemoteProtocolError(f"conflicting Content-Length values {sorted(lengths)!r}")
            self._remaining = int(lengths.pop())
            self._state = _LENGTH
            return response
        self._keep_alive = False  # the end of the connection ends the body
        self._state = _UNTIL_CLOSE
        return response

    def _counted(self) -> Any:
        """A Content-Length body, or one chunk's data."""
        remaining = self._remaining
        buffer = self._buffer
        if remaining == 0:
            if self._state is _LENGTH:
                self._state = _DONE
                return END
            self._state = _CHUNK_END
            return self._chunk_end()
        if not buffer:
            if self._eof:
                raise RemoteProtocolError("peer closed connection without sending complete message body")
            return NEED_DATA
        piece = take(buffer, remaining)
        self._remaining = remaining - len(piece)
        return piece

    def _line(self) -> bytes | None:
        """The next line of a chunked body (without its line ending), or None until it is complete."""
        buffer = self._buffer
        end = buffer.find(b"\n")
        if end < 0:
            if len(buffer) > MAX_LINE_BYTES:
                raise RemoteProtocolError(f"a chunked-body line over {MAX_LINE_BYTES} bytes")
            if self._eof:
                raise RemoteProtocolError("peer closed connection without sending complete message body")
            return None
        line = bytes(buffer[:end])
        del buffer[:end + 1]
        return line[:-1] if line.endswith(b"\r") else line

    def _chunk_size(self) -> Any:
        line = self._line()
        if line is None:
            return NEED_DATA
        match = _CHUNK_SIZE.fullmatch(line)
        if match is None:
            raise RemoteProtocolError(f"illegal chunk size line {line[:64]!r}")
        size = int(match.group(1), 16)
        if size == 0:
            self._state = _TRAILERS
            return self._trailers()
        self._remaining = size
        self._state = _CHUNK_DATA
        return self._counted()

    def _chunk_end(self) -> Any:
        line = self._line()
        if line is None:
            return NEED_DATA
        if line:
            raise RemoteProtocolError("a chunk's data is longer than its size")
        self._state = _CHUNK_SIZE_LINE
        return self._chunk_size()

    def _trailers(self) -> Any:
        while True:
            line = self._line()
            if line is None:
                return NEED_DATA
            if not line:
                self._state = _DONE
                return END
            header_fields([line])  # checked, then dropped: nothing here reads trailers

    def _until_close(self) -> Any:
        buffer = self._buffer
        if buffer:
            piece = bytes(buffer)
            buffer.clear()
            return piece
        if self._eof:
            self._state = _DONE
            return END
        return NEED_DATA


def _parse_head(head: bytes) -> Response:
    lines = head.split(b"\n")
    status_line = lines[0][:-1] if lines[0].endswith(b"\r") else lines[0]
    match = _STATUS_LINE.fullmatch(status_line)
    if match is None:
        raise RemoteProtocolError(f"illegal status line {status_line[:64]!r}")
    lines = [line[:-1] if line.endswith(b"\r") else line for line in lines[1:]]
    fields = [(name.lower(), value) for name, value in header_fields(lines)]
    return Response(int(match.group(2)), fields, match.group(1), match.group(3) or b"")


def _tokens(fields: list[tuple[bytes, bytes]], wanted: bytes) -> list[bytes]:
    """The comma-separated, lower-cased tokens of every ``wanted`` field, in order."""
    return [token.strip().lower() for name, value in fields if name == wanted
            for token in value.split(b",") if token.strip()]
