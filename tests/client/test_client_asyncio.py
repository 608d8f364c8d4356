"""ProxyClient under asyncio: plain sync tests that run ``asyncio.run`` while the proxy serves from its own trio run
in a background thread (``ProxyThread``), so the client really runs on an asyncio event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import sniffio

from proxy.client import FinalizeResult, ProxyClient, ProxyError
from tests.rollout.harness import ProxyThread, record_calculator_session


@pytest.fixture(scope="module")
def proxy_thread(qwen3_path: Path) -> Iterator[ProxyThread]:
    with ProxyThread(qwen3_path) as running:
        yield running


def test_client_works_under_asyncio(proxy_thread: ProxyThread) -> None:
    proxy_thread.call(record_calculator_session, proxy_thread.stack.services, "asyncio-1")

    async def scenario() -> None:
        assert sniffio.current_async_library() == "asyncio"
        async with ProxyClient(proxy_thread.stack.url) as proxy:
            health, models, debug = await asyncio.gather(
                proxy.health(), proxy.models(), proxy.session_debug("asyncio-1")
            )
            assert health["status"] == "ok" and models and debug["steps"] == 2
            result = await proxy.finalize_session("asyncio-1", "inst", {"reward": 2.0})
            assert result == FinalizeResult("asyncio-1", 1, 2, ("asyncio-1:0",))
            async with proxy.drain_trajectories(session_id="asyncio-1") as segments:
                (segment,) = segments
            assert segment["instance_id"] == "inst" and segment["reward_info"] == {"reward": 2.0}
            assert (await proxy.stats()).drained_segments >= 1
            with pytest.raises(ProxyError) as caught:
                await proxy.read_trajectory(trajectory_id="asyncio-1:0")
            assert caught.value.code == "not_found"

    asyncio.run(scenario())


def test_client_survives_many_concurrent_asyncio_requests(proxy_thread: ProxyThread) -> None:
    async def scenario() -> None:
        async with ProxyClient(proxy_thread.stack.url) as proxy:
            results = await asyncio.gather(*(proxy.finalize_session(f"many-{i}") for i in range(50)))
        assert [r.session_id for r in results] == [f"many-{i}" for i in range(50)]

    asyncio.run(scenario())


def test_client_chat_completions_and_streaming_under_asyncio(proxy_thread: ProxyThread) -> None:
    ask = [{"role": "user", "content": "Say something."}]

    async def scenario() -> None:
        async with ProxyClient(proxy_thread.stack.url) as proxy:
            answer = await proxy.chat_completions({"messages": ask}, session_id="asyncio-chat")
            assert answer["choices"][0]["finish_reason"] == "stop"
            history = ask + [answer["choices"][0]["message"], {"role": "user", "content": "More."}]
            async with proxy.stream_chat_completions({"messages": history}, session_id="asyncio-chat") as chunks:
                events = [chunk async for chunk in chunks]
            assert events and events[-1]["choices"][0]["finish_reason"] == "stop"
            result = await proxy.finalize_session("asyncio-chat")
            assert (result.segments, result.steps) == (1, 2)

    asyncio.run(scenario())
