"""The official SDK in every way an agent runs it (sync in a thread, streaming; async under asyncio), and the
session identity: headers, body fallbacks, the routing key forwarded upstream, instance and turn ids."""

from __future__ import annotations

from typing import Any

import openai

from tests.e2e.harness import CALCULATOR_TOOLS, assistant_echo

ADD = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 1}}\n</tool_call>'


async def test_sync_sdk_streaming_in_a_thread_drives_a_tool_loop(start_proxy) -> None:
    session = "sync-stream"
    proxy = await start_proxy(script=[{"session": session, "output": o} for o in ("Adding.\n" + ADD, "It is 2.")])
    headers = {"X-Session-Id": session}

    def agent(client: openai.OpenAI) -> list[str]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "1+1?"}]
        finishes = []
        for _ in range(2):
            stream = client.chat.completions.create(
                model="m", messages=messages, tools=CALCULATOR_TOOLS, stream=True, extra_headers=headers,
            )
            content, calls, finish = "", {}, None
            for chunk in stream:
                for choice in chunk.choices:
                    content += choice.delta.content or ""
                    for call in choice.delta.tool_calls or ():
                        entry = calls.setdefault(call.index, {"id": call.id, "type": "function",
                                                              "function": {"name": call.function.name, "arguments": ""}})
                        entry["function"]["arguments"] += call.function.arguments or ""
                    finish = choice.finish_reason or finish
            finishes.append(finish)
            message = {"role": "assistant", "content": content or None}
            if calls:
                message["tool_calls"] = [calls[i] for i in sorted(calls)]
            messages.append(message)
            if calls:
                messages.append({"role": "tool", "content": "2", "tool_call_id": calls[0]["id"]})
        assert messages[-1]["content"] == "It is 2."
        return finishes

    assert await proxy.in_thread(agent) == ["tool_calls", "stop"]
    segments = await proxy.segments(session)
    assert [segment["step_ids"] for segment in segments] == [[1, 2]]


async def test_async_sdk_under_asyncio(start_proxy) -> None:
    proxy = await start_proxy(script=[{"session": "asyncio", "output": "Hello from asyncio."}])

    async def agent(client: openai.AsyncOpenAI) -> str:
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_headers={"X-Session-Id": "asyncio"},
        )
        return completion.choices[0].message.content

    assert await proxy.under_asyncio(agent) == "Hello from asyncio."


async def test_session_identity_headers_body_fallbacks_and_routing_key(start_proxy) -> None:
    proxy = await start_proxy(script=[
        {"session": "by-body", "output": "Body."},
        {"session": "by-routing-key", "output": "Routing."},
        {"session": "by-header", "output": "Header."},
        {"session": "by-header", "output": "Header again."},
    ])
    messages = [{"role": "user", "content": "who am I?"}]
    async with proxy.async_client() as client:
        body = await client.chat.completions.create(
            model="m", messages=messages,
            extra_body={"session_id": "by-body", "instance_id": "inst-body", "turn_id": "turn-b1"},
        )
        routed = await client.chat.completions.create(
            model="m", messages=messages, extra_headers={"X-SMG-Routing-Key": "by-routing-key"},
        )
        first = await client.chat.completions.create(
            model="m", messages=messages,
            # Headers win over body fields.
            extra_headers={"X-Session-Id": "by-header", "X-Instance-Id": "inst-h", "X-Turn-Id": "turn-1"},
            extra_body={"session_id": "ignored", "instance_id": "ignored", "turn_id": "ignored"},
        )
        second = await client.chat.completions.create(
            model="m", messages=messages + [assistant_echo(first.choices[0].message), {"role": "user", "content": "and?"}],
            extra_headers={"X-Session-Id": "by-header", "X-Turn-Id": "turn-2"},
        )
    assert [c.choices[0].message.content for c in (body, routed, first, second)] == [
        "Body.", "Routing.", "Header.", "Header again."
    ]
    # The session id is the routing key upstream (a gateway keeps the session on one worker).
    assert [r.routing_key for r in proxy.engine.request_log] == ["by-body", "by-routing-key", "by-header", "by-header"]
    (segment,) = await proxy.segments("by-header")
    assert segment["instance_id"] == "inst-h"
    assert [step["turn_id"] for step in segment["steps"]] == ["turn-1", "turn-2"]
    (body_segment,) = await proxy.segments("by-body")
    assert body_segment["instance_id"] == "inst-body" and body_segment["steps"][0]["turn_id"] == "turn-b1"
    assert await proxy.debug("ignored") is None
    missing = await proxy.post("/v1/chat/completions", {"messages": messages})
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "missing_session_id"
