"""Memory has a budget, end to end (issue 15 item 3): ``run_proxy`` starts the reaper; an idle session is finalized
with reason ``idle_timeout``, its segments wait for the trainer, a late step is refused, and ``/trajectory/stats``
and ``/health`` show the counts and approximate bytes until the drained tombstone expires.

The proxy runs on its embedded engine over real sockets, on trio's ``MockClock`` with an autojump threshold (as
the pause tests do): when nothing happens for 20 ms of real time, virtual time jumps to the next deadline, so the
idle timeout and the TTL pass without waiting for them.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
import trio
import trio.testing

from tests.e2e.harness import session_headers

IDLE = 120.0
TTL = 600.0
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.02)


async def get(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=None) as client:
        response = await client.get(url)
    assert response.status_code == 200, response.text
    return response.json()


async def test_idle_session_is_finalized_and_its_tombstone_expires_over_http(start_proxy, mock_clock) -> None:
    proxy = await start_proxy(session_idle_timeout=IDLE, tombstone_ttl=TTL)
    before = await get(proxy.url + "/trajectory/stats")
    async with proxy.async_client() as client:
        answer = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello"}], max_tokens=8,
            extra_headers=session_headers("idle-1"), extra_body=NO_THINKING,
        )
        holding = await get(proxy.url + "/trajectory/stats")
        # The active session holds its step: counted by the registry, nothing in the store yet.
        assert holding["registry_sessions"] == 1 and holding["registry_tombstones"] == 0
        assert holding["registry_bytes"] > 0 and holding["bytes"] == 0
        await trio.sleep(IDLE * 1.5)
        stats = await get(proxy.url + "/trajectory/stats")
        assert (stats["idle_finalized_sessions"], stats["sessions"], stats["segments"]) == (1, 1, 1)
        assert stats["registry_tombstones"] == 1 and stats["bytes"] > 0
        assert stats["approximate_bytes"] == stats["registry_bytes"] + stats["bytes"]
        health = await get(proxy.url + "/health")
        assert health["sessions"]["tombstones"] == 1 and health["sessions"]["idle_finalized"] == 1
        assert health["store"]["approximate_bytes"] == stats["approximate_bytes"]
        assert (await proxy.debug("idle-1"))["finalize_reason"] == "idle_timeout"
        # A late step of the session is refused like any step after finalize.
        with pytest.raises(openai.BadRequestError) as late:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hello"},
                                     {"role": "assistant", "content": answer.choices[0].message.content},
                                     {"role": "user", "content": "again"}],
                max_tokens=8, extra_headers=session_headers("idle-1"), extra_body=NO_THINKING,
            )
        assert late.value.code == "session_finalized"
    # The trainer drains the segments, which say why the session ended.
    drained = await proxy.post("/trajectory/read", {"session_id": "idle-1", "drain": True})
    (segment,) = drained.json()["data"]
    acked = await proxy.post("/trajectory/ack", {"lease_id": drained.json()["lease_id"]})
    assert acked.json() == {"acknowledged": 1}
    assert segment["finalize_reason"] == "idle_timeout" and segment["reward_info"] is None
    await trio.sleep(TTL * 1.5)
    after = await get(proxy.url + "/trajectory/stats")
    assert await proxy.debug("idle-1") is None
    assert (after["registry_sessions"], after["sessions"], after["expired_tombstones"]) == (0, 0, 1)
    assert (after["registry_bytes"], after["bytes"], after["approximate_bytes"]) == (0, 0, 0)
    assert {key: before[key] for key in ("registry_sessions", "registry_bytes", "bytes")} == {
        key: after[key] for key in ("registry_sessions", "registry_bytes", "bytes")
    }
