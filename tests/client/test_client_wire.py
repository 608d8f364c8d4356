"""What ProxyClient sends and how it reads answers, against ``httpx.MockTransport`` (no server).

The ``/v1/rollout/*`` methods are checked here for their requests and result parsing; ``test_client_pause.py``
exercises them against the real proxy.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from proxy.client import PauseState, ProxyClient, ProxyError, session_headers

Handler = Callable[[httpx.Request], httpx.Response]


def recording(answer: Handler) -> tuple[list[httpx.Request], httpx.MockTransport]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer(request)

    return seen, httpx.MockTransport(handler)


def ok(body: object) -> Handler:
    return lambda _request: httpx.Response(200, json=body)


async def test_chat_completions_sends_the_session_headers_and_the_payload() -> None:
    seen, transport = recording(ok({"object": "chat.completion", "choices": []}))
    async with ProxyClient("http://proxy", transport=transport, headers={"Authorization": "Bearer x"}) as proxy:
        answer = await proxy.chat_completions({"messages": [{"role": "user", "content": "hi"}]},
                                              session_id="s1", instance_id="i1", turn_id=3,  # type: ignore[arg-type]
                                              extra_headers={"X-SMG-Routing-Key": "s1"})
    assert answer["object"] == "chat.completion"
    (request,) = seen
    assert (request.method, request.url.path) == ("POST", "/v1/chat/completions")
    assert request.headers["X-Session-Id"] == "s1" and request.headers["X-Instance-Id"] == "i1"
    assert request.headers["X-Turn-Id"] == "3" and request.headers["X-SMG-Routing-Key"] == "s1"
    assert request.headers["Authorization"] == "Bearer x"
    assert json.loads(request.content) == {"messages": [{"role": "user", "content": "hi"}]}


async def test_chat_completions_refuses_stream_true() -> None:
    async with ProxyClient("http://proxy", transport=httpx.MockTransport(ok({}))) as proxy:
        with pytest.raises(ValueError, match="stream_chat_completions"):
            await proxy.chat_completions({"messages": [], "stream": True}, session_id="s")


def test_session_headers_leave_out_absent_ids() -> None:
    assert session_headers("s") == {"X-Session-Id": "s"}
    assert session_headers(None, turn_id="t") == {"X-Turn-Id": "t"}


SSE = (
    b'data: {"object":"chat.completion.chunk","choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"object":"chat.completion.chunk","choices":[{"delta":{"content":"Hi"}}]}\n\n'
    b": a comment\n\n"
    b"data: [DONE]\n\n"
)


async def test_stream_chat_completions_yields_chunks_until_done() -> None:
    seen, transport = recording(lambda _r: httpx.Response(200, content=SSE,
                                                           headers={"Content-Type": "text/event-stream"}))
    async with ProxyClient("http://proxy", transport=transport) as proxy:
        async with proxy.stream_chat_completions({"messages": []}, session_id="s1") as chunks:
            events = [chunk async for chunk in chunks]
    assert [e["choices"][0]["delta"].get("content") for e in events] == ["", "Hi"]
    assert json.loads(seen[0].content)["stream"] is True and seen[0].headers["X-Session-Id"] == "s1"


async def test_stream_chat_completions_error_event_raises_with_the_codes_status() -> None:
    body = b'data: {"error":{"message":"gone","type":"upstream_error","param":null,"code":"upstream_unavailable"}}\n\n'
    transport = httpx.MockTransport(lambda _r: httpx.Response(200, content=body + b"data: [DONE]\n\n"))
    async with ProxyClient("http://proxy", transport=transport) as proxy:
        async with proxy.stream_chat_completions({"messages": []}, session_id="s1") as chunks:
            with pytest.raises(ProxyError) as caught:
                async for _chunk in chunks:
                    pass
    assert (caught.value.status, caught.value.code, caught.value.message) == (502, "upstream_unavailable", "gone")


async def test_stream_chat_completions_error_answer_raises_on_entry() -> None:
    error = {"error": {"message": "no session", "type": "invalid_request_error", "param": "X-Session-Id",
                       "code": "missing_session_id"}}
    transport = httpx.MockTransport(lambda _r: httpx.Response(400, json=error))
    async with ProxyClient("http://proxy", transport=transport) as proxy:
        with pytest.raises(ProxyError) as caught:
            async with proxy.stream_chat_completions({"messages": []}):
                raise AssertionError("not reached")
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, "missing_session_id", "X-Session-Id")


async def test_pause_resume_and_pause_state_requests() -> None:
    state = {"state": "PAUSED", "epoch": 2, "weight_version": "w2", "in_flight": 0, "waiting": 3, "extra": 1}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=state if request.method == "GET" else {"status": "ok"})

    seen, transport = recording(answer)
    async with ProxyClient("http://proxy", transport=transport) as proxy:
        assert await proxy.pause() == {"status": "ok"}
        await proxy.resume()
        await proxy.resume(weight_version="w3")
        gate = await proxy.pause_state()
    assert [(r.method, r.url.path) for r in seen] == [
        ("POST", "/v1/rollout/pause"), ("POST", "/v1/rollout/resume"), ("POST", "/v1/rollout/resume"),
        ("GET", "/v1/rollout/pause_state"),
    ]
    assert json.loads(seen[1].content) == {} and json.loads(seen[2].content) == {"weight_version": "w3"}
    assert gate == PauseState("PAUSED", 2, "w2", 0, 3)
    assert gate.raw["extra"] == 1


async def test_finalize_and_read_bodies_leave_out_absent_fields() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/session/finalize":
            return httpx.Response(200, json={"session_id": "s", "segments": 0, "steps": 0, "trajectory_ids": []})
        return httpx.Response(200, json={"data": []})

    seen, transport = recording(answer)
    async with ProxyClient("http://proxy", transport=transport) as proxy:
        await proxy.finalize_session("s")
        await proxy.finalize_session("s", "i", {"r": 1}, rollout_id="ro")
        await proxy.read_trajectory(session_id="s")
        await proxy.read_trajectory(trajectory_id="s:0", drain=True)
    assert [json.loads(r.content) for r in seen] == [
        {"session_id": "s"},
        {"session_id": "s", "instance_id": "i", "reward_info": {"r": 1}, "rollout_id": "ro"},
        {"drain": False, "session_id": "s"},
        {"drain": True, "trajectory_id": "s:0"},
    ]


async def test_session_debug_encodes_the_id_as_one_path_segment() -> None:
    seen, transport = recording(ok({}))
    async with ProxyClient("http://proxy", transport=transport) as proxy:
        await proxy.session_debug("a/b ../?#%")
    assert seen[0].url.raw_path == b"/session/a%2Fb%20%2E%2E%2F%3F%23%25"


@pytest.mark.parametrize(
    ("status", "body", "code", "message"),
    [
        (502, b"<html>bad gateway</html>", "http_502", "<html>bad gateway</html>"),
        (404, b"", "http_404", "HTTP 404"),
        (400, b'{"error": "just a string"}', "http_400", '{"error": "just a string"}'),
        (503, b'{"error": {"message": "paused", "code": "paused_timeout", "retry_after": 3}}', "paused_timeout",
         "paused"),
    ],
)
async def test_error_answers_in_any_shape_become_proxy_errors(status: int, body: bytes, code: str,
                                                              message: str) -> None:
    transport = httpx.MockTransport(lambda _r: httpx.Response(status, content=body))
    async with ProxyClient("http://proxy", transport=transport) as proxy:
        with pytest.raises(ProxyError) as caught:
            await proxy.health()
    assert (caught.value.status, caught.value.code, caught.value.message) == (status, code, message)


async def test_a_2xx_answer_that_is_not_json_is_an_invalid_response() -> None:
    transport = httpx.MockTransport(lambda _r: httpx.Response(200, content=b"ok"))
    async with ProxyClient("http://proxy", transport=transport) as proxy:
        with pytest.raises(ProxyError) as caught:
            await proxy.stats()
    assert caught.value.code == "invalid_response"


async def test_stream_only_error_codes_keep_their_status() -> None:
    body = (b'data: {"error":{"message":"void","type":"server_error","param":null,"code":"generation_restarted"}}\n\n'
            b"data: [DONE]\n\n")
    transport = httpx.MockTransport(lambda _r: httpx.Response(200, content=body))
    async with ProxyClient("http://proxy", transport=transport) as proxy:
        async with proxy.stream_chat_completions({"messages": []}, session_id="s1") as chunks:
            with pytest.raises(ProxyError) as caught:
                async for _chunk in chunks:
                    pass
    assert (caught.value.status, caught.value.code) == (503, "generation_restarted")


def draining_proxy(segments: list[dict], lease_id: str | None) -> Handler:
    """Answers a draining read with ``segments`` under ``lease_id``, and an ack with how many it held."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/trajectory/ack":
            held = json.loads(request.content)["lease_id"] == lease_id
            return httpx.Response(200, json={"acknowledged": len(segments) if held else 0})
        if not json.loads(request.content)["drain"]:
            return httpx.Response(200, json={"data": segments})
        return httpx.Response(200, json={"data": segments, "lease_id": lease_id, "lease_seconds": 30.0})

    return answer


