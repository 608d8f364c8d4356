"""https: the SGLang client through TLS (``_http_connection.TLSConnection``), against real TLS servers on 127.0.0.1:0.

The TLS server is the embedded engine served by hypercorn with a certificate (``hypercorn_config`` plus
``certfile``/``keyfile``), listening on https and plain http at once, so the same engine answers both and the
tokens can be compared. Certificates come from ``trustme`` (a throw-away CA made at test time). Bare trio servers
cover what the engine cannot do: a TLS record corrupted in the middle of a stream, a close_notify on an idle
connection, and a handshake that never comes.
"""

from __future__ import annotations

import functools
import ssl
from pathlib import Path
from typing import Any

import h11
import hypercorn.trio
import pytest
import trio
import trustme

from engine import EngineConfig, EngineHandle
from engine.app import create_engine_app
from proxy.upstream._http_connection import translate
from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import UpstreamProtocolError, UpstreamStreamCut, UpstreamTimeout, UpstreamUnavailable
from proxy.upstream.events import Event, Finished, Partial, Token
from serving.http_server import hypercorn_config

from .conftest import HANG_GUARD
from .test_client import LONG, PROMPT, assert_matches_record, collect, record_of, wait_recorded
from .test_httplib import SSE_BODY, STREAM_HEAD, chunked

# -- certificates and servers ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_pem(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's key and certificate chain in one PEM file, valid for 127.0.0.1 only (not for localhost)."""
    path = tmp_path_factory.mktemp("tls") / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(path))
    return path


@pytest.fixture
def trusting(ca: trustme.CA) -> ssl.SSLContext:
    """A client context that trusts the test CA (and verifies hostnames, as the default does)."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


class TLSEngine:
    """The embedded engine served on https (``url``) and plain http (``http_url``) by one hypercorn."""

    def __init__(self, url: str, http_url: str, handle: EngineHandle) -> None:
        self.url = url
        self.http_url = http_url
        self.handle = handle


async def serve_tls_engine(
    config: EngineConfig, pem: Path, *, task_status: trio.TaskStatus[TLSEngine] = trio.TASK_STATUS_IGNORED
) -> None:
    app, engine = create_engine_app(config)
    hconfig = hypercorn_config("127.0.0.1", 0)
    hconfig.certfile = hconfig.keyfile = str(pem)
    hconfig.insecure_bind = ["127.0.0.1:0"]
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(functools.partial(hypercorn.trio.serve, app, hconfig))
        (https_url,) = [b.rstrip("/") for b in binds if b.startswith("https://")]
        (http_url,) = [b.rstrip("/") for b in binds if b.startswith("http://")]
        port = int(https_url.rsplit(":", 1)[1])
        handle = EngineHandle(url=https_url, host="127.0.0.1", port=port, engine=engine)
        task_status.started(TLSEngine(https_url, http_url, handle))


@pytest.fixture
def start_tls_engine(nursery: trio.Nursery, qwen3_path: Path, server_pem: Path) -> Any:
    async def start(**fields: Any) -> TLSEngine:
        config = EngineConfig(tokenizer_path=qwen3_path, seed=0, port=0, **fields)
        return await nursery.start(serve_tls_engine, config, server_pem)

    return start


async def serve_raw_tls(nursery: trio.Nursery, pem: Path, handler: Any) -> str:
    """A bare TLS server: ``handler(ssl_stream)`` serves each connection (already past the handshake)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(pem))

    async def serve(stream: trio.SocketStream) -> None:
        tls = trio.SSLStream(stream, context, server_side=True, https_compatible=True)
        try:
            await tls.do_handshake()
            await handler(tls)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(tls)

    listeners = await nursery.start(functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    return f"https://127.0.0.1:{listeners[0].socket.getsockname()[1]}"


async def read_request(tls: trio.SSLStream[trio.SocketStream]) -> None:
    """Read one request (head and Content-Length body) off ``tls``."""
    conn = h11.Connection(h11.SERVER)
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await tls.receive_some())
        elif type(event) is h11.EndOfMessage:
            return
        elif type(event) is h11.ConnectionClosed:
            raise trio.BrokenResourceError("the client left before sending a whole request")


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[trio.socket.SocketType]:
    """Every socket the client opens (a spy on ``trio.open_tcp_stream``, which it calls for plain and TLS
    connections alike), to check that each one has been closed: none left for the garbage collector."""
    sockets: list[trio.socket.SocketType] = []
    real = trio.open_tcp_stream

    async def spy(*args: Any, **kwargs: Any) -> trio.SocketStream:
        stream = await real(*args, **kwargs)
        sockets.append(stream.socket)
        return stream

    monkeypatch.setattr(trio, "open_tcp_stream", spy)
    return sockets


