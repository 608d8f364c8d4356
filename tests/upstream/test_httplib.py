"""The HTTP/1.1 layer (``_httplib``) over real sockets: connection reuse, stale keep-alive connections and the
retry, framing split at every byte, ``Connection: close``, pool, connect, write and read timeouts, garbage, and
cancellation. Through ``SGLangClient`` (its only user), against the embedded engine or a bare trio TCP server on
127.0.0.1:0 that writes exactly the bytes a test needs. https is in ``test_https.py``.

Real clock: waits are bounded with ``trio.fail_after(HANG_GUARD)`` only so that a bug fails instead of hanging;
the timeouts under test are a fraction of a second.
"""

from __future__ import annotations

import functools
import json
import re
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import (
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from proxy.upstream.events import Finished, FinishLength, Token

from .conftest import HANG_GUARD, StartEngine
from .test_client import LONG, PROMPT, collect, wait_recorded

MODEL_INFO = {"model_path": "org/m", "weight_version": "w1", "is_generation": True}


# -- a bare HTTP/1.1 server ---------------------------------------------------------------------------------------


class Peer:
    """The server side of one accepted connection: read requests, write raw bytes, notice the client leaving."""

    def __init__(self, stream: trio.SocketStream, index: int) -> None:
        self.stream = stream
        self.index = index  # 0 for the server's first connection, 1 for the second, ...
        self.buffer = b""
        self.requests: list[tuple[bytes, bytes]] = []

    async def read_request(self) -> tuple[bytes, bytes] | None:
        """The next request's head and body; None if the client closed the connection first."""
        while b"\r\n\r\n" not in self.buffer:
            data = await self._receive()
            if not data:
                assert not self.buffer, "client closed in the middle of a request"
                return None
            self.buffer += data
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        match = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
        length = int(match.group(1)) if match else 0
        while len(rest) < length:
            rest += await self._receive()
        self.buffer = rest[length:]
        self.requests.append((head, rest[:length]))
        return head, rest[:length]

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def wait_client_gone(self) -> None:
        """Until the client closes (EOF or reset); any request bytes in between are ignored."""
        while await self._receive():
            pass

    def reset(self) -> None:
        """Close with a TCP reset instead of a FIN."""
        self.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.stream.socket.close()

    async def _receive(self) -> bytes:
        try:
            return await self.stream.receive_some()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return b""


class RawServer:
    """``handler(peer)`` serves each connection; the connection is closed (FIN) when it returns."""

    def __init__(self, handler: Callable[[Peer], Awaitable[None]]) -> None:
        self.handler = handler
        self.peers: list[Peer] = []
        self.closed = 0  # connections the server has finished with
        self.changed = trio.Event()
        self.url = ""

    async def start(self, nursery: trio.Nursery) -> RawServer:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, self._serve, 0, host="127.0.0.1"))
        self.url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        return self

    async def _serve(self, stream: trio.SocketStream) -> None:
        peer = Peer(stream, len(self.peers))
        self.peers.append(peer)
        try:
            await self.handler(peer)
        finally:
            await stream.aclose()
            self.closed += 1
            self._notify()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def wait_closed(self, count: int) -> None:
        with trio.fail_after(HANG_GUARD):
            while self.closed < count:
                await self.changed.wait()
        await trio.testing.wait_all_tasks_blocked()  # the FIN has reached the client's socket

    @property
    def request_count(self) -> int:
        return sum(len(p.requests) for p in self.peers)


def json_response(value: Any, *headers: bytes) -> bytes:
    body = json.dumps(value).encode()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % len(body)
    return head + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


async def keep_alive(peer: Peer, response: bytes = json_response(MODEL_INFO)) -> None:
    """Answer every request with ``response`` until the client leaves."""
    while await peer.read_request() is not None:
        await peer.send(response)


async def serve(nursery: trio.Nursery, handler: Callable[[Peer], Awaitable[None]]) -> RawServer:
    return await RawServer(handler).start(nursery)


