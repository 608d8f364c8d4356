"""Conformance of ``/abort_request`` and of aborted responses with sglang-protocol.md §2."""

from __future__ import annotations

from functools import partial
from typing import Any

import httpx
import trio
import trio.testing

from engine import Engine, EngineHandle

from .conftest import StartEngine, client_for, stream_events

ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
LONG = {"max_new_tokens": 10_000, "ignore_eos": True}


def running(engine: Engine, rid: str, tokens: int = 1) -> Any:
    return lambda: any(s.rid == rid and len(s.output_ids) >= tokens for s in engine.active_requests())


async def test_abort_running_non_streaming_returns_partial(
    start_engine: StartEngine, autojump_clock: trio.testing.MockClock
) -> None:
    """§2.2: "Non-streaming: HTTP 200. text, output_ids and meta_info.output_token_logprobs contain all tokens
    generated so far. finish_reason = {"type":"abort","message":"Aborted","status_code":null,"err_type":null}";
    "completion_tokens, prompt_tokens, cached_tokens, weight_version, and (if requested) routed_experts are
    present"; §2.1 "The request runs one more decode step"."""
    handle = await start_engine(token_rate=10.0, context_length=100_000)
    engine = handle.engine
    results: dict[str, Any] = {}
    async with client_for(handle) as client, trio.open_nursery() as nursery:

        async def call() -> None:
            r = await client.post("/generate", json={"text": "Hello", "rid": "a1", "sampling_params": LONG,
                                                     "return_logprob": True, "return_routed_experts": True})
            results["r"] = r

        nursery.start_soon(call)
        await engine.wait_until(running(engine, "a1", 4))
        before = len(engine.active_requests()[0].output_ids)
        engine.abort("a1")  # in-process, to pin down the "one more decode step"
    r = results["r"]
    assert r.status_code == 200
    body = r.json()
    meta = body["meta_info"]
    assert meta["finish_reason"] == ABORTED
    assert len(body["output_ids"]) == before + 1
    assert len(meta["output_token_logprobs"]) == len(body["output_ids"]) == meta["completion_tokens"]
    assert {"prompt_tokens", "cached_tokens", "weight_version", "routed_experts"} <= set(meta)
    assert engine.request_log[-1].finish_reason == ABORTED


async def test_abort_running_stream_ends_with_abort_chunk(
    start_engine: StartEngine, autojump_clock: trio.testing.MockClock
) -> None:
    """§1.6: "Abort during streaming: there is no HTTP error. The final chunk has finish_reason.type == "abort" and
    carries the partial text / output_ids / logprobs accumulated so far, then [DONE]"."""
    handle = await start_engine(token_rate=10.0, context_length=100_000)
    engine = handle.engine
    seen: list[list[Any]] = []
    async with client_for(handle) as client, trio.open_nursery() as nursery:

        async def call() -> None:
            seen.append(await stream_events(client, {"text": "Hello", "rid": "s1", "sampling_params": LONG}))

        nursery.start_soon(call)
        await engine.wait_until(running(engine, "s1", 3))
        r = await client.post("/abort_request", json={"rid": "s1"})
        assert r.status_code == 200 and r.content == b""
    events = seen[0]
    assert events[-1] == "[DONE]"
    final = events[-2]
    assert final["meta_info"]["finish_reason"] == ABORTED
    assert final["output_ids"] == list(engine.request_log[-1].output_ids)
    assert final["meta_info"]["prompt_tokens"] == 1
    assert final["text"] == engine.tokenizer.decode(final["output_ids"])


