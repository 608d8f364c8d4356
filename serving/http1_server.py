"""The server side of HTTP/1.1 as hypercorn's protocol speaks it: a request's events in, a response's bytes out.

Why not h11, the codec hypercorn's HTTP/1.1 protocol is written on: measured inside the running proxy under load,
h11's server-side calls cost ~140 µs a request, about 7% of its CPU (``next_event`` ~78 µs, building an
``h11.Response`` ~20 µs of header validation, ``send`` ~36 µs); an h11 server cycle alone (a request with a
300-byte body in, a 600-byte Content-Length response out) is ~61 µs (timeit). This is the same behaviour for the
part a server behind hypercorn uses (no client role, no trailers sent): ~19 µs that cycle, h11 ~55 in the same run
(timeit). ``tests/serving/test_http1_server.py`` holds it to h11, the oracle, on generated traffic cut at any byte.
It behaves as ``h11.Connection(h11.SERVER)`` does, on purpose also where h11 is odd:

- **Requests accepted**: ``method SP target SP HTTP/d.d`` (the method a token, the target visible ASCII, any
  one-digit version: ``PRI * HTTP/2.0`` too, which hypercorn looks for), header lines as
  :func:`serving.http1_wire.header_fields` reads them (folded lines joined), lines ending in CRLF or LF. Repeated
  ``Content-Length`` values (also comma-separated) must agree and are kept once; ``Transfer-Encoding`` must be the
  one value ``chunked`` (any case; kept lower-cased). A body is chunked when Transfer-Encoding is present (also
  beside a Content-Length), else Content-Length long, else empty. Chunk lines end in CRLF, sizes are 1-20 hex
  digits, extensions are dropped, trailers are read (and checked as headers are) and dropped.
- **Refused** (``RemoteProtocolError`` with h11's ``error_status_hint``): a malformed request line or header line,
  a blank line where the request line should be, a first byte below ``!`` while a head is incomplete, a missing
  (HTTP/1.1) or repeated Host (400); a bad or conflicting Content-Length (400); a Transfer-Encoding other than
  ``chunked``, or repeated (501); bytes beyond ``max_incomplete_event_size`` while an event is incomplete (431; a
  head that arrives whole is read whatever its size, as h11 does); a malformed chunk (400); the end of the
  connection inside a request (400); bytes after a request that disabled keep-alive (400). Once refused, every
  later :meth:`ServerConnection.next_event` raises again (400).
- **Keep-alive** ends with ``Connection: close`` from either side or a request below HTTP/1.1. A request with
  ``Upgrade`` or the method ``CONNECT`` pauses reading once it is complete (:data:`PAUSED`) until the response
  decides: a ``101`` (to an Upgrade) or a 2xx (to a CONNECT) switches protocols, anything else resumes HTTP/1.1.
  ``Expect: 100-continue`` (HTTP/1.1 and later) sets :attr:`ServerConnection.they_are_waiting_for_100_continue`
  until a response or any of the body is seen.
- **Responses sent** (:meth:`ServerConnection.informational`, :meth:`~ServerConnection.response`): header names
  must be tokens and values free of NUL, CR, LF, VT, FF and surrounding spaces (``LocalProtocolError`` before
  anything changes, as building an ``h11.Response`` refuses them); the head is written as h11 writes it (any Host
  line first, no reason phrase unless given). The body is framed as h11 frames it: none for ``HEAD``, ``204``,
  ``304`` and a 2xx to ``CONNECT``; else a Transfer-Encoding (becoming ``Transfer-Encoding: chunked``, last, with
  any Content-Length dropped) or a Content-Length; else chunked for an HTTP/1.1 peer, or delimited by closing the
  connection for an older one (Transfer-Encoding and Content-Length dropped, ``Connection: close`` added). When
  keep-alive is off the Connection fields are rewritten with ``close`` (one field a token, sorted, last). A body
  past or short of its Content-Length, and any call out of turn, raise ``LocalProtocolError`` and leave the
  connection unusable for sending (as h11's ``ERROR`` state).

Events from :meth:`ServerConnection.next_event`: a :class:`Request` (the head), ``bytes`` (a piece of the body,
never empty), :data:`END` (the body is complete; a request without a body gives it at once), :data:`PAUSED`
(nothing is read until :meth:`ServerConnection.start_next_cycle`, or ever after a protocol switch),
:data:`CLOSED` (the peer closed its side between requests), or :data:`NEED_DATA` (feed
:meth:`ServerConnection.receive_data` and ask again).
"""

