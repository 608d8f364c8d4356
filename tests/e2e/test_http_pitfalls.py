"""Regression tests for stack-notes pitfalls 1 and 2 on the chat-completions route.

1. hypercorn + quart-trio hang a keep-alive connection when the answer goes out before the request body arrived:
   send the headers, wait, then the body; the second request on the same raw connection must be answered. Both for
   a normal answer and for an early error (400 ``missing_session_id``).
2. Quart's 60 s ``RESPONSE_TIMEOUT`` / ``BODY_TIMEOUT`` silently cut long streams: a stream lasting well over 60 s
   of trio's mock clock (a slow engine token rate; no wall-clock wait) arrives whole, token by token.
"""

from __future__ import annotations

import json

import httpx
import pytest
import trio
import trio.testing

NO_THINKING = {"enable_thinking": False}


async def read_response(stream: trio.SocketStream, buffer: bytearray) -> tuple[int, bytes]:
    """One HTTP/1.1 response with a Content-Length body from ``stream`` (leftover bytes stay in ``buffer``)."""
    while b"\r\n\r\n" not in buffer:
        data = await stream.receive_some(65536)
        assert data, "connection closed before a response"
        buffer += data
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers["content-length"])
    body = bytearray(rest)
    while len(body) < length:
        data = await stream.receive_some(65536)
        assert data, "connection closed inside a body"
        body += data
    buffer[:] = body[length:]
    return status, bytes(body[:length])


def request_head(body: bytes, headers: dict[str, str]) -> bytes:
    lines = ["POST /v1/chat/completions HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
             f"Content-Length: {len(body)}"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize("early_error", [False, True], ids=["answer", "early-400"])
async def test_headers_then_a_pause_then_the_body_and_the_connection_still_serves_a_second_request(
    start_proxy, early_error
) -> None:
    proxy = await start_proxy(script=[{"session": "*", "output": "Fine."}, {"session": "*", "output": "Again."}])
    host, port = proxy.url.removeprefix("http://").split(":")
    body = json.dumps({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}).encode()
    first_headers = {} if early_error else {"X-Session-Id": "keepalive"}
    with trio.fail_after(20):
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            buffer = bytearray()
            await stream.send_all(request_head(body, first_headers))
            await trio.sleep(0.3)  # the server sees the headers alone first
            await stream.send_all(body)
            status, answer = await read_response(stream, buffer)
            if early_error:
                assert status == 400 and json.loads(answer)["error"]["code"] == "missing_session_id"
            else:
                assert status == 200 and json.loads(answer)["choices"][0]["message"]["content"] == "Fine."
            # The same connection answers the next request.
            await stream.send_all(request_head(body, {"X-Session-Id": "keepalive-2"}) + body)
            status, answer = await read_response(stream, buffer)
            assert status == 200, answer


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    """Trio's mock clock, jumping once every task has been blocked 20 ms of real time (loopback I/O in between
    must not count as idle, or connect timeouts would fire)."""
    return trio.testing.MockClock(autojump_threshold=0.02)


async def test_a_stream_longer_than_quarts_60_second_timeouts_is_not_cut(start_proxy, mock_clock) -> None:
    words = " ".join(f"w{i}" for i in range(24))  # ~48 tokens at 0.5 token/s: about 96 s of mock time
    proxy = await start_proxy(script=[{"session": "long", "output": words}], engine={"token_rate": 0.5})
    start = trio.current_time()
    arrivals: list[tuple[float, str]] = []
    events = []
    body = {"messages": [{"role": "user", "content": "go slowly"}], "stream": True,
            "chat_template_kwargs": NO_THINKING}
    async with httpx.AsyncClient(timeout=None) as client:
        async with client.stream("POST", proxy.url + "/v1/chat/completions", json=body,
                                 headers={"X-Session-Id": "long"}) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line[len("data: "):]
                events.append(payload)
                if payload != "[DONE]":
                    for choice in json.loads(payload)["choices"]:
                        if choice["delta"].get("content"):
                            arrivals.append((trio.current_time() - start, choice["delta"]["content"]))
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "stop"
    assert "".join(text for _, text in arrivals) == words
    # Tokens arrived as they were generated, and the stream lasted well past 60 s.
    assert arrivals[0][0] < 10
    assert arrivals[-1][0] > 70