async def test_abort_matches_rid_prefixes(start_engine: StartEngine, autojump_clock: trio.testing.MockClock) -> None:
    """§2.1: "The scheduler ... matches with req.rid.startswith(rid). So aborting "abc" also kills "abc-2" if both
    are in flight"; "With a single tokenizer worker, the rid must exist exactly in the tokenizer's state" and
    "An unknown rid is silently ignored"."""
    handle = await start_engine(token_rate=10.0, context_length=100_000)
    engine = handle.engine
    results: dict[str, dict[str, Any]] = {}
    async with client_for(handle) as client, trio.open_nursery() as nursery:

        async def call(rid: str) -> None:
            r = await client.post("/generate", json={"text": "Hi", "rid": rid, "sampling_params": {
                "max_new_tokens": 40, "ignore_eos": True}})
            results[rid] = r.json()

        for rid in ("abc", "abc-2", "xabc"):
            nursery.start_soon(call, rid)
        await engine.wait_until(lambda: len(engine.active_requests()) == 3)
        # "ab" is not itself in flight: ignored, even though it prefixes two rids.
        r = await client.post("/abort_request", json={"rid": "ab"})
        assert r.status_code == 200 and r.content == b""
        r = await client.post("/abort_request", json={"rid": "no-such-rid"})
        assert r.status_code == 200 and r.content == b""
        assert len(engine.active_requests()) == 3
        await client.post("/abort_request", json={"rid": "abc"})
    assert results["abc"]["meta_info"]["finish_reason"] == ABORTED
    assert results["abc-2"]["meta_info"]["finish_reason"] == ABORTED
    assert results["xabc"]["meta_info"]["finish_reason"] == {"type": "length", "length": 40}


async def test_abort_all(start_engine: StartEngine, autojump_clock: trio.testing.MockClock) -> None:
    """§2.1: ``{"abort_all": true}``; "An empty rid with abort_all=false is ignored"."""
    handle = await start_engine(token_rate=10.0, context_length=100_000)
    engine = handle.engine
    reasons: list[Any] = []
    async with client_for(handle) as client, trio.open_nursery() as nursery:

        async def call(rid: str) -> None:
            r = await client.post("/generate", json={"text": "Hi", "rid": rid, "sampling_params": LONG})
            reasons.append(r.json()["meta_info"]["finish_reason"])

        for rid in ("p", "q", "r"):
            nursery.start_soon(call, rid)
        await engine.wait_until(lambda: len(engine.active_requests()) == 3)
        assert (await client.post("/abort_request", json={"rid": ""})).status_code == 200
        assert len(engine.active_requests()) == 3
        assert (await client.post("/abort_request", json={"abort_all": True})).status_code == 200
    assert reasons == [ABORTED] * 3


async def test_abort_while_retracted_uses_waiting_queue_form(
    start_engine: StartEngine, autojump_clock: trio.testing.MockClock
) -> None:
    """§2.2 "Aborted while waiting or retracted": "meta_info holds only id, finish_reason
    ({"type":"abort","message":"Abort in waiting queue"} ...), weight_version, e2e_latency, completion_tokens, and
    the logprob lists"; "prompt_tokens and cached_tokens are missing, and so is routed_experts"; "in streaming mode
    this final chunk's output_ids is only the last token (output_ids[-1]), even in cumulative mode"."""
    handle = await start_engine(token_rate=10.0, context_length=100_000)
    engine = handle.engine
    results: dict[str, Any] = {}
    request = {"text": "Hi", "sampling_params": LONG, "return_logprob": True, "return_routed_experts": True}
    async with client_for(handle) as client, trio.open_nursery() as nursery:

        async def plain() -> None:
            results["plain"] = (await client.post("/generate", json={**request, "rid": "w1"})).json()

        async def streamed() -> None:
            results["stream"] = await stream_events(client, {**request, "rid": "w2"})

        nursery.start_soon(plain)
        nursery.start_soon(streamed)
        await engine.wait_until(lambda: running(engine, "w1", 3)() and running(engine, "w2", 3)())
        await client.post("/pause_generation", json={"mode": "retract"})
        assert engine.statistics().waiting == 2
        await client.post("/abort_request", json={"abort_all": True})
    expected = {"type": "abort", "message": "Abort in waiting queue"}
    plain = results["plain"]
    meta = plain["meta_info"]
    assert meta["finish_reason"] == expected
    assert set(meta) == {"id", "finish_reason", "weight_version", "e2e_latency", "input_token_logprobs",
                         "output_token_logprobs", "completion_tokens"}
    record = next(r for r in engine.request_log if r.rid == "w1")
    assert plain["output_ids"] == list(record.output_ids) and meta["completion_tokens"] == len(record.output_ids)
    events = results["stream"]
    assert events[-1] == "[DONE]"
    final = events[-2]
    stream_record = next(r for r in engine.request_log if r.rid == "w2")
    assert final["meta_info"]["finish_reason"] == expected
    assert final["output_ids"] == [stream_record.output_ids[-1]]
    assert final["meta_info"]["completion_tokens"] == len(stream_record.output_ids)
    assert "prompt_tokens" not in final["meta_info"] and "routed_experts" not in final["meta_info"]
    assert len(final["meta_info"]["output_token_logprobs"]) == len(stream_record.output_ids)


