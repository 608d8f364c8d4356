"""The HTTP/1.1 exchanges of a connection on the project's codec (``serving/limited_h11.py`` over
``serving/http1_server.py``): what h11 did for hypercorn, through the real protocol class, its task group and worker
context; the socket side records what the protocol hands it (as in ``test_connection_writes.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import hypercorn.protocol
import pytest
import trio
from hypercorn.config import Config
from hypercorn.events import Closed, RawData
from hypercorn.protocol.h11 import H2CProtocolRequiredError, H11Protocol
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState

from serving.http_limits import HTTPLimits
from serving.limited_h11 import LimitedConfig, LimitedH11Protocol, install

from tests.proxy.test_connection_writes import Connection


def echo_app(seen: list[dict[str, Any]]) -> Any:
    """An app answering each request with its whole body (``Content-Length``), recording each scope."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return app


@contextlib.asynccontextmanager
async def served(
    seen: list[dict[str, Any]] | None = None, limits: HTTPLimits | None = None,
) -> AsyncIterator[Connection]:
    """A connection of the real protocol class to the echo app (recording scopes in ``seen``), in a task group."""
    async with TaskGroup() as task_group:
        yield Connection(echo_app([] if seen is None else seen), task_group, WorkerContext(None), limits)


def answers(connection: Connection) -> list[tuple[bytes, bytes]]:
    """(status line, body) of every response written so far (bodies framed by Content-Length)."""
    data = b"".join(connection.writes())
    out = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next((int(v) for n, _, v in (line.partition(b": ") for line in lines[1:]) if n.lower() == b"content-length"), 0)
        out.append((lines[0], data[:length]))
        data = data[length:]
    return out


async def test_two_pipelined_requests_are_answered_in_order_on_one_connection(autojump_clock) -> None:
    seen: list[dict[str, Any]] = []
    async with served(seen) as connection:
        await connection.request(
            b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\none"
            b"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\ntwo\r\n0\r\nTrailer: t\r\n\r\n"
        )
        assert answers(connection) == [(b"HTTP/1.1 200 ", b"one"), (b"HTTP/1.1 200 ", b"two")]
        assert [scope["path"] for scope in seen] == ["/a", "/b"] and not connection.closed()
        await connection.protocol.handle(Closed())


async def test_a_client_expecting_100_continue_is_told_to_continue_before_it_sends_the_body(autojump_clock) -> None:
    seen: list[dict[str, Any]] = []
    async with served(seen) as connection:
        await connection.request(b"POST /a HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
        assert b"".join(connection.writes()).startswith(b"HTTP/1.1 100 ")
        await connection.request(b"body")
        assert answers(connection)[-1] == (b"HTTP/1.1 200 ", b"body")
        await connection.protocol.handle(Closed())


async def test_an_http_1_0_request_is_answered_and_the_connection_closed(autojump_clock) -> None:
    async with served() as connection:
        await connection.request(b"POST /a HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi")
        assert answers(connection) == [(b"HTTP/1.1 200 ", b"hi")]
        assert b"connection: close" in b"".join(connection.writes()).lower() and connection.closed()


async def test_a_websocket_upgrade_is_answered_as_a_plain_http_request(autojump_clock) -> None:
    seen: list[dict[str, Any]] = []
    async with served(seen) as connection:
        await connection.request(
            b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        assert [scope["type"] for scope in seen] == ["http"] and answers(connection)[0][0] == b"HTTP/1.1 200 "
        await connection.protocol.handle(Closed())


async def test_an_h2c_upgrade_is_switched_and_handed_to_http2(autojump_clock) -> None:
    async with served() as connection:
        with pytest.raises(H2CProtocolRequiredError) as raised:
            await connection.protocol.handle(RawData(
                b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                b"HTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"
            ))
        assert b"".join(connection.writes()).startswith(b"HTTP/1.1 101 ")
        assert (b":method", b"GET") in raised.value.headers and raised.value.settings == b"AAMAAABkAAQAAP__"


async def test_a_malformed_request_is_refused_with_an_openai_error_and_closed(autojump_clock) -> None:
    async with served() as connection:
        await connection.request(b"GET /a HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n")
        written = b"".join(connection.writes())
        assert written.startswith(b"HTTP/1.1 400 ") and b'"error"' in written and connection.closed()


def test_install_builds_this_protocol_for_a_limited_config_and_hypercorns_for_any_other() -> None:
    install()
    context = WorkerContext(None)
    args = (context, TaskGroup(), ConnectionState({}), False, None, None, None)
    assert type(hypercorn.protocol.H11Protocol(None, LimitedConfig(HTTPLimits()), *args)) is LimitedH11Protocol
    assert type(hypercorn.protocol.H11Protocol(None, Config(), *args)) is H11Protocol


@pytest.mark.parametrize("extra, refused", [(0, False), (1, True)])
async def test_a_whole_head_is_measured_to_the_byte_against_max_header_bytes(autojump_clock, extra, refused) -> None:
    limit = 200
    head = b"GET /a HTTP/1.1\r\nHost: x\r\nx-pad: \r\n\r\n"
    head = head.replace(b"x-pad: ", b"x-pad: " + b"p" * (limit - len(head) + extra))
    assert len(head) == limit + extra
    async with served(limits=HTTPLimits(max_header_bytes=limit)) as connection:
        await connection.request(head)
        status = b"".join(connection.writes()).split(b"\r\n", 1)[0]
        assert status.startswith(b"HTTP/1.1 431 " if refused else b"HTTP/1.1 200 "), status
        await connection.protocol.handle(Closed())
