"""Conformance of pause/continue and weight updates with sglang-protocol.md §3."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from engine import Engine

from .conftest import CHAT_PROMPT, StartEngine, client_for, stream_events

PAUSED_OK = {"message": "Generation paused successfully.", "status": "ok"}
ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}


def tokens_of(engine: Engine, rid: str) -> int:
    return next((len(s.output_ids) for s in engine.active_requests() if s.rid == rid), -1)


async def test_pause_abort_mode(start_engine: StartEngine, autojump_clock: trio.testing.MockClock) -> None:
    """§3.1 ``abort``: "Every in-flight client gets its partial result with finish_reason abort"; the reply comes
    "only once the pause is in effect" (every in-flight /generate has returned); "new /generate requests that
    arrive while paused block inside the server until continue_generation ... They are not rejected"."""
    handle = await start_engine(token_rate=10.0, context_length=100_000)
    engine = handle.engine
    results: dict[str, Any] = {}
    async with client_for(handle) as client, trio.open_nursery() as nursery:

        async def call(rid: str, body: dict[str, Any]) -> None:
            results[rid] = (await client.post("/generate", json={"rid": rid, **body})).json()

        nursery.start_soon(call, "p1", {"text": "Hi", "sampling_params": {"max_new_tokens": 1000, "ignore_eos": True}})
        await engine.wait_until(lambda: tokens_of(engine, "p1") >= 3)
        r = await client.post("/pause_generation", json={})  # default mode: abort
        assert r.json() == PAUSED_OK
        assert engine.statistics().running == 0 and engine.paused == "abort"
        # Finished before the reply (its HTTP response may still be on the wire).
        assert engine.request_log[-1].rid == "p1" and engine.request_log[-1].finish_reason == ABORTED
        # A resubmission blocks until continue.
        nursery.start_soon(call, "p2", {"text": CHAT_PROMPT})
        await engine.wait_until(lambda: engine.statistics().blocked == 1)
        await trio.sleep(5)
        assert "p2" not in results
        r = await client.post("/continue_generation", json={})
        assert r.status_code == 200
    assert results["p1"]["meta_info"]["finish_reason"] == ABORTED
    assert results["p2"]["meta_info"]["finish_reason"]["type"] == "stop"


async def test_pause_retract_keeps_connection_and_output(
    start_engine: StartEngine, autojump_clock: trio.testing.MockClock
) -> None:
    """§3.1 ``retract``: "Client connections stay open. After continue_generation the requests re-prefill prompt +
    output so far and continue, so the client sees one uninterrupted response"; "meta_info.num_retractions counts
    these events"."""
    handle = await start_engine(token_rate=20.0)
    engine = handle.engine
    async with client_for(handle) as client:
        reference = (await client.post("/generate", json={"text": CHAT_PROMPT})).json()
        seen: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                seen.append(await stream_events(client, {"text": CHAT_PROMPT, "rid": "r1"}))

            nursery.start_soon(call)
            await engine.wait_until(lambda: tokens_of(engine, "r1") >= 5)
            assert (await client.post("/pause_generation", json={"mode": "retract"})).json() == PAUSED_OK
            stats = engine.statistics()
            assert stats.waiting == 1 and stats.running == 0 and stats.paused == "retract"
            frozen = tokens_of(engine, "r1")
            await trio.sleep(10)
            assert tokens_of(engine, "r1") == frozen and not seen
            await client.post("/continue_generation", json={})
    final = seen[0][-2]
    assert final["output_ids"] == reference["output_ids"]
    assert final["meta_info"]["finish_reason"] == reference["meta_info"]["finish_reason"]
    assert final["meta_info"]["num_retractions"] == 1


async def test_pause_in_place_freezes(start_engine: StartEngine, autojump_clock: trio.testing.MockClock) -> None:
    """§3.1 ``in_place``: "The scheduler just stops scheduling. Requests keep their KV" (no retraction);
    continue resumes them."""
    handle = await start_engine(token_rate=20.0)
    engine = handle.engine
    async with client_for(handle) as client:
        reference = (await client.post("/generate", json={"text": CHAT_PROMPT})).json()
        results: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                results.append((await client.post("/generate", json={"text": CHAT_PROMPT, "rid": "i1"})).json())

            nursery.start_soon(call)
            await engine.wait_until(lambda: tokens_of(engine, "i1") >= 5)
            assert (await client.post("/pause_generation", json={"mode": "in_place"})).json() == PAUSED_OK
            assert engine.statistics().running == 1 and engine.statistics().waiting == 0
            frozen = tokens_of(engine, "i1")
            await trio.sleep(10)
            assert tokens_of(engine, "i1") == frozen
            await client.post("/continue_generation", json={})
    assert results[0]["output_ids"] == reference["output_ids"]
    assert results[0]["meta_info"]["num_retractions"] == 0