def assert_all_closed(sockets: list[trio.socket.SocketType], count: int) -> None:
    assert len(sockets) == count and all(sock.fileno() == -1 for sock in sockets)


# -- the same requests over https and http -----------------------------------------------------------------------


async def test_generate_and_stream_over_https_give_the_same_tokens_as_over_http(start_tls_engine, trusting):
    server = await start_tls_engine()
    params = {"max_new_tokens": 12, "ignore_eos": True}
    results = {}
    for scheme, url in (("https", server.url), ("http", server.http_url)):
        async with SGLangClient.single_server(url, ssl_context=trusting) as client:
            with trio.fail_after(HANG_GUARD):
                final = await client.generate(PROMPT, params)
            rid, tokens, streamed = await collect(client, PROMPT, params)
        assert_matches_record(tokens, streamed, record_of(server.handle, rid))
        results[scheme] = (final.output_ids, final.output_logprobs, streamed.output_ids, streamed.output_logprobs)
    assert results["https"] == results["http"]
    output_ids, _, streamed_ids, _ = results["https"]
    assert len(output_ids) == 12 and streamed_ids == output_ids


async def test_connections_are_reused_over_tls(start_tls_engine, trusting):
    server = await start_tls_engine()
    async with SGLangClient.single_server(server.url, ssl_context=trusting) as client:
        for _ in range(3):
            await client.generate(PROMPT, {"max_new_tokens": 3})
            _, tokens, _ = await collect(client, PROMPT, {"max_new_tokens": 5})
            assert len(tokens) == 5
        await client.generate(PROMPT, {"max_new_tokens": 1})
        await client.separate_reasoning("<think>x</think>y", "qwen3")
        pool = client.pool_statistics()
    assert (pool.connections_opened, pool.connections_reused) == (1, 7)
    assert (pool.idle_connections, pool.active_connections, pool.stale_discarded, pool.retries) == (1, 0, 0, 0)


async def test_plain_and_tls_connections_to_one_server_are_pooled_apart(start_tls_engine, trusting):
    server = await start_tls_engine()
    async with SGLangClient(server.url, (server.http_url,), ssl_context=trusting) as client:
        for _ in range(2):
            await client.model_info()  # the router URL: https
            await client.separate_reasoning("<think>x</think>y", "qwen3")  # the worker URL: http
        pool = client.pool_statistics()
    assert (pool.connections_opened, pool.connections_reused, pool.idle_connections) == (2, 2, 2)


# -- certificates ---------------------------------------------------------------------------------------------


async def test_an_untrusted_certificate_is_unavailable(start_tls_engine, opened):
    server = await start_tls_engine()
    async with SGLangClient.single_server(server.url) as client:  # the default context: the system CAs only
        with pytest.raises(UpstreamUnavailable) as info:
            await client.generate(PROMPT, {"max_new_tokens": 3})
        assert client.pool_statistics().open_connections == 0
        assert_all_closed(opened, 1)  # closed when the handshake failed, not left to the garbage collector
        with pytest.raises(UpstreamUnavailable):  # every call, streams too
            async with client.generate_stream(PROMPT, {"max_new_tokens": 3}):
                pass
        assert client.pool_statistics().open_connections == 0
        assert_all_closed(opened, 2)
    message = str(info.value)
    assert "TLS handshake failed" in message and "certificate verify failed" in message, message
    assert isinstance(info.value.__cause__.__cause__, ssl.SSLCertVerificationError)
    assert not list(server.handle.engine.request_log)  # no request got through


