"""Failed requests leave no residue (issue 13, item 5): a thousand requests of a live session that fail in every way
a request can fail after the session attached its prompt leave the session's trie and its export exactly as a
control session that never saw them.

The kinds, 250 each, mixed in one run: context overflow (refused after tokenization), an upstream error (the
engine's script answers HTTP 500), a template refusal (Qwen3.5's template rejects a system message after the first
turn: the incremental encode fails, then the full encode), and a client that disconnects once its stream has begun
(the generation is cancelled mid-flight). Their prompts continue the session's history by one to four messages,
start new conversations, or bring tools (a new context node), so they create pending nodes below a checkpoint,
beside it, and in contexts of their own.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import trio

from tests.e2e.harness import Proxy
from tests.e2e.test_upstream_faults import as_if_alone, settled

SYSTEM = {"role": "system", "content": "You are terse."}
FIRST = [SYSTEM, {"role": "user", "content": "first"}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "look something up",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
WINDOW = 400  # --context-window: the good steps fit, a long message does not
EACH = 250
CONCURRENCY = 16


def suffix(i: int, text: str) -> list[dict[str, Any]]:
    """One to four messages that continue a history (the last one a user message)."""
    extra = [{"role": "user", "content": f"{text} {i}"}]
    for k in range(i % 4):
        extra = [{"role": "user", "content": f"aside {i}.{k}"}, {"role": "assistant", "content": f"noted {k}"}] + extra
    return extra


async def fail_once(proxy: Proxy, client: httpx2.AsyncClient, kind: str, i: int, history: list[dict]) -> None:
    """One failing request of the session; asserts it failed the way its kind says."""
    body: dict[str, Any]
    shape = i % 3  # continue the history, start a new conversation, or continue it with tools (another context)
    base = history if shape != 1 else [{"role": "system", "content": f"Sub-agent {i}."}]
    tools = {"tools": TOOLS} if shape == 2 else {}
    headers = {"X-Session-Id": "live"}
    if kind == "overflow":
        body = {"messages": base + suffix(i, "tell me about " + "everything and " * 250), **tools}
        expected = (400, "context_overflow")
    elif kind == "upstream":
        body = {"messages": base + suffix(i, "ask"), **tools}
        expected = (502, "upstream_error")
    elif kind == "template":
        # Qwen3.5: "System message must be at the beginning."
        body = {"messages": base + suffix(i, "ask") + [{"role": "system", "content": "late"},
                                                        {"role": "user", "content": "go"}], **tools}
        expected = (400, "invalid_request")
    else:
        assert kind == "disconnect"
        body = {"messages": base + suffix(i, "ramble"), "stream": True, **tools}
        async with client.stream("POST", proxy.url + "/v1/chat/completions", json=body, headers=headers) as response:
            assert response.status_code == 200
            async for chunk in response.aiter_bytes():
                assert b'"error"' not in chunk
                break  # the stream has begun: leave (closing the connection)
        return
    response = await client.post(proxy.url + "/v1/chat/completions", json=body, headers=headers)
    assert (response.status_code, response.json()["error"]["code"]) == expected, (kind, i, response.text)


async def test_a_thousand_failed_requests_leave_the_trie_and_the_export_as_a_control_session(start_proxy) -> None:
    proxy = await start_proxy(
        model="qwen3_5", context_window=WINDOW,
        script=[{"session": "control", "output": "One."}, {"session": "live", "output": "One."}]
        + [{"session": "live", "output": "never sent", "error_status": 500}] * EACH,
        # Unscripted replies (the disconnected streams, the last step) come from the default policy, which depends
        # only on the conversation; its pace keeps a stream running well past its first chunk.
        engine={"token_rate": 150.0},
    )

    async def good_step(session: str, messages: list[dict]) -> dict[str, Any]:
        response = await proxy.chat(session, {"messages": messages})
        assert response.status_code == 200, response.text
        return response.json()["choices"][0]["message"]

    answer = await good_step("live", FIRST)
    assert await good_step("control", FIRST) == answer
    history = FIRST + [answer]
    before = await settled(proxy, "live")

    limiter = trio.CapacityLimiter(CONCURRENCY)
    limits = httpx2.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    # httpx2 (the openai SDK's HTTP library) costs the test's client side about half of what httpx does.
    async with httpx2.AsyncClient(timeout=30, limits=limits) as client:

        async def one(kind: str, i: int) -> None:
            async with limiter:
                await fail_once(proxy, client, kind, i, history)

        # The upstream errors go first: each takes one scripted error of the session, which nothing else may take
        # (a disconnected stream would, and would then not be one). The other kinds never reach the engine, so they
        # run alongside; the disconnects (the default policy: no script entry is left) come after.
        async with trio.open_nursery() as nursery:
            for i in range(EACH):
                for kind in ("upstream", "overflow", "template"):
                    nursery.start_soon(one, kind, i)
        assert proxy.engine.statistics().script_remaining == {}
        async with trio.open_nursery() as nursery:
            for i in range(EACH):
                nursery.start_soon(one, "disconnect", i)

    after = await settled(proxy, "live")
    assert after["trie"] == before["trie"], (before["trie"], after["trie"])
    assert (after["steps"], after["branches"], after["head"]) == (before["steps"], before["branches"], before["head"])
    assert after["instance_id"] == before["instance_id"]
    # Every disconnect reached the engine as a cut stream. The proxy cuts a stream whose client left two ways at
    # once: it closes the upstream connection (the engine records client_disconnected) and aborts the rid on a
    # control connection (the engine records an abort finish); whichever the engine handles first ends the request.
    # The engine logs a request when it finishes it, at its next token, which may come after the proxy settled.
    def cut(record: Any) -> bool:
        return record.stream and (record.client_disconnected or (record.finish_reason or {}).get("type") == "abort")

    with trio.move_on_after(10):
        while len([r for r in proxy.requests_of("live") if cut(r)]) < EACH:
            await trio.sleep(0.01)
    disconnected = [r for r in proxy.requests_of("live") if cut(r)]
    assert len(disconnected) == EACH, [(r.rid, r.source, r.finish_reason, r.finished_in)
                                       for r in proxy.requests_of("live") if r.stream and not cut(r)]

    # The session continues as if none of it had happened: the same next step, trie and export as the control's.
    second = history + [{"role": "user", "content": "second"}]
    assert await good_step("live", second) == await good_step("control", second)
    live, control = await settled(proxy, "live"), await settled(proxy, "control")
    assert live["trie"] == control["trie"] and live["trie"]["pending"] == 0
    segments = await proxy.segments("live")
    assert as_if_alone(segments) == as_if_alone(await proxy.segments("control"))
    assert json.dumps(segments).count("Sub-agent") == 0
