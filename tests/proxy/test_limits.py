"""The limits a client meets (docs/operations.md, "Limits and timeouts"): each exceeded limit is answered with its
status and an OpenAI-shaped body, and the connection is closed; nothing hangs.

Real proxies on 127.0.0.1:0 (``start_proxy``), the official openai SDK where a normal client is meant, raw sockets
where the client misbehaves (a head or body sent byte by byte, a chunked body that never ends). The limits are
small and the timeouts short so each refusal comes quickly; every test is bounded by a generous ``fail_after``, and
asserts the outcome, never a duration.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
import trio

from tests.e2e.conftest import start_proxy  # noqa: F401 - the fixture
from tests.e2e.harness import Proxy

BOUND = 30  # seconds: a generous bound; the refusals come after a fraction of a second
SHORT = 0.5  # seconds: the timeouts under test
USER = [{"role": "user", "content": "hello"}]
CHAT_HEAD = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


async def connect(proxy: Proxy) -> trio.SocketStream:
    host, port = proxy.url.removeprefix("http://").split(":")
    return await trio.open_tcp_stream(host, int(port))


async def read_until_closed(stream: trio.SocketStream) -> bytes:
    """Everything the server sends until it closes the connection (a reset after the answer counts as closed)."""
    received = bytearray()
    while True:
        try:
            data = await stream.receive_some(65536)
        except trio.BrokenResourceError:
            return bytes(received)
        if not data:
            return bytes(received)
        received += data


def parse_response(raw: bytes) -> tuple[int, dict[str, str], Any]:
    """Status, headers (lower-case names) and JSON body of the one response in ``raw``."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers["content-length"])
    assert len(body) == length, raw
    return int(lines[0].split()[1]), headers, json.loads(body)


async def trickle(stream: trio.SocketStream, data: bytes, gap: float = 0.05) -> None:
    """Send ``data`` byte by byte, ``gap`` seconds apart, until done or the server closes (slowloris)."""
    for byte in data:
        try:
            await stream.send_all(bytes([byte]))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        await trio.sleep(gap)


async def slowloris_answer(stream: trio.SocketStream, first: bytes, rest: bytes) -> bytes:
    """Send ``first`` at once, then ``rest`` byte by byte; what the server answers before it closes."""
    async with trio.open_nursery() as nursery:
        await stream.send_all(first)
        nursery.start_soon(trickle, stream, rest)
        raw = await read_until_closed(stream)
        nursery.cancel_scope.cancel()
    return raw


async def send_an_endless_chunked_body(proxy: Proxy, head: str) -> bytes:
    """Send ``head`` and 24 KiB of a chunked body that never ends (no final 0-chunk); what came back until the
    proxy closed the connection."""
    chunk = b"x" * 4096
    with trio.fail_after(BOUND):
        stream = await connect(proxy)
        async with stream:
            await stream.send_all(
                (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + b"%x\r\n%s\r\n" % (len(chunk), chunk) * 6
            )
            return await read_until_closed(stream)


def assert_refused(raw: bytes, status: int, code: str) -> dict[str, Any]:
    got, headers, body = parse_response(raw)
    assert got == status, raw
    assert headers["connection"] == "close" and headers["content-type"] == "application/json"
    error = body["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error" and error["message"], body
    return error


# -- body size ---------------------------------------------------------------------------------------------------


async def test_a_body_over_max_body_bytes_is_413_request_too_large(start_proxy) -> None:
    proxy = await start_proxy(max_body_bytes=64 * 1024)
    big = [{"role": "user", "content": "x" * (100 * 1024)}]
    with trio.fail_after(BOUND):
        async with proxy.async_client() as client:
            with pytest.raises(openai.APIStatusError) as info:
                await client.chat.completions.create(
                    model="m", messages=big, extra_headers={"X-Session-Id": "big"}
                )
            # A body under the limit on a fresh connection is still served.
            small = await client.chat.completions.create(
                model="m", messages=USER, max_tokens=4, extra_headers={"X-Session-Id": "small"}
            )
    assert info.value.status_code == 413
    error = info.value.body
    assert error["code"] == "request_too_large" and error["limit"] == 64 * 1024, error
    assert error["request_id"] == info.value.response.headers["x-request-id"]  # the proxy's own error, its id
    assert small.choices[0].message.content is not None


async def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(start_proxy) -> None:
    """No Content-Length: the body is counted as it arrives. The client never ends its body, so an answer at all
    shows the proxy answered at the limit instead of buffering to the end."""
    proxy = await start_proxy(max_body_bytes=16 * 1024)
    raw = await send_an_endless_chunked_body(proxy, CHAT_HEAD + "X-Session-Id: chunked\r\n")
    error = assert_refused(raw, 413, "request_too_large")
    assert error["limit"] == 16 * 1024


async def test_a_refused_request_is_no_way_around_the_body_limit(start_proxy) -> None:
    """A request the access rules refuse (here a text/plain post, 415) has its body read and dropped before the
    answer, but only up to --max-body-bytes: an endless chunked body still gets its answer, and the connection is
    closed instead of being read forever."""
    proxy = await start_proxy(max_body_bytes=16 * 1024)
    raw = await send_an_endless_chunked_body(
        proxy, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
        "X-Session-Id: refused\r\n"
    )
    assert_refused(raw, 415, "unsupported_media_type")


# -- messages per request ----------------------------------------------------------------------------------------


async def test_more_messages_than_max_messages_is_400_too_many_messages(start_proxy) -> None:
    proxy = await start_proxy(max_messages=3)
    four = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}] * 2
    with trio.fail_after(BOUND):
        async with proxy.async_client() as client:
            with pytest.raises(openai.BadRequestError) as info:
                await client.chat.completions.create(model="m", messages=four, extra_headers={"X-Session-Id": "m"})
            three = await client.chat.completions.create(
                model="m", messages=four[:3], max_tokens=4, extra_headers={"X-Session-Id": "m3"}
            )
    error = info.value.body
    assert error["code"] == "too_many_messages" and error["param"] == "messages", error
    assert (error["limit"], error["got"]) == (3, 4)
    assert three.choices[0].message.content is not None