async def test_a_hostname_mismatch_is_unavailable(start_tls_engine, trusting, opened):
    server = await start_tls_engine()
    mismatched = server.url.replace("127.0.0.1", "localhost")  # the certificate names 127.0.0.1 only
    async with SGLangClient.single_server(mismatched, ssl_context=trusting) as client:
        with pytest.raises(UpstreamUnavailable) as info:
            await client.model_info()
        assert client.pool_statistics().open_connections == 0
        assert_all_closed(opened, 1)
    message = str(info.value)
    assert "TLS handshake failed" in message and "certificate is not valid for 'localhost'" in message, message


async def test_a_handshake_that_never_comes_is_a_connect_timeout(nursery: trio.Nursery, opened):
    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()  # accepts the TCP connection, never answers the ClientHello

    listeners = await nursery.start(functools.partial(trio.serve_tcp, silent, 0, host="127.0.0.1"))
    url = f"https://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    async with SGLangClient(url, connect_timeout=0.2) as client:
        with pytest.raises(UpstreamTimeout) as info, trio.fail_after(HANG_GUARD):
            await client.model_info()
        assert info.value.phase == "connect" and client.pool_statistics().open_connections == 0
        assert_all_closed(opened, 1)


async def test_plain_http_to_a_tls_server_is_a_protocol_error(start_tls_engine):
    """The other way round: not a hang, and not a retry loop."""
    server = await start_tls_engine()
    async with SGLangClient(server.url.replace("https://", "http://"), control_timeout=HANG_GUARD) as client:
        with pytest.raises((UpstreamProtocolError, UpstreamUnavailable)):
            await client.model_info()
        assert client.pool_statistics().open_connections == 0


# -- streams: cuts and cancellation ---------------------------------------------------------------------------


async def test_a_stream_cut_over_tls_is_a_stream_cut_with_the_tokens_so_far(start_tls_engine, trusting, opened):
    server = await start_tls_engine(fault_drop_stream_after=3)
    async with SGLangClient.single_server(server.url, ssl_context=trusting) as client:
        events: list[Event] = []
        with pytest.raises(UpstreamStreamCut) as info, trio.fail_after(HANG_GUARD):
            async with client.generate_stream(PROMPT, LONG) as stream:
                async for event in stream:
                    events.append(event)
        assert client.statistics().open_streams == 0 and client.pool_statistics().open_connections == 0
        assert_all_closed(opened, 1)
    assert [e.index for e in events] == [0, 1, 2]
    record = await wait_recorded(server.handle, stream.rid)
    assert record.dropped_by_fault
    assert info.value.partial.output_ids == tuple(e.token_id for e in events) == record.output_ids[:3]


async def test_a_tls_error_mid_stream_is_a_stream_cut_with_the_tokens_so_far(
    nursery: trio.Nursery, server_pem, trusting, opened
):
    """The first SSE event arrives intact, then bytes that are not a TLS record: the SSL layer fails."""
    first_event = SSE_BODY.split(b"\n\n")[0] + b"\n\n"

    async def corrupt(tls: trio.SSLStream[trio.SocketStream]) -> None:
        await read_request(tls)
        await tls.send_all(STREAM_HEAD + chunked(first_event, 1000)[:-5])  # the final 0-chunk held back
        await trio.sleep(0.05)
        await tls.transport_stream.send_all(b"\x17\x03\x03\x00\x20" + b"\x00" * 32)  # a forged record
        await trio.sleep_forever()

    url = await serve_raw_tls(nursery, server_pem, corrupt)
    async with SGLangClient(url, ssl_context=trusting) as client:
        events: list[Event] = []
        with pytest.raises(UpstreamStreamCut) as info, trio.fail_after(HANG_GUARD):
            async with client.generate_stream([1], return_logprob=False) as stream:
                async for event in stream:
                    events.append(event)
        assert client.pool_statistics().open_connections == 0
        assert_all_closed(opened, 1)
    assert [e.token_id for e in events] == [5] and isinstance(events[0], Token)
    assert info.value.partial.output_ids == (5,) and info.value.partial.rid == stream.rid
    assert "SSLError" in str(info.value), str(info.value)
    assert isinstance(info.value.__cause__, trio.BrokenResourceError)
    assert isinstance(info.value.__cause__.__cause__, ssl.SSLError)


