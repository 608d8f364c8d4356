"""``Idempotency-Key`` on ``POST /v1/chat/completions``, end to end: a real proxy on its embedded engine, the official
openai SDK (``extra_headers``) and raw HTTP where the bytes matter.

The engine's script gives every session a *different* second answer, so a repeat that generated again would show
it; the engine's own counter of ``/generate`` requests counts the generations (failed ones included); the
session's debug view and export count steps.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
import trio

from tests.e2e.harness import Proxy, session_headers

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}]
FIRST, OTHER = "Hello there!", "A different answer."
KEY = "retry-3f9c2a"


def script(session: str, *entries: dict[str, Any]) -> list[dict[str, Any]]:
    """The session's script: the given entries (default: the first answer), then the different answer."""
    return [{"session": session, **entry} for entry in (entries or ({"output": FIRST},))] + [
        {"session": session, "output": OTHER}]


async def sdk_ask(client: openai.AsyncOpenAI, session: str, key: str | None, **kwargs: Any) -> Any:
    """A raw SDK response (``.headers``, ``.parse()``)."""
    headers = {"X-Session-Id": session, **({"Idempotency-Key": key} if key is not None else {})}
    return await client.chat.completions.with_raw_response.create(
        model="m", messages=kwargs.pop("messages", MESSAGES), extra_headers=headers,
        extra_body={"return_token_ids": True}, **kwargs,
    )


def generate_requests(proxy: Proxy) -> int:
    """``/generate`` requests the engine received (its own counter)."""
    return proxy.engine.statistics().generate_requests


async def settled(proxy: Proxy, session: str) -> dict[str, Any]:
    """The session's debug view once nothing is in flight."""
    with trio.fail_after(10):
        while True:
            view = await proxy.debug(session)
            if view is not None and view["in_flight"] == 0:
                return view
            await trio.sleep(0.01)


async def test_a_repeated_request_gets_the_recorded_answer_without_generating_or_a_new_step(start_proxy) -> None:
    session = "idem-plain"
    proxy = await start_proxy(script=script(session))
    async with proxy.async_client() as client:
        first = await sdk_ask(client, session, KEY)
        repeat = await sdk_ask(client, session, KEY)
    assert first.headers.get("Idempotent-Replayed") is None
    assert repeat.headers["Idempotent-Replayed"] == "true"
    one, two = first.parse(), repeat.parse()
    assert one.choices[0].message.content == FIRST
    # The same object: id, created, content, finish, usage, token ids.
    assert two.model_dump() == one.model_dump()
    assert generate_requests(proxy) == 1
    view = await settled(proxy, session)
    assert view["steps"] == 1 and view["trie"]["checkpoints"] == 1
    segments = await proxy.segments(session)
    assert [segment["step_ids"] for segment in segments] == [[1]]


async def test_a_repeated_stream_replays_the_same_events(start_proxy) -> None:
    session = "idem-stream"
    proxy = await start_proxy(script=script(session))
    body = {"model": "m", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
    first = await proxy.chat(session, body, **{"Idempotency-Key": KEY})
    repeat = await proxy.chat(session, body, **{"Idempotency-Key": KEY})
    assert first.status_code == repeat.status_code == 200
    assert repeat.headers["content-type"].startswith("text/event-stream")
    assert repeat.headers["Idempotent-Replayed"] == "true"
    # Byte for byte: the same chunk ids, content, finish and usage.
    assert repeat.content == first.content
    assert first.content.endswith(b"data: [DONE]\n\n") and FIRST.split()[0].encode() in first.content
    # The SDK reads the replay as the same stream.
    async with proxy.async_client() as client:
        stream = await client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True},
            extra_headers={"X-Session-Id": session, "Idempotency-Key": KEY},
        )
        chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == FIRST
    assert {c.id for c in chunks} == {json.loads(first.content.split(b"\n\n")[0][6:])["id"]}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert generate_requests(proxy) == 1
    assert (await settled(proxy, session))["steps"] == 1