# -- header size -------------------------------------------------------------------------------------------------


async def test_headers_over_max_header_bytes_are_431_headers_too_large(start_proxy) -> None:
    proxy = await start_proxy(max_header_bytes=4096)
    with trio.fail_after(BOUND):
        async with proxy.async_client(default_headers={"X-Padding": "p" * 8000}) as client:
            with pytest.raises(openai.APIStatusError) as info:
                await client.chat.completions.create(model="m", messages=USER, extra_headers={"X-Session-Id": "h"})
    assert info.value.status_code == 431
    error = info.value.body
    assert error["code"] == "headers_too_large" and error["limit"] == 4096, error
    assert info.value.response.headers["connection"] == "close"


async def test_an_unfinished_head_over_max_header_bytes_is_431_without_waiting_for_its_end(start_proxy) -> None:
    """A head still growing past the limit is refused at once (h11's buffer bound), not when it ends."""
    proxy = await start_proxy(max_header_bytes=4096)
    with trio.fail_after(BOUND):
        stream = await connect(proxy)
        async with stream:
            await stream.send_all(CHAT_HEAD.encode() + b"X-Padding: " + b"p" * 8000)  # no blank line: not ended
            raw = await read_until_closed(stream)
    assert assert_refused(raw, 431, "headers_too_large")["limit"] == 4096


# -- slowloris: head, body, idle ---------------------------------------------------------------------------------


async def test_a_head_sent_byte_by_byte_is_408_after_header_read_timeout(start_proxy) -> None:
    proxy = await start_proxy(header_read_timeout=SHORT)
    with trio.fail_after(BOUND):
        stream = await connect(proxy)
        async with stream:
            raw = await slowloris_answer(stream, CHAT_HEAD.encode(), b"X-Slow: " + b"s" * 10_000)
    assert_refused(raw, 408, "request_timeout")


async def test_a_body_sent_byte_by_byte_is_408_after_body_read_timeout(start_proxy) -> None:
    proxy = await start_proxy(body_read_timeout=SHORT)
    body = json.dumps({"messages": USER, "padding": "p" * 10_000}).encode()
    head = f"{CHAT_HEAD}X-Session-Id: slow-body\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    with trio.fail_after(BOUND):
        stream = await connect(proxy)
        async with stream:
            raw = await slowloris_answer(stream, head, body)
    assert_refused(raw, 408, "request_timeout")


async def test_an_idle_keep_alive_connection_is_closed_after_keep_alive_timeout(start_proxy) -> None:
    proxy = await start_proxy(keep_alive_timeout=SHORT)
    with trio.fail_after(BOUND):
        used, silent = await connect(proxy), await connect(proxy)
        async with used, silent:
            await used.send_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            status, headers, body = parse_response(await read_until_closed(used))
            assert await read_until_closed(silent) == b""  # never sent a byte: closed without an answer
    assert status == 200 and "connection" not in headers  # a keep-alive answer, then closed when idle
    assert body["status"]


async def test_many_slowloris_connections_are_all_answered_and_closed(start_proxy) -> None:
    proxy = await start_proxy(header_read_timeout=SHORT)
    answers: list[bytes] = []

    async def one() -> None:
        stream = await connect(proxy)
        async with stream:
            answers.append(await slowloris_answer(stream, b"GET /health HTTP/1.1\r\n", b"Host: " + b"h" * 10_000))

    with trio.fail_after(BOUND):
        async with trio.open_nursery() as nursery:
            for _ in range(50):
                nursery.start_soon(one)
        # ...and the proxy still serves.
        async with proxy.async_client() as client:
            reply = await client.chat.completions.create(
                model="m", messages=USER, max_tokens=4, extra_headers={"X-Session-Id": "after"}
            )
    assert len(answers) == 50
    for raw in answers:
        assert_refused(raw, 408, "request_timeout")
    assert reply.choices[0].message.content is not None