async def test_blocked_request_ignores_abort_unless_configured(
    start_engine: StartEngine, autojump_clock: trio.testing.MockClock
) -> None:
    """§3.1: "new /generate requests that arrive while paused block inside the server until continue_generation";
    §2.1 "the rid must exist exactly in the tokenizer's state" (a blocked request is not registered yet), so the
    abort is ignored; with ``abort_blocked_requests`` it ends in the waiting-queue form (§2.2)."""
    for configured in (False, True):
        handle = await start_engine(abort_blocked_requests=configured)
        engine = handle.engine
        results: list[Any] = []
        async with client_for(handle) as client, trio.open_nursery() as nursery:
            await client.post("/pause_generation", json={"mode": "abort"})
            nursery.start_soon(partial(_post_into, client, results, {"text": "Hi", "rid": "b1"}))
            await engine.wait_until(lambda: engine.statistics().blocked == 1)
            await client.post("/abort_request", json={"rid": "b1"})
            await trio.sleep(1)
            if configured:
                assert results and results[0]["meta_info"]["finish_reason"]["message"] == "Abort in waiting queue"
                assert results[0]["output_ids"] == []
            else:
                assert not results and engine.statistics().blocked == 1
            await client.post("/continue_generation", json={})
        assert results[0]["meta_info"]["finish_reason"]["type"] == ("abort" if configured else "stop")


async def _post_into(client: httpx.AsyncClient, results: list[Any], body: dict[str, Any]) -> None:
    results.append((await client.post("/generate", json=body)).json())


async def test_client_disconnect_stops_generation(
    start_engine: StartEngine, autojump_clock: trio.testing.MockClock
) -> None:
    """§1.6 "Client disconnect: Streaming: a background task aborts the rid" (here: at once). The request log records
    ``client_disconnected=True`` and the generation stops."""
    handle = await start_engine(token_rate=10.0, context_length=100_000)
    engine = handle.engine
    async with client_for(handle) as client:
        async with client.stream("POST", "/generate", json={"text": "Hi", "rid": "d1", "stream": True,
                                                            "sampling_params": LONG}) as response:
            async for _ in response.aiter_bytes():
                if running(engine, "d1", 3)():
                    break
        await engine.wait_until(lambda: engine.statistics().finished == 1)
        record = engine.request_log[-1]
        assert record.client_disconnected and record.finish_reason == ABORTED
        assert len(record.output_ids) < 100
        # Non-streaming: the handler is cancelled, the request is aborted the same way.
        with trio.move_on_after(1):
            await client.post("/generate", json={"text": "Hi", "rid": "d2", "sampling_params": LONG})
        await engine.wait_until(lambda: engine.statistics().finished == 2)
        assert engine.request_log[-1].rid == "d2" and engine.request_log[-1].client_disconnected


async def test_abort_request_bad_body_is_400(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.5: bad input is a 400 with ``{"error": {"message": ...}}``, never a 500."""
    for content in (b"{", b"[1]", b'{"rid": 5}', b'{"abort_all": "yes"}'):
        r = await client.post("/abort_request", content=content)
        assert r.status_code == 400, content
        assert "message" in r.json()["error"]


async def test_disconnect_while_blocked_is_recorded(
    start_engine: StartEngine, autojump_clock: trio.testing.MockClock
) -> None:
    """§3.1: a request blocked by the pause is not admitted; if its client leaves, it never runs. The log records
    it with ``finish_reason=None``, ``finished_in=BLOCKED`` and ``client_disconnected=True``."""
    from engine import Phase

    handle = await start_engine()
    engine = handle.engine
    async with client_for(handle) as client:
        await client.post("/pause_generation", json={"mode": "abort"})
        with trio.move_on_after(5):
            await client.post("/generate", json={"text": "Hi", "rid": "gone"})
        await engine.wait_until(lambda: engine.statistics().blocked == 0)
        record = engine.request_log[-1]
        assert record.rid == "gone" and record.finish_reason is None and record.client_disconnected
        assert record.finished_in is Phase.BLOCKED and record.output_ids == ()
        await client.post("/continue_generation", json={})
        assert engine.statistics().running == 0