async def test_the_same_key_with_another_body_is_422_and_changes_nothing(start_proxy) -> None:
    session = "idem-reused"
    proxy = await start_proxy(script=script(session))
    async with proxy.async_client() as client:
        await sdk_ask(client, session, KEY)
        with pytest.raises(openai.UnprocessableEntityError) as caught:
            await sdk_ask(client, session, KEY, messages=MESSAGES + [
                {"role": "assistant", "content": FIRST}, {"role": "user", "content": "Again."}])
        with pytest.raises(openai.UnprocessableEntityError):
            await sdk_ask(client, session, KEY, temperature=0.5)
    error = caught.value.body
    assert error["code"] == "idempotency_key_reused" and error["type"] == "invalid_request_error"
    assert error["param"] == "Idempotency-Key" and KEY in error["message"]
    assert generate_requests(proxy) == 1
    assert (await settled(proxy, session))["steps"] == 1


async def test_the_fingerprint_is_the_canonical_json_not_its_spelling(start_proxy) -> None:
    session = "idem-canonical"
    proxy = await start_proxy(script=script(session))
    first = await proxy.post("/v1/chat/completions", {"model": "m", "messages": MESSAGES},
                             session_headers(session, **{"Idempotency-Key": KEY}))
    # Other key order, whitespace and escapes; the quoted structured-field form of the same key.
    spelled = ('{ "messages" : [{"content":"You are terse.","role":"system"},'
               '{"role":"user","content":"Say \\u0068ello."}],\n "model":"m"}')
    quoted = session_headers(session, **{"Idempotency-Key": f'"{KEY}"'})
    repeat = await proxy.post("/v1/chat/completions", spelled, quoted)
    assert first.status_code == repeat.status_code == 200
    assert repeat.headers["Idempotent-Replayed"] == "true" and repeat.content == first.content
    assert generate_requests(proxy) == 1


async def start_first_then_repeat(nursery: trio.Nursery, proxy: Any, session: str, answers: dict[str, Any]) -> None:
    """Send the request with ``KEY`` (its answer in ``answers["first"]``) and, once the session counts it in flight, the
    same request again (``answers["repeat"]``)."""
    body = {"model": "m", "messages": MESSAGES}

    async def send(name: str) -> None:
        answers[name] = await proxy.chat(session, body, **{"Idempotency-Key": KEY})

    nursery.start_soon(send, "first")
    with trio.fail_after(10):
        while (await proxy.debug(session) or {}).get("in_flight") != 1:
            await trio.sleep(0.01)
    nursery.start_soon(send, "repeat")


