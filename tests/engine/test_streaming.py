"""Conformance of streaming ``/generate`` with sglang-protocol.md §1.6 (framing, cumulative/incremental chunks)."""

from __future__ import annotations

import httpx
import trio
import trio.testing

from engine import EngineHandle

from .conftest import CHAT_PROMPT, StartEngine, client_for, read_sse, stream_events


async def test_stream_is_cumulative_by_default(client: httpx.AsyncClient) -> None:
    """§1.6: "Each event is b"data: " + json + b"\\n\\n""; "The stream always ends with data: [DONE]";
    "Cumulative is the default ... every chunk carries the full text, the full output_ids, and the full
    meta_info.output_token_logprobs"; "Intermediate chunks have finish_reason: null. e2e_latency and routed_experts
    appear only in the final chunk"."""
    request = {"text": CHAT_PROMPT, "return_logprob": True, "return_routed_experts": True}
    full = (await client.post("/generate", json=request)).json()
    events = await stream_events(client, request)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) > 1
    for previous, chunk in zip(chunks, chunks[1:]):
        assert chunk["output_ids"][: len(previous["output_ids"])] == previous["output_ids"]
        assert chunk["text"].startswith(previous["text"])
    for chunk in chunks[:-1]:
        meta = chunk["meta_info"]
        assert meta["finish_reason"] is None
        assert "e2e_latency" not in meta and "routed_experts" not in meta
        assert len(meta["output_token_logprobs"]) == len(chunk["output_ids"]) == meta["completion_tokens"]
    final = chunks[-1]
    assert final["output_ids"] == full["output_ids"]
    assert final["text"] == full["text"]
    assert final["meta_info"]["finish_reason"] == full["meta_info"]["finish_reason"]
    assert final["meta_info"]["output_token_logprobs"] == full["meta_info"]["output_token_logprobs"]
    assert final["meta_info"]["routed_experts"] == full["meta_info"]["routed_experts"]
    assert "e2e_latency" in final["meta_info"]


async def test_stream_incremental_mode(start_engine: StartEngine) -> None:
    """§1.6: "Incremental: text and output_ids are deltas. output_token_logprobs ... sliced to the same delta ...
    input_token_logprobs and output_token_logprobs_length stay cumulative"."""
    handle = await start_engine(incremental_streaming_output=True)
    async with client_for(handle) as client:
        request = {"text": CHAT_PROMPT, "return_logprob": True}
        full = (await client.post("/generate", json=request)).json()
        events = await stream_events(client, request)
    chunks = events[:-1]
    assert events[-1] == "[DONE]"
    assert sum((c["output_ids"] for c in chunks), []) == full["output_ids"]
    assert "".join(c["text"] for c in chunks) == full["text"]
    lps = sum((c["meta_info"]["output_token_logprobs"] for c in chunks), [])
    assert lps == full["meta_info"]["output_token_logprobs"]
    total = 0
    for chunk in chunks:
        total += len(chunk["output_ids"])
        assert chunk["meta_info"]["output_token_logprobs_length"] == total == chunk["meta_info"]["completion_tokens"]


async def test_stream_holds_back_possible_stop_prefix(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.6: "Chunks are held back while the tail might be the start of a stop string"; §1.3 text trimmed."""
    full = (await client.post("/generate", json={"text": CHAT_PROMPT})).json()
    stop = "answer about"  # occurs in the default reply ("Here is a short answer about ...")
    assert stop in full["text"]
    events = await stream_events(client, {"text": CHAT_PROMPT, "sampling_params": {"stop": stop}})
    chunks = events[:-1]
    for chunk in chunks[:-1]:
        text = chunk["text"]
        assert not any(text.endswith(stop[:k]) for k in range(1, len(stop)))
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert chunks[-1]["text"] == full["text"][: full["text"].find(stop)]


async def test_stream_coalesces_for_a_slow_reader(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.6: "If the consumer lags, the server coalesces by yielding only the newest state ... No data is lost"."""
    request = {"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
    async with client.stream("POST", "/generate", json=request) as response:
        # Read nothing until the generation has finished.
        await engine.engine.wait_until(lambda: engine.engine.statistics().finished == 1)
        events = await read_sse(response)
    chunks = events[:-1]
    assert len(chunks[-1]["output_ids"]) == 200
    assert len(chunks) < 200


async def test_weight_version_read_per_chunk(start_engine: StartEngine, autojump_clock: trio.testing.MockClock) -> None:
    """§1.4: "meta_info.weight_version is the server's current server_args.weight_version, read each time an
    output batch is processed"; §3.4 "With retract or in_place, a single response can span versions. Only streaming
    chunks reveal the switch point"."""
    handle = await start_engine(token_rate=10.0)
    engine = handle.engine
    async with client_for(handle) as client, trio.open_nursery() as nursery:
        seen: list[list] = []

        async def reader() -> None:
            seen.append(await stream_events(client, {"text": "Hello", "rid": "v", "sampling_params": {
                "max_new_tokens": 30, "ignore_eos": True}}))

        nursery.start_soon(reader)
        await engine.wait_until(lambda: any(len(s.output_ids) >= 5 for s in engine.active_requests()))
        r = await client.post("/update_weight_version", json={"new_version": "v2", "abort_all_requests": False})
        assert r.json() == {"success": True, "message": "Weight version updated to v2", "new_version": "v2"}
    chunks = seen[0][:-1]
    versions = [c["meta_info"]["weight_version"] for c in chunks]
    assert versions[0] == "default" and versions[-1] == "v2"
    assert versions == sorted(versions, key=lambda v: v == "v2")  # one switch, never back
    record = engine.request_log[-1]
    assert record.finish_reason == {"type": "length", "length": 30}
    assert "default" in record.token_versions and "v2" in record.token_versions
    switch_time, version = engine.version_history[-1]
    assert version == "v2"