async def test_drain_trajectories_acknowledges_only_after_the_block_succeeds() -> None:
    segments = [{"trajectory_id": "s:0"}, {"trajectory_id": "s:1"}]
    seen, transport = recording(draining_proxy(segments, "lease-7"))
    async with ProxyClient("http://proxy", transport=transport) as proxy:
        with pytest.raises(RuntimeError):
            async with proxy.drain_trajectories(session_id="s") as read:
                assert (read, read.lease_id, read.lease_seconds) == (segments, "lease-7", 30.0)
                raise RuntimeError("the trainer could not keep them")
        assert [r.url.path for r in seen] == ["/trajectory/read"]  # no ack: the lease will expire
        async with proxy.drain_trajectories(trajectory_id="s:1") as read:
            assert read.trajectory_ids == ["s:0", "s:1"]
        assert [r.url.path for r in seen] == ["/trajectory/read", "/trajectory/read", "/trajectory/ack"]
        assert json.loads(seen[1].content) == {"drain": True, "trajectory_id": "s:1"}
        assert json.loads(seen[2].content) == {"lease_id": "lease-7"}
        # acknowledge takes the read or its id; a read that leased nothing costs no request.
        assert await proxy.acknowledge("lease-7") == 2 and await proxy.acknowledge("other") == 0
        assert await proxy.acknowledge(await proxy.read_trajectory(session_id="s")) == 0  # no drain: no lease
    assert len(seen) == 6


async def test_a_drain_of_nothing_sends_no_ack() -> None:
    seen, transport = recording(draining_proxy([], None))
    async with ProxyClient("http://proxy", transport=transport) as proxy:
        async with proxy.drain_trajectories(session_id="s") as read:
            assert (read, read.lease_id, read.lease_seconds) == ([], None, None)
    assert [r.url.path for r in seen] == ["/trajectory/read"]