# A /generate reply: two tokens, finished by length (cumulative chunks, no logprobs).
CHUNK_1 = {"text": "a", "output_ids": [5], "meta_info": {"id": "r", "finish_reason": None, "weight_version": "w",
                                                          "prompt_tokens": 1, "completion_tokens": 1}}
CHUNK_2 = {"text": "ab", "output_ids": [5, 6], "meta_info": {
    "id": "r", "finish_reason": {"type": "length", "length": 2}, "weight_version": "w",
    "prompt_tokens": 1, "completion_tokens": 2}}
SSE_BODY = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in (CHUNK_1, CHUNK_2)) + b"data: [DONE]\n\n"
STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunked(body: bytes, size: int) -> bytes:
    pieces = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


STREAM_RESPONSE = STREAM_HEAD + chunked(SSE_BODY, 60)  # HTTP chunks that cut SSE events anywhere
GENERATE_RESPONSE = json_response(CHUNK_2)


async def stream_events(client: SGLangClient) -> list[Any]:
    with trio.fail_after(HANG_GUARD):
        async with client.generate_stream([1], return_logprob=False) as stream:
            return [event async for event in stream]


def assert_two_tokens(events: list[Any]) -> None:
    assert [e.token_id for e in events[:-1]] == [5, 6] and all(isinstance(e, Token) for e in events[:-1])
    assert isinstance(events[-1], Finished) and events[-1].finish_reason == FinishLength(2)


# -- connection reuse (embedded engine) ------------------------------------------------------------------------


async def test_non_streaming_and_control_calls_reuse_one_connection_per_pool(client: SGLangClient):
    for _ in range(3):
        await client.generate(PROMPT, {"max_new_tokens": 3})
    await client.model_info()
    await client.models()
    await client.separate_reasoning("<think>x</think>y", "qwen3")
    generation, control = client.pool_statistics(control=False), client.pool_statistics(control=True)
    assert (generation.connections_opened, generation.connections_reused) == (1, 3)  # generate x3, the parser
    assert (control.connections_opened, control.connections_reused) == (1, 1)  # control calls: a pool of their own
    pool = client.pool_statistics()
    assert (pool.idle_connections, pool.active_connections) == (2, 0)


async def test_fully_read_streams_reuse_one_connection(client: SGLangClient):
    for _ in range(3):
        _, tokens, _ = await collect(client, PROMPT, {"max_new_tokens": 5})
        assert len(tokens) == 5
        assert client.pool_statistics().active_connections == 0
    pool = client.pool_statistics()
    assert (pool.connections_opened, pool.connections_reused, pool.idle_connections) == (1, 2, 1)


@pytest.mark.parametrize("how", ["break", "cancel", "error"])
async def test_a_stream_left_early_closes_its_connection(start_engine: StartEngine, how: str):
    handle = await start_engine(token_rate=100)
    async with SGLangClient.single_server(handle.url) as client:
        await client.generate(PROMPT, {"max_new_tokens": 1})  # a pooled connection, reused by the stream
        with trio.CancelScope() as scope:
            try:
                async with client.generate_stream(PROMPT, LONG) as stream:
                    async for event in stream:
                        assert client.pool_statistics().active_connections == 1
                        if event.index == 1:
                            if how == "break":
                                break
                            if how == "cancel":
                                scope.cancel()
                            else:
                                raise KeyError("consumer failed")
            except KeyError:
                pass
        pool = client.pool_statistics()
        assert pool.open_connections == 0 and pool.connections_reused == 1  # closed, not pooled
        record = await wait_recorded(handle, stream.rid)
        assert record.client_disconnected and record.finish_reason["type"] == "abort"
        await client.generate(PROMPT, {"max_new_tokens": 1})  # a new connection
        assert client.pool_statistics().connections_opened == 2


# -- stale keep-alive connections and the retry ------------------------------------------------------------------