from __future__ import annotations

import re
from typing import Any

from serving.http1_wire import (
    END, NEED_DATA, TOKEN, LocalProtocolError, ProtocolError, RemoteProtocolError, Marker, content_length, head_end,
    header_block, take,
)

__all__ = [
    "CLOSED", "END", "NEED_DATA", "PAUSED", "LocalProtocolError", "ProtocolError", "RemoteProtocolError", "Request",
    "ServerConnection",
]

#: nothing is read now: the request is complete and the next cycle has not started, or the protocol switched
PAUSED: Any = Marker("PAUSED")
#: the peer closed its side (between requests)
CLOSED: Any = Marker("CLOSED")


class Request:
    """A request's head: method and target as sent, fields (names lower-cased, and as sent), version, and the
    head's size in bytes as received (request line, field lines, line endings, the empty line)."""

    __slots__ = ("method", "target", "headers", "raw_headers", "http_version", "head_size")

    def __init__(self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]],
                 raw_headers: list[tuple[bytes, bytes]], http_version: bytes, head_size: int = 0) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.raw_headers = raw_headers
        self.http_version = http_version
        self.head_size = head_size

    def __repr__(self) -> str:
        return f"Request(method={self.method!r}, target={self.target!r}, http_version={self.http_version!r})"


_REQUEST_LINE = re.compile(rb"([-!#$%&'*+.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) HTTP/([0-9]\.[0-9])")
_CHUNK_HEADER = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;.*)?[ \t]*\r\n")
#: a header value h11 will send: visible bytes (NUL and ``\s`` excepted) with single runs of spaces and tabs between
_FIELD_VALUE = re.compile(rb"(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?")
_NAMES = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+(?:\n[-!#$%&'*+.^_`|~0-9A-Za-z]+)*")
_VALUES = re.compile(rb"(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?(?:\n(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?)*")
_FRAMING_NAMES = (b"content-length", b"transfer-encoding")
#: the names whose fields change framing or the connection (looked for in every header)
_SPECIAL = frozenset((b"content-length", b"transfer-encoding", b"host", b"connection", b"upgrade", b"expect"))

# States, h11's (one numbering for both roles; ours never is CLOSED: this codec sends no ConnectionClosed).
_IDLE, _SEND_RESPONSE, _SEND_BODY, _DONE, _MUST_CLOSE, _CLOSED, _MIGHT_SWITCH, _SWITCHED, _ERROR = range(9)
_STATE_NAMES = ("IDLE", "SEND_RESPONSE", "SEND_BODY", "DONE", "MUST_CLOSE", "CLOSED", "MIGHT_SWITCH_PROTOCOL",
                "SWITCHED_PROTOCOL", "ERROR")
# Response body framings.
_LENGTH, _CHUNKED, _UNTIL_CLOSE = range(3)


def _out_of_turn(event: str, state: int) -> LocalProtocolError:
    return LocalProtocolError(f"can't handle event type {event} when role=SERVER and state={_STATE_NAMES[state]}")


def _comma_tokens(value: bytes) -> list[bytes]:
    """h11's ``get_comma_header`` of one value: lower-cased, split at commas, stripped, empty ones dropped."""
    return [token for token in (part.strip() for part in value.lower().split(b",")) if token]


def _transfer_coding(value: bytes, coded: bool, error: type[ProtocolError]) -> bytes:
    """One Transfer-Encoding field's value as h11 keeps it (lower-cased): only ``chunked``, and only once (501)."""
    if coded:
        raise error("multiple Transfer-Encoding headers", 501)
    value = value.lower()
    if value != b"chunked":
        raise error("Only Transfer-Encoding: chunked is supported", 501)
    return value


def _normalized(fields: list[tuple[bytes, bytes]], error: type[ProtocolError],
                check: bool = False) -> list[tuple[bytes, bytes, bytes]]:
    """(name as sent, lower-cased name, value) of ``fields`` as h11's ``normalize_and_validate`` keeps them:
    Content-Length once (repeats must agree), Transfer-Encoding only ``chunked`` (lower-cased); with ``check``, each
    name and value checked first (as h11 checks headers it is given, one field after the other)."""
    if check and fields:
        # Every name and value at once (two regular expressions); only a failure checks them one by one, so that
        # the first bad field raises first, as in h11.
        names = b"\n".join([name for name, _ in fields])
        values = b"\n".join([value for _, value in fields])
        check = not (_NAMES.fullmatch(names) and _VALUES.fullmatch(values))
    out = []
    length = None
    coded = False
    for raw_name, value in fields:
        if check:
            if not TOKEN.fullmatch(raw_name):
                raise error(f"Illegal header name {raw_name!r}")
            if not _FIELD_VALUE.fullmatch(value):
                raise error(f"Illegal header value {value!r}")
        name = raw_name.lower()
        if name == b"content-length":
            value = content_length(value, error)
            if length is not None:
                if length != value:
                    raise error("conflicting Content-Length headers")
                continue
            length = value
        elif name == b"transfer-encoding":
            value = _transfer_coding(value, coded, error)
            coded = True
        out.append((raw_name, name, value))
    return out


def _head(status_code: int, reason: bytes, fields: list[tuple[bytes, bytes, bytes]]) -> bytes:
    """A response head as h11 writes it: any Host line first."""
    if any(name == b"host" for _, name, _ in fields):
        fields = [field for field in fields if field[1] == b"host"] + [field for field in fields if field[1] != b"host"]
    lines = [b"HTTP/1.1 %d %s\r\n" % (status_code, reason)]
    lines += [b"%s: %s\r\n" % (raw, value) for raw, _, value in fields]
    lines.append(b"\r\n")
    return b"".join(lines)


class ServerConnection:
    """One connection's HTTP/1.1 state, as ``h11.Connection(h11.SERVER)``: requests parsed from the bytes fed in
    (:meth:`receive_data`, ``b""`` for the end of the connection) by :meth:`next_event`, responses written by
    :meth:`informational`, :meth:`response`, :meth:`data` and :meth:`end`."""

    __slots__ = (
        "_max_incomplete", "_buffer", "_eof", "_scanned", "_their", "_our", "_keep_alive", "_upgrade_pending",
        "_connect_pending", "_method", "_their_version", "_waiting_100",
        "_chunked", "_remaining", "_discard", "_trailers", "_framing", "_to_send",
    )

    def __init__(self, max_incomplete_event_size: int = 16 * 1024) -> None:
        self._max_incomplete = max_incomplete_event_size
        self._buffer = bytearray()
        self._eof = False
        # How far a head's end was looked for in vain (h11's: the last two bytes are searched again).
        self._scanned = 0
        self._their = _IDLE
        self._our = _IDLE
        self._keep_alive = True
        self._upgrade_pending = False
        self._connect_pending = False
        self._method: bytes | None = None
        self._their_version: bytes | None = None  # kept across cycles, as h11 keeps it
        self._waiting_100 = False
        # The request body's reader: chunked or not, bytes left (of the body or of the chunk), the chunk's CRLF
        # still to match, reading trailers.
        self._chunked = False
        self._remaining = 0
        self._discard = b""
        self._trailers = False
        # The response body's writer: its framing, and bytes left to send under a Content-Length.
        self._framing = _LENGTH
        self._to_send = 0

    # -- state ------------------------------------------------------------------------------------------------------

    @property
    def they_are_waiting_for_100_continue(self) -> bool:
        return self._waiting_100

    @property
    def trailing_data(self) -> tuple[bytes, bool]:
        """The bytes received and not read yet, and whether the peer closed its side."""
        return bytes(self._buffer), self._eof

    @property
    def can_respond(self) -> bool:
        """A response head may still be sent (h11's our_state IDLE or SEND_RESPONSE)."""
        return self._our <= _SEND_RESPONSE

    @property
    def our_done(self) -> bool:
        return self._our == _DONE

    @property
    def their_done(self) -> bool:
        return self._their == _DONE

    @property
    def their_error(self) -> bool:
        return self._their == _ERROR

    @property
    def their_idle(self) -> bool:
        """No request head of this cycle is complete yet (h11's their_state IDLE): the protocol's head timer runs."""
        return self._their == _IDLE

    def _settle(self) -> None:
        """h11's state-triggered transitions, to their fixed point."""
        their, our = self._their, self._our
        while True:
            start = (their, our)
            pending = self._upgrade_pending or self._connect_pending
            if pending and their == _DONE:
                their = _MIGHT_SWITCH
            if not pending and their == _MIGHT_SWITCH:
                their = _DONE
            if not self._keep_alive:
                if their == _DONE:
                    their = _MUST_CLOSE
                if our == _DONE:
                    our = _MUST_CLOSE
            if their == _MIGHT_SWITCH and our == _SWITCHED:
                their = _SWITCHED
            elif their == _CLOSED and (our == _DONE or our == _IDLE):
                our = _MUST_CLOSE
            elif their == _ERROR and our == _DONE:
                our = _MUST_CLOSE
            elif their == _DONE and our == _ERROR:
                their = _MUST_CLOSE
            if (their, our) == start:
                self._their, self._our = their, our
                return

    def start_next_cycle(self) -> None:
        """Ready for the next request: only when both sides are done (else ``LocalProtocolError``, nothing changed)."""
        if self._their != _DONE or self._our != _DONE:
            raise LocalProtocolError(f"not in a reusable state: their {_STATE_NAMES[self._their]}, "
                                     f"our {_STATE_NAMES[self._our]}")
        self._their = self._our = _IDLE
        self._method = None

    # -- their side -------------------------------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Bytes from the peer; ``b""``: the peer closed its side (RuntimeError for bytes after that, as h11)."""
        if data:
            if self._eof:
                raise RuntimeError("received close, then received more data?")
            self._buffer += data
        else:
            self._eof = True

    def next_event(self) -> Any:
        """The next event (see the module docstring)."""
        their = self._their
        if their == _ERROR:
            raise RemoteProtocolError("Can't receive data when peer state is ERROR")
        try:
            if their == _SEND_BODY:
                event = self._trailer_or_chunk() if self._chunked else self._counted()
            elif their == _IDLE:
                event = self._request()
            elif their == _MIGHT_SWITCH or their == _SWITCHED or (their == _DONE and self._buffer):
                return PAUSED
            elif self._buffer:  # DONE, MUST_CLOSE, CLOSED: nothing more may come
                raise RemoteProtocolError("Got data when expecting EOF")
            else:
                event = None
            if event is None:
                buffer = self._buffer
                if self._eof and not buffer:
                    if their == _SEND_BODY:
                        raise RemoteProtocolError("peer closed connection without sending complete message body")
                    self._their = _CLOSED
                    self._settle()
                    return CLOSED
                if len(buffer) > self._max_incomplete:
                    raise RemoteProtocolError("Receive buffer too long", 431)
                if self._eof:
                    raise RemoteProtocolError("peer unexpectedly closed connection")
                return NEED_DATA
            return event
        except BaseException:
            self._their = _ERROR
            self._settle()
            raise

    def _request(self) -> Request | None:
        buffer = self._buffer
        if buffer[:1] == b"\n" or buffer[:2] == b"\r\n":
            del buffer[:1 if buffer[:1] == b"\n" else 2]
            self._scanned = 0
            raise RemoteProtocolError("no request line received")
        found, self._scanned = head_end(buffer, self._scanned)
        if found is None:
            if buffer and buffer[0] < 0x21:
                raise RemoteProtocolError("illegal request line")
            return None
        # The request line, and the field lines with their line endings (one CR before each LF is dropped: h11).
        end = found.start() + 1
        first = buffer.find(b"\n")
        request_line = bytes(buffer[:first - 1 if first and buffer[first - 1] == 13 else first])
        block = bytes(buffer[first + 1:end])
        head_size = found.end()
        del buffer[:head_size]
        match = _REQUEST_LINE.fullmatch(request_line)
        if match is None:
            raise RemoteProtocolError(f"illegal request line: {request_line[:64]!r}")
        method, target, version = match.groups()
        headers = []
        raw_headers = []
        length = None
        coded = False
        hosts = 0
        connection = upgrade = expect = None
        for raw_name, name, value in _normalized(header_block(block), RemoteProtocolError):
            if name in _SPECIAL:
                if name == b"content-length":
                    length = value
                elif name == b"transfer-encoding":
                    coded = True
                elif name == b"host":
                    hosts += 1
                elif name == b"connection":
                    connection = _comma_tokens(value) if connection is None else connection + _comma_tokens(value)
                elif name == b"upgrade":
                    upgrade = upgrade or bool(_comma_tokens(value))
                else:
                    expect = _comma_tokens(value) if expect is None else expect + _comma_tokens(value)
            headers.append((name, value))
            raw_headers.append((raw_name, value))
        if hosts == 0 and version == b"1.1":
            raise RemoteProtocolError("Missing mandatory Host: header")
        if hosts > 1:
            raise RemoteProtocolError("Found multiple Host: headers")
        # The event, as h11 processes it: switch proposals, both roles' transitions, then keep-alive and 100-continue.
        if method == b"CONNECT":
            self._connect_pending = True
        if upgrade:
            self._upgrade_pending = True
        self._their = _SEND_BODY
        if self._our != _IDLE:
            raise RemoteProtocolError(f"can't handle event type Request when role=SERVER and state="
                                      f"{_STATE_NAMES[self._our]}")
        self._our = _SEND_RESPONSE
        self._method = method
        self._their_version = version
        if (connection is not None and b"close" in connection) or version < b"1.1":
            self._keep_alive = False
        if expect is not None and version >= b"1.1" and b"100-continue" in expect:
            self._waiting_100 = True
        self._chunked = coded
        self._remaining = 0 if coded or length is None else int(length)
        self._discard = b""
        self._trailers = False
        return Request(method, target, headers, raw_headers, version, head_size)

    def _ended(self) -> Any:
        self._their = _DONE
        self._waiting_100 = False
        self._settle()
        return END

    def _counted(self) -> Any:
        """A Content-Length body (h11's ContentLengthReader)."""
        remaining = self._remaining
        if remaining == 0:
            return self._ended()
        buffer = self._buffer
        if not buffer:
            return None
        piece = take(buffer, remaining)
        self._remaining = remaining - len(piece)
        self._waiting_100 = False
        return piece

    def _trailer_or_chunk(self) -> Any:
        """A chunked body (h11's ChunkedReader, step for step: the same events at the same bytes)."""
        buffer = self._buffer
        if self._trailers:
            if buffer[:1] == b"\n" or buffer[:2] == b"\r\n":
                del buffer[:1 if buffer[:1] == b"\n" else 2]
                self._scanned = 0
                return self._ended()
            found, self._scanned = head_end(buffer, self._scanned)
            if found is None:
                return None
            block = bytes(buffer[:found.start() + 1])
            del buffer[:found.end()]
            _normalized(header_block(block), RemoteProtocolError)  # checked as h11 checks them, then dropped
            return self._ended()
        if self._discard:
            piece = bytes(buffer[:len(self._discard)])
            if not piece:
                return None
            del buffer[:len(piece)]
            if piece != self._discard[:len(piece)]:
                raise RemoteProtocolError(f"malformed chunk footer: {piece!r} (expected {self._discard!r})")
            self._discard = self._discard[len(piece):]
            if self._discard:
                return None
        if self._remaining == 0:
            end = buffer.find(b"\r\n", max(0, self._scanned - 1))
            if end < 0:
                self._scanned = len(buffer)
                return None
            line = bytes(buffer[:end + 2])
            del buffer[:end + 2]
            self._scanned = 0
            match = _CHUNK_HEADER.fullmatch(line)
            if match is None:
                raise RemoteProtocolError(f"illegal chunk header: {line[:64]!r}")
            self._remaining = int(match.group(1), 16)
            if self._remaining == 0:
                self._trailers = True
                return self._trailer_or_chunk()
        if not buffer:
            return None
        remaining = self._remaining
        piece = take(buffer, remaining)
        self._remaining = remaining - len(piece)
        if self._remaining == 0:
            self._discard = b"\r\n"
        self._waiting_100 = False
        return piece

    # -- our side ---------------------------------------------------------------------------------------------------

    def informational(self, status_code: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        """A 1xx response's head (``101`` only to a request with Upgrade: it switches protocols)."""
        fields = _normalized(headers, LocalProtocolError, check=True)
        if not isinstance(status_code, int):
            raise LocalProtocolError("status code must be integer")
        status_code = int(status_code)
        if not 100 <= status_code < 200:
            raise LocalProtocolError(f"InformationalResponse status_code should be in range [100, 200), "
                                     f"not {status_code}")
        if self._our == _ERROR:
            raise LocalProtocolError("Can't send data when our state is ERROR")
        try:
            if status_code == 101:
                if not self._upgrade_pending:
                    raise LocalProtocolError("Received server _SWITCH_UPGRADE event without a pending proposal")
                if self._our != _SEND_RESPONSE:
                    raise _out_of_turn("InformationalResponse", self._our)
                self._our = _SWITCHED
                self._settle()
            elif self._our != _SEND_RESPONSE:
                raise _out_of_turn("InformationalResponse", self._our)
            self._waiting_100 = False
            return _head(status_code, reason=b"", fields=fields)
        except BaseException:
            self._failed()
            raise

    def response(self, status_code: int, headers: list[tuple[bytes, bytes]], reason: bytes = b"") -> bytes:
        """The final response's head, its framing chosen as h11 chooses it (module docstring)."""
        fields = _normalized(headers, LocalProtocolError, check=True)
        if not isinstance(status_code, int):
            raise LocalProtocolError("status code must be integer")
        status_code = int(status_code)
        if not 200 <= status_code < 1000:
            raise LocalProtocolError(f"Response status_code should be in range [200, 1000), not {status_code}")
        if self._our == _ERROR:
            raise LocalProtocolError("Can't send data when our state is ERROR")
        try:
            method = self._method
            bodiless = status_code == 204 or status_code == 304 or (
                method == b"CONNECT" and 200 <= status_code < 300)
            coded = length = False
            connection = None
            for _, name, value in fields:
                if name == b"transfer-encoding":
                    coded = True
                elif name == b"content-length":
                    length = True
                elif name == b"connection":
                    connection = _comma_tokens(value) if connection is None else connection + _comma_tokens(value)
            need_close = False
            if not bodiless and (coded or not length):  # chunked or until-close (for headers, HEAD is as GET)
                fields = [field for field in fields if field[1] not in _FRAMING_NAMES]
                if self._their_version is None or self._their_version < b"1.1":
                    coded = False
                    need_close = method != b"HEAD"
                else:
                    fields.append((b"Transfer-Encoding", b"transfer-encoding", b"chunked"))
                    coded = True
                length = False
            if not self._keep_alive or need_close:
                tokens = set(connection or ())
                tokens.discard(b"keep-alive")
                tokens.add(b"close")
                connection = sorted(tokens)
                fields = [field for field in fields if field[1] != b"connection"]
                fields += [(b"Connection", b"connection", token) for token in connection]
            # The event: a 2xx to CONNECT switches; any other response ends the switch proposals.
            our = self._our
            if self._connect_pending and 200 <= status_code < 300:
                if our != _SEND_RESPONSE:
                    raise _out_of_turn("Response", our)
                self._our = _SWITCHED
            else:
                self._upgrade_pending = self._connect_pending = False
                if our > _SEND_RESPONSE:
                    raise _out_of_turn("Response", our)
                self._our = _SEND_BODY
            if connection is not None and b"close" in connection:
                self._keep_alive = False
            self._settle()
            self._waiting_100 = False
            if bodiless or method == b"HEAD":
                self._framing, self._to_send = _LENGTH, 0
            elif coded:
                self._framing = _CHUNKED
            elif length:
                self._framing = _LENGTH
                self._to_send = int(next(value for _, name, value in fields if name == b"content-length"))
            else:
                self._framing = _UNTIL_CLOSE
            return _head(status_code, reason, fields)
        except BaseException:
            self._failed()
            raise

    def data(self, data: bytes) -> bytes:
        """A piece of the response's body, framed."""
        if self._our == _ERROR:
            raise LocalProtocolError("Can't send data when our state is ERROR")
        if self._our != _SEND_BODY:
            self._failed()
            raise _out_of_turn("Data", self._our)
        framing = self._framing
        if framing == _LENGTH:
            self._to_send -= len(data)
            if self._to_send < 0:
                self._failed()
                raise LocalProtocolError("Too much data for declared Content-Length")
            return bytes(data)
        if framing == _CHUNKED:
            return b"%x\r\n%s\r\n" % (len(data), data) if data else b""
        return bytes(data)

    def end(self) -> bytes:
        """The end of the response's body."""
        our = self._our
        if our == _ERROR:
            raise LocalProtocolError("Can't send data when our state is ERROR")
        if our != _SEND_BODY:
            self._failed()
            raise _out_of_turn("EndOfMessage", our)
        self._our = _DONE
        if not self._keep_alive or self._their >= _CLOSED:
            self._settle()
        framing = self._framing
        if framing == _LENGTH:
            if self._to_send:
                self._failed()
                raise LocalProtocolError("Too little data for declared Content-Length")
            return b""
        return b"0\r\n\r\n" if framing == _CHUNKED else b""

    def _failed(self) -> None:
        self._our = _ERROR
        self._settle()
