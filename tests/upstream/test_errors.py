"""Error translation: socket, protocol and timeout errors and error bodies become the project's errors; trio.Cancelled
never does. (Each translation is also provoked over real sockets in ``test_httplib.py``.)"""

from __future__ import annotations

import socket

import pytest
import trio

from proxy.upstream import _http_connection, _httplib, http1
from proxy.upstream._http_connection import translate
from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import (
    UpstreamHTTPError,
    UpstreamNotConfigured,
    UpstreamProtocolError,
    UpstreamStreamCut,
    UpstreamTimeout,
    UpstreamUnavailable,
    error_from_response,
)
from proxy.upstream.events import Partial


def closed_port_url() -> str:
    """The URL of a local port nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def test_connection_refused_is_unavailable_for_every_call():
    url = closed_port_url()
    async with SGLangClient.single_server(url) as client:
        with pytest.raises(UpstreamUnavailable) as info:
            async with client.generate_stream([1, 2, 3]):
                pass  # pragma: no cover
        assert info.value.url == url + "/generate"
        assert isinstance(info.value.__cause__, OSError) and "refused" in str(info.value)
        with pytest.raises(UpstreamUnavailable):
            await client.generate([1, 2, 3])
        with pytest.raises(UpstreamUnavailable):
            await client.model_info()
        with pytest.raises(UpstreamUnavailable):
            await client.abort_all()
        assert client.statistics().open_streams == 0
        assert client.pool_statistics().open_connections == 0


async def test_worker_only_calls_without_workers():
    async with SGLangClient(closed_port_url()) as client:
        assert await client.abort("0" * 32) is False  # nothing sent: the caller closes the stream instead
        assert await client.abort_all() is False
        with pytest.raises(UpstreamNotConfigured):
            await client.pause_generation("retract")
        with pytest.raises(UpstreamNotConfigured):
            await client.continue_generation()
        with pytest.raises(ValueError):
            await client.pause_generation("sideways")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            await client.abort("abc")  # prefix-unsafe rid
        with pytest.raises(ValueError):
            client.generate_stream([1], rid="req-1")


PARTIAL = Partial("r", (1, 2))


@pytest.mark.parametrize("phase", ["connect", "write", "pool", "read"])
def test_timeouts_keep_their_phase(phase):
    error = translate(trio.TooSlowError(), url="http://x/generate", phase=phase)
    assert isinstance(error, UpstreamTimeout) and error.phase == phase and error.url == "http://x/generate"
    during_stream = translate(trio.TooSlowError(), url="http://x", phase="read", partial=PARTIAL)
    assert isinstance(during_stream, UpstreamTimeout) and during_stream.partial == PARTIAL


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionResetError(104, "Connection reset by peer"),
        BrokenPipeError(32, "Broken pipe"),
        trio.BrokenResourceError("reset"),
        trio.ClosedResourceError("closed under us"),
    ],
)
def test_lost_connection_is_a_stream_cut_only_inside_a_stream(exc):
    cut = translate(exc, url="http://x", phase="read", partial=PARTIAL)
    assert isinstance(cut, UpstreamStreamCut) and cut.partial.output_ids == (1, 2)
    for phase in ("write", "read"):  # before the response, or during a non-streaming body
        lost = translate(exc, url="http://x", phase=phase)
        assert type(lost) is UpstreamUnavailable and lost.partial is None


def test_eof_inside_a_message_is_a_lost_connection_not_a_protocol_error():
    """The codec reports a body cut short by EOF as a RemoteProtocolError; after EOF it means the connection was lost."""
    incomplete = http1.RemoteProtocolError("peer closed connection without sending complete message body")
    cut = translate(incomplete, url="http://x", phase="read", partial=PARTIAL, eof=True)
    assert isinstance(cut, UpstreamStreamCut) and cut.partial == PARTIAL
    assert type(translate(incomplete, url="http://x", phase="read", eof=True)) is UpstreamUnavailable


def test_protocol_violations_are_protocol_errors():
    garbage = http1.RemoteProtocolError("illegal status line")
    assert type(translate(garbage, url="http://x", phase="read")) is UpstreamProtocolError
    in_stream = translate(garbage, url="http://x", phase="read", partial=PARTIAL)
    assert type(in_stream) is UpstreamProtocolError and in_stream.partial == PARTIAL
    bad_header = http1.LocalProtocolError("illegal header value")
    assert type(translate(bad_header, url="http://x", phase="write")) is UpstreamProtocolError


def test_connect_failures_are_unavailable_with_the_reason():
    group = ExceptionGroup("attempts", [ConnectionRefusedError(111, "Connection refused")])
    exc = OSError("all attempts to connect to 127.0.0.1:1 failed")
    exc.__cause__ = group
    error = translate(exc, url="http://127.0.0.1:1", phase="connect")
    assert type(error) is UpstreamUnavailable and "Connection refused" in str(error)
    assert type(translate(socket.gaierror(-2, "Name or service not known"), url="http://x", phase="connect")) \
        is UpstreamUnavailable


async def test_cancelled_and_other_exceptions_pass_through_untouched():
    """The HTTP layer catches only its I/O errors: cancellation (and anything else) is never translated."""
    assert not issubclass(trio.Cancelled, _http_connection.IO_ERRORS)
    assert not issubclass(KeyError, _http_connection.IO_ERRORS) and not issubclass(ValueError, _http_connection.IO_ERRORS)
    async with SGLangClient.single_server(closed_port_url()) as client:
        with trio.CancelScope() as scope:
            scope.cancel()
            await client.model_info()
        assert scope.cancelled_caught
        assert client.pool_statistics().open_connections == 0
        with pytest.raises(ValueError):  # NaN is not JSON: refused before anything is sent, and not translated
            await client.generate([1], {"temperature": float("nan")})


def test_error_bodies_are_parsed():
    sglang = error_from_response(400, b'{"error": {"message": "Duplicate request ID detected", "type": "BadRequest"}}')
    assert (sglang.status, sglang.message, sglang.err_type) == (400, "Duplicate request ID detected", "BadRequest")
    assert error_from_response(503, b'{"detail": "overloaded"}').message == "overloaded"
    assert error_from_response(400, b'{"success": false, "message": "no such path"}').message == "no such path"
    assert error_from_response(502, b"Bad gateway\n").message == "Bad gateway"
    assert error_from_response(500, b"").message == "HTTP 500 with an empty body"
    assert isinstance(sglang, UpstreamHTTPError) and "HTTP 400" in str(sglang)


def test_sockets_and_the_http_codec_are_used_in_the_http_layer_only():
    """Only the HTTP layer (``_httplib``, the pool, and ``_http_connection``) touches sockets, the HTTP/1.1
    codec (``http1``) or an HTTP library; the rest of the client speaks its API."""
    import pathlib
    import re

    package = pathlib.Path(_httplib.__file__).parent
    io = re.compile(r"^\s*(import|from) (h11|httpx|httpx2|httpcore|socket|ssl)\b|^\s*from proxy\.upstream import .*\bhttp1\b|trio\.socket|open_tcp_stream|SocketStream")
    users = sorted(
        p.name for p in package.glob("*.py") if any(io.search(line) for line in p.read_text().splitlines())
    )
    assert users == ["_http_connection.py", "_httplib.py"]
