"""``serving/tcp_reads.py``: hypercorn's trio worker serves connections with ``ConnectionServer``, which reads as
hypercorn does, and keeps hypercorn's read timeout when one is set."""

from __future__ import annotations

import hypercorn.trio.run
import trio
from hypercorn.events import Closed, RawData
from hypercorn.trio import serve

from serving import tcp_reads
from serving.http_limits import HTTPLimits
from serving.http_server import hypercorn_config
from tests.proxy.test_connection_protocol import echo_app


_echo = echo_app([])


async def _app(scope, receive, send):
    """The echo app of the connection tests, with hypercorn's lifespan messages answered."""
    if scope["type"] != "lifespan":
        await _echo(scope, receive, send)
        return
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _serve(nursery, read_timeout=None):
    config = hypercorn_config("127.0.0.1", 0, HTTPLimits())
    config.read_timeout = read_timeout
    binds = await nursery.start(serve, _app, config)
    return int(binds[0].rsplit(":", 1)[1])


async def _read_until_closed(stream) -> bytes:
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


async def test_the_worker_builds_the_connection_server_and_it_serves_pipelined_requests_then_the_close(nursery):
    tcp_reads.install()
    assert hypercorn.trio.run.TCPServer is tcp_reads.ConnectionServer
    port = await _serve(nursery)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    requests = b"".join(b"POST /e HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n%03d" % i for i in range(3))
    # sent in pieces that cut heads and bodies, then the client's end of the stream
    for at in range(0, len(requests), 7):
        await stream.send_all(requests[at:at + 7])
    await stream.send_eof()
    with trio.fail_after(10):
        data = await _read_until_closed(stream)
    assert data.count(b"HTTP/1.1 200") == 3 and data.endswith(b"002")
    nursery.cancel_scope.cancel()


class _Stream:
    """A connection's stream: hands out ``chunks`` (an exception is raised), then waits for ever."""

    def __init__(self, *chunks):
        self.chunks = list(chunks)

    async def receive_some(self, max_bytes):
        if not self.chunks:
            await trio.sleep_forever()
        chunk = self.chunks.pop(0)
        if isinstance(chunk, BaseException):
            raise chunk
        return chunk


class _Protocol:
    def __init__(self):
        self.events = []

    async def handle(self, event):
        self.events.append(event)


async def _read(stream, read_timeout):
    config = hypercorn_config("127.0.0.1", 0, HTTPLimits())
    config.read_timeout = read_timeout
    server = tcp_reads.ConnectionServer(None, config, None, None, stream)
    server.protocol = _Protocol()
    with trio.fail_after(10):
        await server._read_data()
    return server.protocol.events


async def test_reads_until_the_end_of_the_stream_or_a_broken_one_then_closed():
    assert await _read(_Stream(b"ab", b"c", b""), None) == [RawData(b"ab"), RawData(b"c"), RawData(b""), Closed()]
    assert await _read(_Stream(b"ab", trio.BrokenResourceError()), None) == [RawData(b"ab"), Closed()]
    assert await _read(_Stream(trio.ClosedResourceError()), None) == [Closed()]


async def test_a_read_timeout_set_in_the_config_is_hypercorns_as_before():
    # hypercorn's own loop: a silent stream ends the reads after the timeout, as a closed connection
    assert await _read(_Stream(b"ab"), 0.05) == [RawData(b"ab"), Closed()]
