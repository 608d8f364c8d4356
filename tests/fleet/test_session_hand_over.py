"""A session moves between two proxies of a fleet and continues from the store; the stale owner's commit is fenced
(issue 16 item 5). Two real proxies (``run_proxy`` over real sockets) share one ``InMemoryTrajectoryStore(shared=True)``
and one engine, as proxy processes share a PostgreSQL store; their registries use ``StoreLeases``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from engine import EngineConfig, serve_engine
from proxy.trajectory.memory_store import InMemoryTrajectoryStore

SESSION = "moving-1"


async def chat(client: httpx.AsyncClient, url: str, messages: list[dict[str, Any]]) -> httpx.Response:
    return await client.post(url + "/v1/chat/completions", headers={"X-Session-Id": SESSION},
                             json={"model": "m", "messages": messages, "max_tokens": 256, "return_token_ids": True})


def turn(answer: httpx.Response, user: str) -> list[dict[str, Any]]:
    assert answer.status_code == 200, answer.text
    return [{"role": "assistant", "content": answer.json()["choices"][0]["message"]["content"]},
            {"role": "user", "content": user}]


async def test_a_session_moves_between_proxies_continues_from_the_store_and_the_stale_owner_is_fenced(
    start_member, nursery: trio.Nursery, qwen3_path: Path,
):
    # Every generation takes a while: the stale owner's is still running when the session moves.
    slow = await nursery.start(serve_engine, EngineConfig(port=0, tokenizer_path=qwen3_path,
                                                          first_token_latency=1.0))
    store = InMemoryTrajectoryStore(shared=True)
    a = await start_member(store, router_url=slow.url)
    b = await start_member(store, router_url=slow.url)
    owner_a = a.services.sessions.leases.owner
    messages = [{"role": "user", "content": "Tell me about leases."}]
    async with httpx.AsyncClient(timeout=60) as client:
        messages += turn(await chat(client, a.url, messages), "And fencing?")
        stale: list[httpx.Response] = []

        async def generate_on_a() -> None:
            stale.append(await chat(client, a.url, list(messages)))

        async with trio.open_nursery() as requests:
            requests.start_soon(generate_on_a)
            with trio.fail_after(30):
                while not a.services.sessions.leases.busy_sessions():
                    await trio.sleep(0.01)
            # Proxy a stalls (a long pause, a partitioned network): its lease runs out and b takes it (one step of
            # the memory store, so a's renewal cannot slip in between); the balancer's ring sends the session's
            # retry to b, which continues the session from the store.
            await store.release_session(SESSION, owner_a)
            taken = await store.claim_session(SESSION, b.services.sessions.leases.owner, 15.0)
            assert taken.granted and taken.epoch == 2
            moved = await chat(client, b.url, list(messages))
            messages += turn(moved, "And hand-over?")
        # a's generation ended after b committed: its commit is refused, nothing of it recorded.
        (fenced,) = stale
        assert fenced.status_code == 503, fenced.text
        assert (fenced.json()["error"]["code"], fenced.headers["Retry-After"]) == ("session_moved", "1")
        # Back on a: its copy is stale (b owned the session since); it reloads and continues with b's step.
        last = await chat(client, a.url, list(messages))
        assert last.status_code == 200, last.text
        assert last.json()["prompt_token_ids"][: len(moved.json()["prompt_token_ids"])] == \
            moved.json()["prompt_token_ids"]
        finalized = (await client.post(a.url + "/session/finalize", json={"session_id": SESSION})).json()
        assert (finalized["steps"], finalized["segments"]) == (3, 1), finalized
        (segment,) = (await client.post(b.url + "/trajectory/read", json={"session_id": SESSION})).json()["data"]
    assert segment["token_ids"] == last.json()["prompt_token_ids"] + last.json()["token_ids"]
    assert len(segment["steps"]) == 3