async def test_a_concurrent_repeat_waits_for_the_first_and_returns_its_answer(start_proxy) -> None:
    session = "idem-concurrent"
    proxy = await start_proxy(script=script(session, {"output": FIRST, "latency": 0.5}))
    answers: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        # The repeat arrives while the first is still generating (the engine holds it 0.5 s before its first token).
        await start_first_then_repeat(nursery, proxy, session, answers)
        await trio.sleep(0.1)
        assert "repeat" not in answers  # still waiting for the first
    first, repeat = answers["first"], answers["repeat"]
    assert first.status_code == repeat.status_code == 200
    assert repeat.content == first.content and first.json()["choices"][0]["message"]["content"] == FIRST
    assert repeat.headers["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first.headers
    assert generate_requests(proxy) == 1
    assert (await settled(proxy, session))["steps"] == 1


async def test_a_failed_first_attempt_records_nothing_and_the_repeat_runs(start_proxy) -> None:
    session = "idem-failed"
    proxy = await start_proxy(script=script(session, {"output": "", "error_status": 500}, {"output": FIRST}))
    body = {"model": "m", "messages": MESSAGES}
    failed = await proxy.chat(session, body, **{"Idempotency-Key": KEY})
    assert failed.status_code == 502 and failed.json()["error"]["code"] == "upstream_error"
    assert (await settled(proxy, session))["steps"] == 0
    # The key is free: the repeat generates (the engine's next answer), records, and a third call replays it.
    retry = await proxy.chat(session, body, **{"Idempotency-Key": KEY})
    assert retry.status_code == 200 and "Idempotent-Replayed" not in retry.headers
    assert retry.json()["choices"][0]["message"]["content"] == FIRST
    third = await proxy.chat(session, body, **{"Idempotency-Key": KEY})
    assert third.headers["Idempotent-Replayed"] == "true" and third.content == retry.content
    assert generate_requests(proxy) == 2
    assert (await settled(proxy, session))["steps"] == 1


async def test_a_repeat_waiting_for_a_first_attempt_that_fails_runs_itself(start_proxy) -> None:
    session = "idem-failed-concurrent"
    # The first attempt waits at a paused rollout gate until its pause wait times out (503, nothing committed).
    proxy = await start_proxy(script=script(session), pause_wait_timeout=1.0)
    assert (await proxy.post("/v1/rollout/pause", {})).status_code == 200
    answers: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        await start_first_then_repeat(nursery, proxy, session, answers)
        await trio.sleep(0.2)
        # The repeat waits on the key: it is not admitted to the session beside the first.
        assert (await proxy.debug(session))["in_flight"] == 1
        with trio.fail_after(10):
            while "first" not in answers:
                await trio.sleep(0.01)
        # The first failed: the repeat (which was waiting on the key, not at the gate) now runs; let it generate.
        assert answers["first"].status_code == 503 and "repeat" not in answers
        assert (await proxy.post("/v1/rollout/resume", {})).status_code == 200
    assert answers["first"].json()["error"]["code"] == "paused_timeout"
    repeat = answers["repeat"]
    assert repeat.status_code == 200 and "Idempotent-Replayed" not in repeat.headers
    assert repeat.json()["choices"][0]["message"]["content"] == FIRST
    assert generate_requests(proxy) == 1
    assert (await settled(proxy, session))["steps"] == 1


async def test_keys_are_per_session_and_freed_with_it(start_proxy) -> None:
    proxy = await start_proxy(script=script("idem-a") + script("idem-b"))
    body = {"model": "m", "messages": MESSAGES}
    first = await proxy.chat("idem-a", body, **{"Idempotency-Key": KEY})
    replayed = await proxy.chat("idem-a", body, **{"Idempotency-Key": KEY})
    assert replayed.headers["Idempotent-Replayed"] == "true" and replayed.content == first.content
    # The same key in another session is another key: another body is no reuse there, and it generates.
    other = await proxy.chat("idem-b", {**body, "temperature": 0.3}, **{"Idempotency-Key": KEY})
    assert first.status_code == other.status_code == 200 and "Idempotent-Replayed" not in other.headers
    assert generate_requests(proxy) == 2
    # Finalize frees the session's keys with its data: a repeat meets the finalized session, not a replay.
    await proxy.finalize("idem-a")
    late = await proxy.chat("idem-a", body, **{"Idempotency-Key": KEY})
    assert late.status_code == 400 and late.json()["error"]["code"] == "session_finalized"
    assert generate_requests(proxy) == 2


@pytest.mark.parametrize(
    "value",
    [b"", b"x" * 256, b"caf\xe9", b'"unterminated\\"', b'"a"b"'],
    ids=["empty", "too-long", "not-ascii", "bad-escape", "inner-quote"],
)
async def test_an_invalid_key_is_400_and_nothing_runs(start_proxy, value: bytes) -> None:
    session = "idem-invalid"
    proxy = await start_proxy(script=script(session))
    response = await proxy.post("/v1/chat/completions", {"model": "m", "messages": MESSAGES},
                                {"X-Session-Id": session, "Idempotency-Key": value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_idempotency_key" and error["param"] == "Idempotency-Key"
    assert error["type"] == "invalid_request_error"
    assert generate_requests(proxy) == 0


async def test_two_key_headers_are_400(start_proxy) -> None:
    import httpx

    session = "idem-twice"
    proxy = await start_proxy(script=script(session))
    async with httpx.AsyncClient() as client:
        response = await client.post(
            proxy.url + "/v1/chat/completions", content=json.dumps({"model": "m", "messages": MESSAGES}),
            headers=[("X-Session-Id", session), ("Content-Type", "application/json"), ("Idempotency-Key", "a"),
                     ("Idempotency-Key", "b")],
        )
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_idempotency_key"
    # The longest valid key is fine, and so is a key with inner spaces.
    ok = await proxy.chat(session, {"model": "m", "messages": MESSAGES}, **{"Idempotency-Key": "k " + "x" * 253})
    assert ok.status_code == 200
