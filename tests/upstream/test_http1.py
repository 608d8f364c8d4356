"""The upstream client's HTTP/1.1 codec (``proxy/upstream/http1.py``): every framing, split at any byte, reads the
same response h11 (hypercorn's parser, the codec this one replaced) reads from the same bytes; what it refuses it
refuses with a RemoteProtocolError; requests it will not send raise LocalProtocolError."""

from __future__ import annotations

from typing import Any

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.upstream import http1


def read_all(data: bytes, cuts: list[int] = (), *, head_only: bool = False,
             eof: bool = False) -> tuple[Any, bytes, Any]:
    """(head, body, the connection) of ``data`` fed in pieces cut at ``cuts``; ``eof`` after the last piece."""
    conn = http1.ClientConnection()
    conn.sent_request(head_only=head_only)
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(data))), len(data)]
    pieces = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    head, body = None, bytearray()
    while True:
        event = conn.next_event()
        if event is http1.NEED_DATA:
            if pieces:
                conn.receive_data(pieces.pop(0))
                continue
            if eof:
                eof = False
                conn.receive_data(b"")
                continue
            raise AssertionError("the codec needs more data than the response holds")
        if isinstance(event, http1.Response):
            head = event
        elif type(event) is bytes:
            body += event
        elif event is http1.END:
            return head, bytes(body), conn


