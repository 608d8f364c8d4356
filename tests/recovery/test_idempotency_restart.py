"""Idempotency-Keys across a proxy restart on the same SQLite file (issue 16's last gap): a request whose step
committed before the restart is answered from that step, for a non-streaming and a streaming request, with no
generation and no new step; the same key with another body is 422; a new key generates.

The engine of the second life is scripted with a DIFFERENT answer, so a repeat that generated again would show it
(and its ``/generate`` counter would move). Fails on a proxy whose keys live only in memory: the repeat after the
restart generates the other answer under a new step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.e2e.harness import CALCULATOR_TOOLS, SDK_OPTIONS

from .test_sqlite_restart import serve

SESSION = "idem-restart"
SYSTEM = {"role": "system", "content": "You are a careful calculator."}
ASK = {"role": "user", "content": "What is 17 plus 25?"}
TOOL_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 17, "b": 25}}\n</tool_call>'
SUM = "The sum is 42."
LATER = "Something else entirely."


def plain_body() -> dict[str, Any]:
    """Turn 1: a tool call, with logprobs and the token ids (the fields a rendering from the step must restore)."""
    return {"model": "m", "messages": [SYSTEM, ASK], "tools": CALCULATOR_TOOLS, "logprobs": True,
            "return_token_ids": True}


def stream_body(call: dict[str, Any]) -> dict[str, Any]:
    """Turn 2: the tool's result, answered as a stream with usage."""
    messages = [SYSTEM, ASK, {"role": "assistant", "content": None, "tool_calls": call["tool_calls"]},
                {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "42"}]
    return {"model": "m", "messages": messages, "tools": CALCULATOR_TOOLS, "stream": True,
            "stream_options": {"include_usage": True}, "logprobs": True, "return_token_ids": True}


def headers(key: str) -> dict[str, str]:
    return {"X-Session-Id": SESSION, "Idempotency-Key": key}


def without_ids(completion: dict[str, Any]) -> dict[str, Any]:
    """A completion without what is new in an answer rendered again (``id``, ``created``)."""
    return {key: value for key, value in completion.items() if key not in ("id", "created")}


def events(sse: bytes) -> list[dict[str, Any]]:
    """The JSON events of an SSE body (``[DONE]`` checked and left out)."""
    blocks = [block for block in sse.decode().split("\n\n") if block]
    assert blocks[-1] == "data: [DONE]"
    return [json.loads(block[len("data: "):]) for block in blocks[:-1]]


def assembled(sse: bytes) -> dict[str, Any]:
    """What a client makes of a stream: its text, finish, usage, token ids and logprobs, in order."""
    chunks = events(sse)
    content, finish, token_ids, logprobs = [], None, [], []
    for chunk in chunks:
        for choice in chunk["choices"]:
            content.append(choice["delta"].get("content") or "")
            finish = choice["finish_reason"] or finish
            token_ids += choice.get("token_ids") or []
            logprobs += [(e["token"], e["logprob"]) for e in (choice.get("logprobs") or {}).get("content") or []]
    return {"content": "".join(content), "finish": finish, "usage": chunks[-1]["usage"], "token_ids": token_ids,
            "logprobs": logprobs, "prompt_token_ids": chunks[0].get("prompt_token_ids")}


async def test_a_repeat_after_a_restart_is_answered_from_its_committed_step(tmp_path: Path, qwen3_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'keys.sqlite3'}"
    first: dict[str, Any] = {}

    async def first_life(url: str, engine: Any) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            plain = await http.post("/v1/chat/completions", json=plain_body(), headers=headers("turn-1"))
            assert plain.status_code == 200, plain.text
            first["plain"] = plain.json()
            assert first["plain"]["choices"][0]["finish_reason"] == "tool_calls"
            streamed = await http.post("/v1/chat/completions", json=stream_body(first["plain"]["choices"][0]["message"]),
                                       headers=headers("turn-2"))
            assert streamed.status_code == 200, streamed.text
            first["stream"] = streamed.content

    await serve(store, qwen3_path, SESSION, [TOOL_CALL, SUM], first_life)
    call = first["plain"]["choices"][0]["message"]

    async def second_life(url: str, engine: Any) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            plain = await http.post("/v1/chat/completions", json=plain_body(), headers=headers("turn-1"))
            streamed = await http.post("/v1/chat/completions", json=stream_body(call), headers=headers("turn-2"))
            again = await http.post("/v1/chat/completions", json=plain_body(), headers=headers("turn-1"))
            # The same key with another body: refused, nothing runs.
            reused = await http.post("/v1/chat/completions", json={**plain_body(), "max_tokens": 7},
                                     headers=headers("turn-1"))
            generated_before_new_key = engine.statistics().generate_requests
            # The SDK reads the replayed stream as the same answer.
            client = openai.AsyncOpenAI(base_url=f"{url}/v1", **SDK_OPTIONS)
            async with client:
                body = stream_body(call)
                stream = await client.chat.completions.create(
                    model="m", messages=body["messages"], tools=body["tools"], stream=True,
                    stream_options={"include_usage": True}, logprobs=True,
                    extra_body={"return_token_ids": True}, extra_headers=headers("turn-2"),
                )
                sdk_text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            # A key the journal never saw generates (the second life's answer).
            turn3 = [*stream_body(call)["messages"], {"role": "assistant", "content": SUM},
                     {"role": "user", "content": "Thanks."}]
            new = await http.post("/v1/chat/completions", json={"model": "m", "messages": turn3, "tools": CALCULATOR_TOOLS},
                                  headers=headers("turn-3"))
            finalized = await http.post("/session/finalize", json={"session_id": SESSION})
            read = await http.post("/trajectory/read", json={"session_id": SESSION})
        return {"plain": plain, "stream": streamed, "again": again, "reused": reused, "sdk_text": sdk_text,
                "generated_before_new_key": generated_before_new_key, "new": new,
                "generated": engine.statistics().generate_requests, "finalized": finalized.json(),
                "segments": read.json()["data"]}

    after = await serve(store, qwen3_path, SESSION, [LATER], second_life)

    plain, streamed = after["plain"], after["stream"]
    assert plain.status_code == streamed.status_code == 200, (plain.text, streamed.text)
    assert plain.headers.get("Idempotent-Replayed") == "true" and streamed.headers.get("Idempotent-Replayed") == "true"
    # Non-streaming: the committed answer, field for field (message, tool call ids, finish, usage, logprobs, token
    # ids, prompt ids), but for the new id and time.
    assert without_ids(plain.json()) == without_ids(first["plain"])
    # A later repeat gets the same bytes as the first replay.
    assert after["again"].content == plain.content
    # Streaming: the same answer (text, finish, usage, token ids, logprobs), in fewer chunks.
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert assembled(streamed.content) == assembled(first["stream"])
    assert assembled(first["stream"])["content"] == SUM == after["sdk_text"]
    assert after["reused"].status_code == 422
    assert after["reused"].json()["error"]["code"] == "idempotency_key_reused"
    # Nothing was generated for the repeats; the new key was.
    assert after["generated_before_new_key"] == 0 and after["generated"] == 1
    assert after["new"].status_code == 200 and after["new"].json()["choices"][0]["message"]["content"] == LATER
    # Three steps, one segment: no step was added by a repeat.
    assert after["finalized"]["steps"] == 3
    assert len(after["segments"]) == 1 and after["segments"][0]["num_turns"] == 3
