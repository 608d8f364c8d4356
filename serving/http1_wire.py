"""What both HTTP/1.1 codecs of the project read the same way: the upstream client's (``proxy/upstream/http1.py``)
and the server's (``serving/http1_server.py``).

- **Errors**: :class:`LocalProtocolError` (something this side will not send, or a call out of turn) and
  :class:`RemoteProtocolError` (something the peer sent that cannot be read), both :class:`ProtocolError`, with
  h11's ``error_status_hint`` (the status a server would answer: 400 unless said otherwise).
- **Markers** :data:`NEED_DATA` and :data:`END`.
- **Header field lines** (:func:`header_fields`), as h11 reads them: ``name ":" OWS value OWS``, the name a token,
  the value without NUL, CR, LF, VT or FF (other control bytes and obs-text pass, as in h11); a line starting with a
  space or tab is folded onto the previous one (RFC 9112 section 5.2: the previous line as sent, a space, the
  folded line without its leading whitespace), and refused if there is no previous one.
- **A head's end** searched across the pieces it arrives in (:func:`head_end`), **a counted body's piece**
  (:func:`take`) and **a Content-Length value** as h11 reads it (:func:`content_length`).

It imports nothing of the project: ``serving`` stands below ``proxy``.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "END", "NEED_DATA", "TOKEN", "LocalProtocolError", "Marker", "ProtocolError", "RemoteProtocolError",
    "content_length", "head_end", "header_block", "header_fields", "take",
]


class ProtocolError(Exception):
    """Base of both protocol errors; ``error_status_hint``: the status a server would answer (h11's hints)."""

    def __init__(self, message: str, error_status_hint: int = 400) -> None:
        super().__init__(message)
        self.error_status_hint = error_status_hint


class LocalProtocolError(ProtocolError):
    """Something this side will not send (a header name that is not a token, a value with CR, LF or NUL, a body past
    its Content-Length), or a call out of turn."""


class RemoteProtocolError(ProtocolError):
    """Something the peer sent that this side cannot read."""


class Marker:
    """A named event marker (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: the message's body is complete
END: Any = Marker("END")
#: nothing more can be parsed before more bytes arrive
NEED_DATA: Any = Marker("NEED_DATA")

#: the end of a head: an empty line (LF or CRLF) after the last line
_HEAD_END = re.compile(rb"\n\r?\n")
_DIGITS = re.compile(rb"[0-9]+")
#: RFC 9110 token (a method, a header name)
TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
#: bytes no received header value may hold once its surrounding spaces and tabs are stripped (h11's field-vchar is
#: anything but NUL and ``\s``; between them only spaces and tabs)
_BAD_IN_VALUE = re.compile(rb"[\x00\n\r\x0b\x0c]")


_VALUE_BYTE = rb"[^\x00\n\r\x0b\x0c]"
_EDGE_BYTE = rb"[^\x00\n\r\x0b\x0c \t]"
#: one unfolded, valid field line with its line ending: the name, then the value without surrounding spaces or tabs
_FIELD_LINE = re.compile(rb"([-!#$%&'*+.^_`|~0-9A-Za-z]+):[ \t]*((?:" + _EDGE_BYTE + rb"(?:" + _VALUE_BYTE + rb"*"
                         + _EDGE_BYTE + rb")?)?)[ \t]*\r?\n")
_FIELD_BLOCK = re.compile(rb"(?:[-!#$%&'*+.^_`|~0-9A-Za-z]+:[ \t]*(?:" + _EDGE_BYTE + rb"(?:" + _VALUE_BYTE + rb"*"
                          + _EDGE_BYTE + rb")?)?[ \t]*\r?\n)*")


def head_end(buffer: bytearray, scanned: int) -> tuple[Any, int]:
    """Where the head at the start of ``buffer`` ends (the match of its empty line, or None), and how much of the
    buffer to skip next time: a head arriving in many pieces is searched once overall (a trickling peer would make a
    search from the start quadratic); the next search steps back 2 bytes, which a line end may straddle."""
    found = _HEAD_END.search(buffer, max(0, scanned - 2))
    return found, 0 if found is not None else len(buffer)


def take(buffer: bytearray, limit: int) -> bytes:
    """Up to ``limit`` bytes from the start of ``buffer``, removed from it (a piece of a counted body)."""
    if len(buffer) <= limit:
        piece = bytes(buffer)
        buffer.clear()
    else:
        piece = bytes(buffer[:limit])
        del buffer[:limit]
    return piece


def content_length(value: bytes, error: type[ProtocolError]) -> bytes:
    """One Content-Length field's value as h11 keeps it: comma-separated repeats must agree; 1-20 digits (else
    ``error``, 400)."""
    lengths = {part.strip() for part in value.split(b",")}
    if len(lengths) != 1:
        raise error("conflicting Content-Length headers")
    value = lengths.pop()
    if not _DIGITS.fullmatch(value) or len(value) > 20:
        raise error("bad Content-Length")
    return value


def header_block(block: bytes) -> list[tuple[bytes, bytes]]:
    """:func:`header_fields` of ``block``, the field lines each with its line ending (``\n`` or ``\r\n``): two
    regular expressions over the whole block when every line is valid and none is folded (the usual head)."""
    if _FIELD_BLOCK.fullmatch(block):
        return _FIELD_LINE.findall(block)
    lines = block.split(b"\n")
    lines.pop()
    return header_fields([line[:-1] if line.endswith(b"\r") else line for line in lines])


def header_fields(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    """(name as sent, value) of each header field line (line endings removed), folded lines unfolded; a line h11
    would refuse raises ``RemoteProtocolError`` (400)."""
    fields: list[tuple[bytes, bytes]] = []
    last = None
    for line in lines:
        first = line[:1]
        if first == b" " or first == b"\t":  # obs-fold: h11 joins it to the previous line as sent, then reads that
            if last is None:
                raise RemoteProtocolError("continuation line at start of headers")
            last = last + b" " + line.lstrip(b" \t")
            fields[-1] = _field(last)
            continue
        last = line
        fields.append(_field(line))
    return fields


def _field(line: bytes) -> tuple[bytes, bytes]:
    name, colon, value = line.partition(b":")
    if not colon or not TOKEN.fullmatch(name):
        raise RemoteProtocolError(f"illegal header line {line[:64]!r}")
    value = value.strip(b" \t")
    if _BAD_IN_VALUE.search(value):
        raise RemoteProtocolError(f"illegal header value in {line[:64]!r}")
    return name, value
