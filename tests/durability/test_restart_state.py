"""What a restart after kill -9 must keep (issue 16, item 2 and 4), on a real proxy process over SQLite:

- a finalized session id stays finalized: a late step gets the answer it got before the crash (and a drained one
  too), finalize answers as the first time, and a read of a drained session answers "nothing stored", not "unknown
  session", also when it was drained by the new process;
- a drained-but-unacknowledged read survives the crash: its segments come back (after restart and lease expiry)
  with the same bytes, and acknowledging them then empties the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from tests.durability.conftest import sqlite_url
from tests.durability.proxy_process import ProxyProcess
from tests.durability.workload import canonical

#: the read lease of these proxies (seconds): short, so the lost read's segments come back soon
LEASE = 1.0
#: bound on every wait of these tests (never asserted on)
BOUND = 120.0


async def _post(proxy: ProxyProcess, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    _, url = await proxy.current()
    async with httpx.AsyncClient(timeout=60.0) as client:
        return await client.post(url + path, json=body, headers=headers)


async def _step(proxy: ProxyProcess, session_id: str, question: str) -> httpx.Response:
    body = {"model": "m", "max_tokens": 64, "chat_template_kwargs": {"enable_thinking": False},
            "messages": [{"role": "user", "content": question}]}
    return await _post(proxy, "/v1/chat/completions", body, **{"X-Session-Id": session_id})


def _refusal(response: httpx.Response) -> tuple[int, str | None]:
    return response.status_code, response.json().get("error", {}).get("code")


async def _start(nursery: trio.Nursery, qwen3_path: Path, tmp_path: Path) -> ProxyProcess:
    """A supervised proxy process on a SQLite file, with a short read lease."""
    proxy = ProxyProcess(store=sqlite_url(tmp_path), tokenizer_path=qwen3_path, logs=tmp_path,
                         flags=("--read-lease-seconds", str(LEASE)))
    with trio.fail_after(BOUND):
        await nursery.start(proxy.supervise)
    return proxy


async def test_a_finalized_session_stays_finalized_after_kill_9(qwen3_path: Path, tmp_path: Path,
                                                               nursery: trio.Nursery) -> None:
    proxy = await _start(nursery, qwen3_path, tmp_path)
    with trio.fail_after(BOUND):
        for session_id in ("late-finalized", "late-drained", "drained-after"):
            assert (await _step(proxy, session_id, "first question")).status_code == 200
        finalized = (await _post(proxy, "/session/finalize", {"session_id": "late-finalized"})).json()
        for session_id in ("late-drained", "drained-after"):
            await _post(proxy, "/session/finalize", {"session_id": session_id})
        drained = (await _post(proxy, "/trajectory/read", {"session_id": "late-drained", "drain": True})).json()
        if drained.get("lease_id"):
            await _post(proxy, "/trajectory/ack", {"lease_id": drained["lease_id"]})
        segments = (await _post(proxy, "/trajectory/read", {"session_id": "late-finalized"})).json()["data"]
        before = {sid: _refusal(await _step(proxy, sid, "a late question")) for sid in ("late-finalized", "late-drained")}
        assert all(status >= 400 for status, _ in before.values()), before
        emptied = await _post(proxy, "/trajectory/read", {"session_id": "late-drained"})
        assert (emptied.status_code, emptied.json()) == (200, {"data": []})

        assert await proxy.kill_and_restart()

        after = {sid: _refusal(await _step(proxy, sid, "a late question")) for sid in ("late-finalized", "late-drained")}
        assert after == before, proxy.log_text()
        assert (await _post(proxy, "/session/finalize", {"session_id": "late-finalized"})).json() == finalized
        again = (await _post(proxy, "/trajectory/read", {"session_id": "late-finalized"})).json()["data"]
        assert [canonical(s) for s in again] == [canonical(s) for s in segments]
        # The drained session is still known as such (nothing stored), not an unknown id; so is one finalized before
        # the crash and drained after it, which the new process never loaded.
        emptied = await _post(proxy, "/trajectory/read", {"session_id": "late-drained"})
        assert (emptied.status_code, emptied.json()) == (200, {"data": []}), proxy.log_text()
        drained_after = (await _post(proxy, "/trajectory/read", {"session_id": "drained-after", "drain": True})).json()
        assert drained_after["data"] and drained_after["lease_id"]
        await _post(proxy, "/trajectory/ack", {"lease_id": drained_after["lease_id"]})
        emptied = await _post(proxy, "/trajectory/read", {"session_id": "drained-after"})
        assert (emptied.status_code, emptied.json()) == (200, {"data": []}), emptied.text
    assert [d.killed_by_test for d in proxy.deaths] == [True]


async def test_a_drained_but_unacknowledged_read_survives_kill_9(qwen3_path: Path, tmp_path: Path,
                                                                nursery: trio.Nursery) -> None:
    proxy = await _start(nursery, qwen3_path, tmp_path)
    with trio.fail_after(BOUND):
        for question in ("one", "two"):
            assert (await _step(proxy, "unacked", question)).status_code == 200
        assert (await _post(proxy, "/session/finalize", {"session_id": "unacked"})).status_code == 200
        read = (await _post(proxy, "/trajectory/read", {"session_id": "unacked", "drain": True})).json()
        assert read["data"] and read.get("lease_id"), read  # two-phase: leased, not deleted
        # The trainer crashes with the proxy before acknowledging.
        assert await proxy.kill_and_restart()

        while not (back := (await _post(proxy, "/trajectory/read", {"session_id": "unacked", "drain": True})).json())["data"]:
            await trio.sleep(LEASE / 4)
        assert [canonical(s) for s in back["data"]] == [canonical(s) for s in read["data"]]
        ack = (await _post(proxy, "/trajectory/ack", {"lease_id": back["lease_id"]})).json()
        assert ack["acknowledged"] == len(read["data"]), ack
        _, url = await proxy.current()
        async with httpx.AsyncClient() as client:
            stats = (await client.get(url + "/trajectory/stats")).json()
        assert (stats["segments"], stats["leased_segments"]) == (0, 0), stats
