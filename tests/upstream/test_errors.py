"""Error translation: httpx exceptions and error bodies become the project's errors; trio.Cancelled never does."""

from __future__ import annotations

import socket

import pytest
import trio

from proxy.upstream import _httplib
from proxy.upstream._httplib import HTTPErrorTranslator, httpx
from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import (
    UpstreamError,
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
        assert isinstance(info.value.__cause__, httpx.ConnectError)
        with pytest.raises(UpstreamUnavailable):
            await client.generate([1, 2, 3])
        with pytest.raises(UpstreamUnavailable):
            await client.model_info()
        with pytest.raises(UpstreamUnavailable):
            await client.abort_all()
        assert client.statistics().open_streams == 0


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


def translate(exc: Exception, *, streaming: bool = False) -> UpstreamError:
    partial = (lambda: Partial("r", (1, 2))) if streaming else None
    with pytest.raises(UpstreamError) as info:
        with HTTPErrorTranslator("http://x/generate", partial=partial):
            raise exc
    assert info.value.__cause__ is exc
    return info.value


@pytest.mark.parametrize(
    ("exc", "phase"),
    [
        (httpx.ConnectTimeout("t"), "connect"),
        (httpx.ReadTimeout("t"), "read"),
        (httpx.WriteTimeout("t"), "write"),
        (httpx.PoolTimeout("t"), "pool"),
    ],
)
def test_timeouts_keep_their_phase(exc, phase):
    error = translate(exc)
    assert isinstance(error, UpstreamTimeout) and error.phase == phase


def test_lost_connection_is_a_stream_cut_only_inside_a_stream():
    for exc in (httpx.ReadError("reset"), httpx.RemoteProtocolError("peer closed")):
        cut = translate(exc, streaming=True)
        assert isinstance(cut, UpstreamStreamCut) and cut.partial.output_ids == (1, 2)
        assert isinstance(translate(exc), UpstreamUnavailable)
    assert isinstance(translate(httpx.DecodingError("gzip")), UpstreamProtocolError)
    assert isinstance(translate(httpx.UnsupportedProtocol("ftp")), UpstreamUnavailable)


async def test_cancelled_and_other_exceptions_pass_through_untouched():
    with trio.CancelScope() as scope:
        with HTTPErrorTranslator("http://x"):
            scope.cancel()
            await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    with pytest.raises(KeyError):
        with HTTPErrorTranslator("http://x"):
            raise KeyError("mine")


def test_error_bodies_are_parsed():
    sglang = error_from_response(400, b'{"error": {"message": "Duplicate request ID detected", "type": "BadRequest"}}')
    assert (sglang.status, sglang.message, sglang.err_type) == (400, "Duplicate request ID detected", "BadRequest")
    assert error_from_response(503, b'{"detail": "overloaded"}').message == "overloaded"
    assert error_from_response(400, b'{"success": false, "message": "no such path"}').message == "no such path"
    assert error_from_response(502, b"Bad gateway\n").message == "Bad gateway"
    assert error_from_response(500, b"").message == "HTTP 500 with an empty body"
    assert isinstance(sglang, UpstreamHTTPError) and "HTTP 400" in str(sglang)


def test_httpx_is_imported_in_one_module_only():
    """Swapping httpx for httpx2 is a one-line change in _httplib."""
    import pathlib

    package = pathlib.Path(_httplib.__file__).parent
    importers = sorted(
        p.name
        for p in package.glob("*.py")
        if any(line.startswith(("import httpx", "from httpx")) for line in p.read_text().splitlines())
    )
    assert importers == ["_httplib.py"]
