"""The upstream timeouts (docs/operations.md, "Limits and timeouts"): ``--upstream-connect-timeout`` against an
upstream whose connections never complete, ``--upstream-read-timeout`` against the embedded engine gone silent
(a scripted first-token latency; an in-place pause sent to the engine behind the proxy's back, mid-stream). Each
ends as any upstream failure does: 502 ``upstream_unavailable``, or an SSE error event and ``[DONE]`` on a stream
already under way, with nothing committed and the session still usable."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import trio

from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from tests.e2e.conftest import start_proxy  # noqa: F401 - the fixture
from tests.e2e.harness import SDK_OPTIONS
from tests.e2e.test_upstream_faults import settled

USER = [{"role": "user", "content": "hello"}]
SHORT = 0.5  # seconds: the timeouts under test


@pytest.fixture
def unconnectable_url() -> Iterator[str]:
    """A port whose connections never complete: a listener with a backlog of one, already taken, so the kernel
    drops further SYNs (the client's connect waits, as for a host that does not answer)."""
    with socket.socket() as listener, socket.socket() as taken:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        taken.connect(listener.getsockname())
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


async def test_an_upstream_that_does_not_accept_is_502_after_upstream_connect_timeout(
    nursery: trio.Nursery, qwen3_path: Path, unconnectable_url: str
) -> None:
    config = ProxyConfig(
        port=0, tokenizer_path=qwen3_path, sglang_router_url=unconnectable_url, upstream_connect_timeout=0.2,
        tool_call_parse_backend="local", reasoning_parse_backend="local",
    )
    with trio.fail_after(60):
        handle = await nursery.start(run_proxy, config)
    # The default (10 s) would still be connecting when this bound ends.
    with trio.fail_after(8):
        async with openai.AsyncOpenAI(base_url=handle.url + "/v1", **SDK_OPTIONS) as client:
            with pytest.raises(openai.APIStatusError) as info:
                await client.chat.completions.create(model="m", messages=USER, extra_headers={"X-Session-Id": "c"})
    assert info.value.status_code == 502
    error = info.value.body
    assert error["code"] == "upstream_unavailable" and "connect timeout" in error["message"], error
    assert "127.0.0.1" not in error["message"]


async def test_an_upstream_silent_past_upstream_read_timeout_is_502(start_proxy) -> None:
    proxy = await start_proxy(
        upstream_read_timeout=SHORT,
        script=[{"session": "slow", "output": "Late.", "latency": 3600}, {"session": "slow", "output": "Now."}],
    )
    with trio.fail_after(30):
        async with proxy.async_client() as client:
            with pytest.raises(openai.APIStatusError) as info:
                await client.chat.completions.create(model="m", messages=USER, extra_headers={"X-Session-Id": "slow"})
            assert (await settled(proxy, "slow"))["steps"] == 0
            retry = await client.chat.completions.create(model="m", messages=USER, extra_headers={"X-Session-Id": "slow"})
    assert info.value.status_code == 502
    error = info.value.body
    assert error["code"] == "upstream_unavailable" and "read timeout" in error["message"], error
    assert retry.choices[0].message.content == "Now."


async def test_a_stream_that_goes_silent_past_upstream_read_timeout_ends_with_an_sse_error(start_proxy) -> None:
    """Tokens arrive, then the engine is paused in place behind the proxy's back: the stream goes silent, and the
    read timeout ends it with an error event and ``[DONE]``; nothing is committed, and after the engine resumes the
    same request succeeds."""
    output = "A reply long enough to be paused in the middle of it, one word at a time."
    proxy = await start_proxy(
        upstream_read_timeout=SHORT,
        script=[{"session": "mid", "output": output, "token_rate": 50}, {"session": "mid", "output": "Again."}],
    )
    engine = proxy.engine_handle.url
    body = {"messages": USER, "stream": True}
    with trio.fail_after(30):
        async with httpx.AsyncClient(timeout=None) as client:
            async with client.stream(
                "POST", proxy.url + "/v1/chat/completions", json=body, headers={"X-Session-Id": "mid"}
            ) as response:
                assert response.status_code == 200
                frames = []
                async for frame in response.aiter_text():
                    if not frames:  # tokens have arrived: silence the engine
                        paused = await client.post(engine + "/pause_generation", json={"mode": "in_place"})
                        assert paused.status_code == 200, paused.text
                    frames.append(frame)
            assert (await settled(proxy, "mid"))["steps"] == 0
            assert (await client.post(engine + "/continue_generation", json={})).status_code == 200
            async with proxy.async_client() as sdk:
                retry = await sdk.chat.completions.create(model="m", messages=USER, extra_headers={"X-Session-Id": "mid"})
    events = [event.removeprefix("data: ") for event in "".join(frames).split("\n\n") if event]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert (error["code"], error["type"]) == ("upstream_unavailable", "upstream_error"), error
    assert "read timeout" in error["message"]
    content = "".join(
        json.loads(event)["choices"][0]["delta"].get("content") or "" for event in events[:-2]
        if json.loads(event).get("choices")
    )
    assert content and output.startswith(content) and content != output  # cut in the middle
    assert retry.choices[0].message.content in ("Again.", output)