async def test_update_weights_waits_for_inflight_unless_paused(
    start_engine: StartEngine, autojump_clock: trio.testing.MockClock
) -> None:
    """§3.3 Locking: "every /generate holds a reader lock on model_update_lock ... An update takes the writer lock,
    so it waits for in-flight requests, unless the engine is paused, in which case it runs immediately";
    ``/update_weights_from_disk`` returns success/message/num_paused_requests; §3.4 /model_info reports the
    version."""
    handle = await start_engine(token_rate=10.0)
    engine = handle.engine
    async with client_for(handle) as client:
        results: dict[str, Any] = {}
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                results["gen"] = (await client.post("/generate", json={"text": "Hi", "rid": "u1", "sampling_params": {
                    "max_new_tokens": 20, "ignore_eos": True}})).json()

            nursery.start_soon(call)
            await engine.wait_until(lambda: tokens_of(engine, "u1") >= 2)
            r = await client.post("/update_weights_from_disk", json={"model_path": "/m/step1", "weight_version": "1"})
            # The request finished first, entirely under the old weights.
            assert engine.request_log[-1].rid == "u1"
            assert engine.request_log[-1].finish_reason == {"type": "length", "length": 20}
            assert set(engine.request_log[-1].token_versions) == {"default"}
            assert r.json() == {"success": True, "message": "Succeeded to update model weights.",
                                "num_paused_requests": 0}
        info = (await client.get("/model_info")).json()
        assert info["weight_version"] == "1" and info["model_path"] == "/m/step1"
        # Paused (retract): the update runs at once, and the retracted request resumes under the new version.
        async with trio.open_nursery() as nursery:

            async def call2() -> None:
                results["gen2"] = await stream_events(client, {"text": "Hi", "rid": "u2", "sampling_params": {
                    "max_new_tokens": 20, "ignore_eos": True}})

            nursery.start_soon(call2)
            await engine.wait_until(lambda: tokens_of(engine, "u2") >= 2)
            await client.post("/pause_generation", json={"mode": "retract"})
            r = await client.post("/update_weights_from_disk", json={"model_path": "/m/step2", "weight_version": "2"})
            assert r.json()["success"] and r.json()["num_paused_requests"] == 1
            assert "gen2" not in results
            await client.post("/continue_generation", json={})
        record = engine.request_log[-1]
        assert record.token_versions[0] == "1" and record.token_versions[-1] == "2"
        versions = [c["meta_info"]["weight_version"] for c in results["gen2"][:-1]]
        assert versions[0] == "1" and versions[-1] == "2"
        bad = await client.post("/update_weights_from_disk", json={"weight_version": "3"})
        assert bad.status_code == 400 and bad.json()["success"] is False


async def test_update_weight_version_aborts_all_by_default(
    start_engine: StartEngine, autojump_clock: trio.testing.MockClock
) -> None:
    """§3.3 ``/update_weight_version``: "Body {"new_version": str, "abort_all_requests": true}. Note the default:
    aborting all requests"; each token's version is the engine's version when it was generated (§3.4)."""
    handle = await start_engine(token_rate=10.0, context_length=100_000)
    engine = handle.engine
    results: list[Any] = []
    async with client_for(handle) as client, trio.open_nursery() as nursery:

        async def call() -> None:
            results.append((await client.post("/generate", json={"text": "Hi", "rid": "x1", "sampling_params": {
                "max_new_tokens": 1000, "ignore_eos": True}})).json())

        nursery.start_soon(call)
        await engine.wait_until(lambda: tokens_of(engine, "x1") >= 3)
        r = await client.post("/update_weight_version", json={"new_version": "7"})
        assert r.json()["success"] and r.json()["new_version"] == "7"
    assert results[0]["meta_info"]["finish_reason"] == ABORTED
    record = engine.request_log[-1]
    # Every token carries the version in effect when it was produced: the extra decode step after the abort ran
    # under the new label.
    assert record.token_versions[:-1] == ("default",) * (len(record.token_versions) - 1)
    assert record.token_versions[-1] == "7"
    assert results[0]["meta_info"]["weight_version"] == "7"
    assert [v for _, v in engine.version_history] == ["default", "7"]


async def test_pause_bad_mode_is_400(start_engine: StartEngine) -> None:
    """§3.1: mode is one of "abort" | "retract" | "in_place"; anything else is a 400, never a 500."""
    handle = await start_engine()
    async with client_for(handle) as client:
        r = await client.post("/pause_generation", json={"mode": "sideways"})
        assert r.status_code == 400
        assert handle.engine.paused is None
        r = await client.post("/pause_generation", content=b"not json")
        assert r.status_code == 400