async def test_an_idle_connection_closed_by_the_server_is_detected_and_replaced(nursery: trio.Nursery):
    async def answer_once(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(json_response(MODEL_INFO))  # keep-alive, then the server's idle timeout closes it

    server = await serve(nursery, answer_once)
    async with SGLangClient(server.url) as client:
        await client.model_info()
        assert client.pool_statistics().idle_connections == 1
        await server.wait_closed(1)
        assert (await client.model_info()).weight_version == "w1"
        pool = client.pool_statistics()
    assert (pool.connections_opened, pool.connections_reused, pool.stale_discarded, pool.retries) == (2, 0, 1, 0)
    assert [len(p.requests) for p in server.peers] == [1, 1]  # nothing was sent on the dead connection


@pytest.mark.parametrize("close", ["fin", "reset"])
async def test_a_reused_connection_lost_before_any_response_byte_is_retried_once(nursery: trio.Nursery, close: str):
    """The race the readability check cannot see: the server closes the idle connection just as the request
    goes out. It cannot have answered, so the request is resent once, on a new connection."""

    async def drop_second_request(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(json_response(MODEL_INFO))
        if peer.index == 0:
            await peer.read_request()
            if close == "reset":
                peer.reset()
        else:
            await keep_alive(peer)

    server = await serve(nursery, drop_second_request)
    async with SGLangClient(server.url) as client:
        await client.model_info()
        assert (await client.model_info()).model_path == "org/m"
        pool = client.pool_statistics()
    assert (pool.connections_opened, pool.connections_reused, pool.retries) == (2, 1, 1)
    assert [len(p.requests) for p in server.peers] == [2, 1]


async def test_no_retry_on_a_new_connection_or_after_a_response_byte_or_twice(nursery: trio.Nursery):
    async def handler(peer: Peer) -> None:
        if peer.index == 0:  # a new connection dropped before answering
            await peer.read_request()
        elif peer.index == 1:  # answered once, then a partial head on the reused connection
            await peer.read_request()
            await peer.send(json_response(MODEL_INFO))
            await peer.read_request()
            await peer.send(b"HTTP/1.1 200 OK\r\n")
        elif peer.index == 2:  # answered once, then dropped; the retry's connection is dropped too
            await peer.read_request()
            await peer.send(json_response(MODEL_INFO))
            await peer.read_request()
        else:
            await peer.read_request()

    server = await serve(nursery, handler)
    async with SGLangClient(server.url) as client:
        with pytest.raises(UpstreamUnavailable):
            await client.model_info()
        assert client.pool_statistics().retries == 0
        await client.model_info()
        with pytest.raises(UpstreamUnavailable):
            await client.model_info()
        assert client.pool_statistics().retries == 0
        await client.model_info()
        with pytest.raises(UpstreamUnavailable) as info:
            await client.model_info()
        pool = client.pool_statistics()
    assert "lost" in str(info.value)
    assert (pool.connections_opened, pool.retries, pool.open_connections) == (4, 1, 0)
    assert [len(p.requests) for p in server.peers] == [1, 2, 2, 1]


async def test_a_read_timeout_on_a_reused_connection_is_not_retried(nursery: trio.Nursery):
    async def answer_once_then_hang(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(json_response(MODEL_INFO))
        await peer.wait_client_gone()

    server = await serve(nursery, answer_once_then_hang)
    async with SGLangClient(server.url, control_timeout=0.2) as client:
        await client.model_info()
        with pytest.raises(UpstreamTimeout) as info:
            await client.model_info()
        pool = client.pool_statistics()
    assert info.value.phase == "read" and info.value.partial is None
    assert (pool.connections_opened, pool.retries, pool.open_connections) == (1, 0, 0)


async def test_expired_idle_connections_are_not_reused(nursery: trio.Nursery):
    server = await serve(nursery, keep_alive)
    async with SGLangClient(server.url, keepalive_expiry=0.05) as client:
        await client.model_info()
        await trio.sleep(0.1)
        await client.model_info()
        pool = client.pool_statistics()
    assert (pool.connections_opened, pool.connections_reused, pool.stale_discarded) == (2, 0, 0)
    await server.wait_closed(2)


async def test_open_connections_stay_within_max_connections_across_hosts(nursery: trio.Nursery):
    first, second = await serve(nursery, keep_alive), await serve(nursery, keep_alive)
    async with SGLangClient(first.url, max_connections=1, control_connections=1) as client:
        await client.model_info()
        await client.model_info(second.url)  # the idle connection to the first server makes room
        assert client.pool_statistics().open_connections == 1
        await first.wait_closed(1)
        assert second.closed == 0
    await second.wait_closed(1)  # aclose closed the pooled one


# -- framing ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["content-length", "chunked"])
async def test_responses_split_at_every_byte_boundary(nursery: trio.Nursery, kind: str):
    """Every split of the response into two writes, the client reading the first part before the second is sent;
    all on one keep-alive connection."""
    response = GENERATE_RESPONSE if kind == "content-length" else STREAM_RESPONSE
    split = 0

    async def two_writes(peer: Peer) -> None:
        nonlocal split
        while await peer.read_request() is not None:
            await peer.send(response[:split])
            await trio.testing.wait_all_tasks_blocked()  # the client has read all of it and waits for more
            await peer.send(response[split:])

    server = await serve(nursery, two_writes)
    async with SGLangClient(server.url) as client:
        for split in range(len(response) + 1):  # noqa: B007 (read by the handler)
            if kind == "content-length":
                final = await client.generate([1], return_logprob=False)
                assert final.output_ids == (5, 6) and final.finish_reason == FinishLength(2)
            else:
                assert_two_tokens(await stream_events(client))
        pool = client.pool_statistics()
    assert (pool.connections_opened, pool.connections_reused) == (1, len(response))


@pytest.mark.parametrize("kind", ["content-length", "chunked"])
async def test_responses_written_byte_by_byte(nursery: trio.Nursery, kind: str):
    response = GENERATE_RESPONSE if kind == "content-length" else STREAM_HEAD + chunked(SSE_BODY, 7)

    async def byte_by_byte(peer: Peer) -> None:
        while await peer.read_request() is not None:
            for i in range(len(response)):
                await peer.send(response[i:i + 1])
                await trio.testing.wait_all_tasks_blocked()

    server = await serve(nursery, byte_by_byte)
    async with SGLangClient(server.url) as client:
        for _ in range(2):
            if kind == "content-length":
                assert (await client.generate([1], return_logprob=False)).output_ids == (5, 6)
            else:
                assert_two_tokens(await stream_events(client))
        assert client.pool_statistics().connections_opened == 1


async def test_connection_close_responses_are_not_pooled(nursery: trio.Nursery):
    async def answer_and_close(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(json_response(MODEL_INFO, b"connection: close"))
        await peer.wait_client_gone()  # the client closes it by itself

    server = await serve(nursery, answer_and_close)
    async with SGLangClient(server.url) as client:
        for _ in range(3):
            assert (await client.model_info()).weight_version == "w1"
            assert client.pool_statistics().open_connections == 0
        pool = client.pool_statistics()
        await server.wait_closed(3)
    assert (pool.connections_opened, pool.connections_reused, pool.stale_discarded, pool.retries) == (3, 0, 0, 0)


async def test_requests_are_what_sglang_expects(nursery: trio.Nursery):
    server = await serve(nursery, functools.partial(keep_alive, response=GENERATE_RESPONSE))
    async with SGLangClient.single_server(server.url) as client:
        await client.generate([1, 2], {"max_new_tokens": 2}, routing_key="session-7", rid="0" * 32)
        await client.model_info()
        await client.flush_cache()
    [(generate_head, generate_body)] = server.peers[0].requests
    (info_head, info_body), (flush_head, flush_body) = server.peers[1].requests  # the control calls' connection
    lines = generate_head.split(b"\r\n")
    port = server.url.rsplit(":", 1)[1].encode()
    assert lines[0] == b"POST /generate HTTP/1.1"
    assert sorted(lines[1:]) == sorted([b"host: 127.0.0.1:" + port, b"content-type: application/json",
                                        b"content-length: %d" % len(generate_body), b"x-smg-routing-key: session-7"])
    assert generate_body == (b'{"input_ids":[1,2],"sampling_params":{"max_new_tokens":2},"rid":"' + b"0" * 32
                             + b'","stream":false,"return_logprob":true}')
    assert info_head.split(b"\r\n") == [b"GET /model_info HTTP/1.1", b"host: 127.0.0.1:" + port] and info_body == b""
    assert flush_head.split(b"\r\n")[0] == b"POST /flush_cache HTTP/1.1" and b"content-length: 0" in flush_head


# -- errors and timeouts ----------------------------------------------------------------------------------------


async def test_http_and_https_urls_are_accepted_and_other_schemes_refused_when_the_client_is_built():
    async with SGLangClient("https://sglang.example", ["https://worker:30001/", "http://w2:30001"]) as client:
        assert client.router_url == "https://sglang.example"
        assert client.worker_urls == ("https://worker:30001", "http://w2:30001")
    for url in ("ftp://sglang:21", "sglang:30000", "https://", "http://"):
        with pytest.raises(ValueError):
            SGLangClient(url)
    with pytest.raises(ValueError):
        SGLangClient("http://127.0.0.1:1", ["unix:///tmp/sglang.sock"])


async def test_connect_error_is_unavailable():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: refused
        async with SGLangClient(url) as client:
            with pytest.raises(UpstreamUnavailable) as info:
                await client.generate([1])
            assert isinstance(info.value.__cause__, OSError) and "cannot connect" in str(info.value)
            assert client.pool_statistics().open_connections == 0


async def test_read_timeout_applies_to_control_calls_and_never_to_generation(nursery: trio.Nursery):
    async def silent(peer: Peer) -> None:
        await peer.read_request()
        await peer.wait_client_gone()

    server = await serve(nursery, silent)
    async with SGLangClient.single_server(server.url, control_timeout=0.2) as client:
        with pytest.raises(UpstreamTimeout) as info:
            await client.model_info()
        assert info.value.phase == "read" and info.value.url == server.url + "/model_info"
        with pytest.raises(UpstreamTimeout):
            await client.abort_all()
        with trio.move_on_after(0.6) as scope:  # three times the control timeout: still waiting
            await client.generate([1])
        assert scope.cancelled_caught
        assert client.pool_statistics().open_connections == 0
    await server.wait_closed(3)


async def test_pool_timeout_while_a_stream_holds_the_only_connection(start_engine: StartEngine):
    handle = await start_engine(token_rate=100)
    async with SGLangClient.single_server(handle.url, max_connections=1, pool_timeout=0.2) as client:
        async with client.generate_stream(PROMPT, LONG) as stream:
            await stream.__anext__()
            with pytest.raises(UpstreamTimeout) as info:
                await client.generate(PROMPT, {"max_new_tokens": 2})
            assert info.value.phase == "pool" and info.value.url == handle.url + "/generate"
            assert await client.abort(stream.rid) is True  # control calls have their own pool
            assert client.pool_statistics(control=False).open_connections == 1
        assert client.pool_statistics(control=False).open_connections == 0  # left early: closed


async def test_a_request_waiting_for_a_slot_gets_it_when_a_stream_ends(start_engine: StartEngine):
    handle = await start_engine(token_rate=100)
    waited: list[Finished] = []
    async with SGLangClient.single_server(handle.url, max_connections=1) as client:

        async def wait_for_the_slot() -> None:
            waited.append(await client.generate(PROMPT, {"max_new_tokens": 2}))

        with trio.fail_after(HANG_GUARD):
            async with trio.open_nursery() as nursery:
                async with client.generate_stream(PROMPT, {"max_new_tokens": 6}) as stream:
                    nursery.start_soon(wait_for_the_slot)
                    events = [event async for event in stream]
                    assert not waited  # still waiting while the stream holds the connection
        pool = client.pool_statistics()
    assert len(events) == 7 and len(waited) == 1 and waited[0].output_ids
    assert (pool.connections_opened, pool.connections_reused) == (1, 1)  # the stream's connection, drained


async def test_write_timeout(nursery: trio.Nursery):
    async def never_reads(peer: Peer) -> None:
        await trio.sleep_forever()

    server = await serve(nursery, never_reads)
    async with SGLangClient(server.url, write_timeout=0.3) as client:
        with pytest.raises(UpstreamTimeout) as info:
            await client.generate(list(range(3_000_000)))  # ~22 MB: more than the socket buffers hold
        assert info.value.phase == "write"
        assert client.pool_statistics().open_connections == 0


async def test_garbage_is_a_protocol_error(nursery: trio.Nursery):
    async def garbage(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    server = await serve(nursery, garbage)
    async with SGLangClient(server.url) as client:
        with pytest.raises(UpstreamProtocolError) as info:
            await client.model_info()
        assert info.value.partial is None
        with pytest.raises(UpstreamProtocolError):
            async with client.generate_stream([1]):
                pass  # pragma: no cover
        assert client.pool_statistics().open_connections == 0
        assert client.statistics().open_streams == 0


async def test_bad_chunk_framing_mid_stream_is_a_protocol_error_with_the_tokens(nursery: trio.Nursery):
    first_event = b"data: " + json.dumps(CHUNK_1).encode() + b"\n\n"

    async def bad_chunk(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(STREAM_HEAD + chunked(first_event, 1000)[:-5] + b"zz\r\nnot a chunk\r\n")
        await peer.wait_client_gone()

    server = await serve(nursery, bad_chunk)
    async with SGLangClient(server.url) as client:
        events: list[Any] = []
        with pytest.raises(UpstreamProtocolError) as info:
            async with client.generate_stream([1], return_logprob=False) as stream:
                async for event in stream:
                    events.append(event)
        assert client.pool_statistics().open_connections == 0
    assert [e.token_id for e in events] == [5]
    assert info.value.partial is not None and info.value.partial.output_ids == (5,)
    assert info.value.partial.rid == stream.rid


@pytest.mark.parametrize("where", ["before the head", "in the body"])
async def test_cancellation_mid_read_propagates_and_pools_nothing(nursery: trio.Nursery, where: str):
    gone = trio.Event()

    async def stall(peer: Peer) -> None:
        if peer.index > 0:
            return await keep_alive(peer, GENERATE_RESPONSE)
        await peer.read_request()
        if where == "in the body":
            await peer.send(GENERATE_RESPONSE[:-10])
        await peer.wait_client_gone()
        gone.set()

    server = await serve(nursery, stall)
    async with SGLangClient(server.url, max_connections=1) as client:
        with trio.CancelScope() as scope:
            nursery.start_soon(_cancel_when_blocked, scope)
            await client.generate([1])
        assert scope.cancelled_caught  # trio.Cancelled went through the client untranslated
        pool = client.pool_statistics()
        assert (pool.open_connections, pool.active_connections) == (0, 0)
        with trio.fail_after(HANG_GUARD):
            await gone.wait()  # the server saw the disconnect
        assert (await client.generate([1])).output_ids == (5, 6)  # the pool slot was released


async def _cancel_when_blocked(scope: trio.CancelScope) -> None:
    await trio.testing.wait_all_tasks_blocked()
    scope.cancel()


async def test_aclose_closes_pooled_connections_and_refuses_new_requests(nursery: trio.Nursery):
    server = await serve(nursery, keep_alive)
    client = SGLangClient(server.url)
    await client.model_info()
    assert client.pool_statistics().idle_connections == 1
    await client.aclose()
    assert client.pool_statistics().open_connections == 0
    await server.wait_closed(1)
    with pytest.raises(RuntimeError):
        await client.model_info()