@pytest.mark.parametrize("how", ["break", "cancel"])
async def test_leaving_a_tls_stream_early_closes_its_connection(start_tls_engine, trusting, opened, how: str):
    server = await start_tls_engine(token_rate=100)
    async with SGLangClient.single_server(server.url, ssl_context=trusting) as client:
        await client.generate(PROMPT, {"max_new_tokens": 1})  # a pooled TLS connection, reused by the stream
        with trio.CancelScope() as scope:
            async with client.generate_stream(PROMPT, LONG) as stream:
                async for event in stream:
                    if isinstance(event, Token) and event.index == 2:
                        if how == "break":
                            break
                        scope.cancel()
        assert scope.cancelled_caught == (how == "cancel")
        pool = client.pool_statistics()
        assert (pool.open_connections, pool.connections_reused) == (0, 1)  # closed, not pooled
        assert_all_closed(opened, 1)
        record = await wait_recorded(server.handle, stream.rid)  # the engine saw the disconnect and stopped
        assert record.client_disconnected and record.finish_reason["type"] == "abort"
        await client.generate(PROMPT, {"max_new_tokens": 1})  # a new TLS connection
        assert client.pool_statistics().connections_opened == 2
    assert_all_closed(opened, 2)  # aclose closed the pooled one


async def test_a_finished_tls_stream_is_drained_and_its_connection_reused(start_tls_engine, trusting):
    server = await start_tls_engine()
    async with SGLangClient.single_server(server.url, ssl_context=trusting) as client:
        async with client.generate_stream(PROMPT, {"max_new_tokens": 4}) as stream:
            async for event in stream:
                if isinstance(event, Finished):
                    break
        await client.generate(PROMPT, {"max_new_tokens": 1})
        pool = client.pool_statistics()
    assert (pool.connections_opened, pool.connections_reused) == (1, 1)


async def test_an_idle_tls_connection_closed_by_the_server_is_detected_and_replaced(
    nursery: trio.Nursery, server_pem, trusting
):
    """The server's keep-alive timeout over TLS: close_notify (or a bare FIN) makes the idle socket readable."""
    reply = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 65\r\n\r\n" \
            b'{"model_path":"org/m","weight_version":"w1","is_generation":true}'
    closed = trio.Semaphore(0)

    async def answer_once(tls: trio.SSLStream[trio.SocketStream]) -> None:
        await read_request(tls)
        await tls.send_all(reply)
        with trio.move_on_after(0.05):
            await tls.unwrap()  # sends close_notify (and waits for the client's, which never comes)
        await trio.aclose_forcefully(tls)
        closed.release()

    url = await serve_raw_tls(nursery, server_pem, answer_once)
    async with SGLangClient(url, ssl_context=trusting) as client:
        assert (await client.model_info()).weight_version == "w1"
        with trio.fail_after(HANG_GUARD):
            await closed.acquire()
        await trio.sleep(0.05)  # the close has reached the client's socket
        assert (await client.model_info()).weight_version == "w1"
        pool = client.pool_statistics()
    assert (pool.connections_opened, pool.stale_discarded, pool.retries) == (2, 1, 0)


# -- translation ------------------------------------------------------------------------------------------------


def test_tls_errors_are_translated_like_the_other_connection_errors():
    partial = Partial("r", (1, 2))
    verify = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    broken = trio.BrokenResourceError()
    broken.__cause__ = verify
    connect = translate(broken, url="https://x", phase="connect")
    assert type(connect) is UpstreamUnavailable
    assert "TLS handshake failed" in str(connect) and "certificate verify failed" in str(connect)
    bad_record = trio.BrokenResourceError()
    bad_record.__cause__ = ssl.SSLError(1, "[SSL: DECRYPTION_FAILED_OR_BAD_RECORD_MAC] bad record mac")
    cut = translate(bad_record, url="https://x", phase="read", partial=partial)
    assert type(cut) is UpstreamStreamCut and cut.partial == partial and "bad record mac" in str(cut)
    for phase in ("write", "read"):
        assert type(translate(bad_record, url="https://x", phase=phase)) is UpstreamUnavailable
    raw = ssl.SSLError(1, "[SSL] something")  # an SSLError not wrapped by trio (an OSError subclass)
    assert "TLS handshake failed" in str(translate(raw, url="https://x", phase="connect"))