def h11_read(data: bytes, *, method: str = "POST", eof: bool = False) -> tuple[Any, bytes, bool]:
    """What h11 reads from the same bytes: (head, body, reusable)."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/generate", headers=[("host", "x"), ("content-length", "0")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    if eof:
        conn.receive_data(b"")
    head, body = None, bytearray()
    while True:
        event = conn.next_event()
        if type(event) is h11.Response:
            head = event
        elif type(event) is h11.Data:
            body += event.data
        elif type(event) is h11.EndOfMessage:
            reusable = conn.our_state is h11.DONE and conn.their_state is h11.DONE
            return head, bytes(body), reusable
        elif event is h11.NEED_DATA:
            raise AssertionError("h11 needs more data")


# -- responses generated in every framing -------------------------------------------------------------------------

header_names = st.sampled_from([b"content-type", b"server", b"x-request-id", b"date", b"X-Mixed-Case"])
header_values = st.binary(min_size=0, max_size=20).map(lambda v: bytes(b for b in v if 0x21 <= b <= 0x7E))
bodies = st.binary(max_size=300)


@st.composite
def responses(draw: Any) -> tuple[bytes, bytes, bool]:
    """(the response's bytes, its body, whether it needs the end of the connection to end)."""
    status = draw(st.sampled_from([200, 201, 400, 404, 500, 503]))
    fields = draw(st.lists(st.tuples(header_names, header_values), max_size=4))
    body = draw(bodies)
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    close = draw(st.booleans())
    interim = draw(st.booleans())
    head = b"HTTP/1.1 100 Continue\r\n\r\n" if interim else b""
    head += b"HTTP/1.1 %d Whatever Reason\r\n" % status
    head += b"".join(b"%s: %s\r\n" % field for field in fields)
    if close:
        head += b"Connection: close\r\n"
    if framing == "length":
        return head + b"Content-Length: %d\r\n\r\n" % len(body) + body, body, False
    if framing == "close":
        return head + b"\r\n" + body, body, True
    sizes = draw(st.lists(st.integers(1, 64), max_size=8))
    chunks, at = [], 0
    for size in sizes:
        if at >= len(body):
            break
        chunk = body[at:at + size]
        at += len(chunk)
        extension = b";name=value" if draw(st.booleans()) else b""
        chunks.append(b"%x%s\r\n%s\r\n" % (len(chunk), extension, chunk))
    if at < len(body):
        chunks.append(b"%x\r\n%s\r\n" % (len(body) - at, body[at:]))
    trailer = b"x-trailer: yes\r\n" if draw(st.booleans()) else b""
    return head + b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(chunks) + b"0\r\n" + trailer + b"\r\n", body, False


@settings(max_examples=300, deadline=None)
@given(responses(), st.lists(st.integers(0, 2000), max_size=12))
def test_any_split_reads_what_h11_reads(response: tuple[bytes, bytes, bool], cuts: list[int]) -> None:
    data, body, until_close = response
    head, got, conn = read_all(data, cuts, eof=until_close)
    theirs, their_body, their_reusable = h11_read(data, eof=until_close)
    assert got == body == their_body
    assert head.status_code == theirs.status_code and head.reason == theirs.reason
    assert head.headers == [(name, value) for name, value in theirs.headers]
    assert conn.reusable == (not until_close and b"Connection: close" not in data)
    if not until_close:  # (h11 reports a body ended by the end of the connection as DONE too; the pool checks EOF)
        assert their_reusable == conn.reusable


def test_a_reused_connection_reads_the_next_response_and_sees_trailing_bytes():
    conn = http1.ClientConnection()
    for body in (b"one", b"two"):
        conn.sent_request()
        conn.receive_data(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n" + body)
        assert isinstance(conn.next_event(), http1.Response)
        assert conn.next_event() == body and conn.next_event() is http1.END
        assert conn.reusable and not conn.trailing_data
        conn.start_next_cycle()
    conn.sent_request()
    conn.receive_data(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nxjunk")
    assert isinstance(conn.next_event(), http1.Response) and conn.next_event() == b"x"
    assert conn.next_event() is http1.END and conn.trailing_data
    with pytest.raises(http1.LocalProtocolError):
        conn.sent_request()  # the cycle was not restarted


@pytest.mark.parametrize("status, head_only", [(204, False), (304, False), (200, True)])
def test_responses_without_a_body(status: int, head_only: bool):
    head, body, conn = read_all(b"HTTP/1.1 %d X\r\ncontent-length: 10\r\n\r\n" % status, head_only=head_only)
    assert head.status_code == status and body == b"" and conn.reusable


def test_http_1_0_and_connection_close_are_not_reused():
    for data in (b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
                 b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\ncontent-length: 2\r\n\r\nok"):
        head, body, conn = read_all(data)
        assert body == b"ok" and not conn.reusable


def test_blank_lines_before_a_status_line_are_ignored():
    response = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    for data in (b"\r\n" + response, b"\n\r\n" + response):
        for cut in range(1, len(data)):
            head, body, _ = read_all(data, [cut])
            assert (head.status_code, body) == (200, b"ok")


def test_a_head_arriving_byte_by_byte_is_read_whole():
    """The head's end is looked for only in the bytes not searched yet (one search overall): every split of the
    blank line that ends it, bare newlines included, is still found."""
    long_head = b"HTTP/1.1 200 OK\r\nx: " + b"a" * 300 + b"\r\ncontent-length: 2\r\n\r\nok"
    for data in (b"HTTP/1.1 100 Continue\r\n\r\n" + long_head, b"HTTP/1.1 200 OK\nx: y\ncontent-length: 2\n\nok",
                 b"HTTP/1.1 200 OK\r\nx: y\ncontent-length: 2\n\r\nok"):
        head, body, _ = read_all(data, list(range(1, len(data))))
        assert (head.status_code, body) == (200, b"ok")
        assert dict(head.headers)[b"content-length"] == b"2"


def test_bare_newlines_are_read_as_h11_reads_them():
    data = b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok"
    head, body, _ = read_all(data)
    assert (head.status_code, body) == (200, b"ok") == (h11_read(data)[0].status_code, h11_read(data)[1])


@pytest.mark.parametrize("data", [
    b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    b"HTTP/2 200\r\n\r\n",
    b"HTTP/1.1 20 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nbad name: x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nokay\r\n0\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
])
def test_malformed_responses_are_refused(data: bytes):
    with pytest.raises(http1.RemoteProtocolError):
        read_all(data)
    with pytest.raises(h11.RemoteProtocolError):  # refused by h11 too: nothing h11 read is refused here
        h11_read(data)


@pytest.mark.parametrize("data", [
    b"HTTP/1.1 200 OK\r\nx: " + b"a" * http1.MAX_HEAD_BYTES + b"\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n" + b"x" * (http1.MAX_HEAD_BYTES + 1),
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"1" * (http1.MAX_LINE_BYTES + 1),
])
def test_heads_and_chunk_lines_past_the_bounds_are_refused(data: bytes):
    with pytest.raises(http1.RemoteProtocolError):
        read_all(data)


def test_a_folded_header_line_is_unfolded_as_rfc_9112_asks_and_h11_does():
    data = b"HTTP/1.1 200 OK\r\nx-long: a\r\n  folded\r\n\tand more\r\ncontent-length: 0\r\n\r\n"
    head, _, _ = read_all(data)
    assert dict(head.headers)[b"x-long"] == b"a folded and more" == dict(h11_read(data)[0].headers)[b"x-long"]


@pytest.mark.parametrize("data", [
    b"",
    b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nok",
    b"HTTP/1.1 200 OK\r\ncontent-le",
])
def test_the_end_of_the_connection_inside_a_response_is_a_remote_protocol_error(data: bytes):
    with pytest.raises(http1.RemoteProtocolError):
        read_all(data, eof=True)


@pytest.mark.parametrize("fields", [
    [(b"x-bad", b"a\r\nInjected: yes")], [(b"x-bad", b"a\nb")], [(b"x-bad", b"a\x00")], [(b"bad name", b"x")],
    [(b"", b"x")],
])
def test_requests_with_illegal_fields_are_not_sent(fields: list[tuple[bytes, bytes]]):
    with pytest.raises(http1.LocalProtocolError):
        http1.request_head(b"POST", b"/generate", fields)


def test_a_request_head_is_what_h11_would_send():
    fields = [(b"host", b"127.0.0.1:30000"), (b"content-type", b"application/json"), (b"content-length", b"2")]
    ours = http1.request_head(b"POST", b"/generate", fields)
    theirs = h11.Connection(h11.CLIENT).send(h11.Request(method="POST", target="/generate", headers=fields))
    assert ours == theirs
