"""Routed experts (sglang-protocol.md §1.4): shape, start_len, determinism, final chunk only."""

from __future__ import annotations

import base64

import httpx
import trio
import trio.testing

from engine import EngineHandle, decode_routed_experts, expected_row

from .conftest import CHAT_PROMPT, StartEngine, client_for, stream_events


async def test_routed_experts_shape_and_rows(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.4: "Base64 of the raw bytes of a C-contiguous int32 tensor with shape [seqlen − 1 −
    routed_experts_start_len, num_hidden_layers, num_experts_per_tok]"; "seqlen is prompt_tokens +
    completion_tokens"; "Each row is the routing at the step where that position was the input token"."""
    config = engine.engine.config
    ids = engine.engine.tokenizer.encode(CHAT_PROMPT)
    for start in (0, 5, len(ids) - 1, len(ids)):
        body = (await client.post("/generate", json={
            "input_ids": ids, "return_routed_experts": True, "routed_experts_start_len": start})).json()
        meta = body["meta_info"]
        raw = base64.b64decode(meta["routed_experts"])
        seqlen = meta["prompt_tokens"] + meta["completion_tokens"]
        assert len(raw) == 4 * (seqlen - 1 - start) * config.num_layers * config.experts_per_token
        rows = decode_routed_experts(meta["routed_experts"], config.num_layers, config.experts_per_token)
        tokens = ids + body["output_ids"]
        for offset, row in enumerate(rows):
            position = start + offset
            assert row == expected_row(config.seed, position, tokens[position], "default", config.num_layers,
                                       config.num_experts, config.experts_per_token)
            for layer in row:
                assert len(set(layer)) == len(layer) and all(0 <= e < config.num_experts for e in layer)


async def test_routed_experts_with_numpy_layout(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.4: "Decode with np.frombuffer(b64decode(s), dtype=np.int32).reshape(-1, L, K)"."""
    import numpy as np

    config = engine.engine.config
    meta = (await client.post("/generate", json={"text": "Hi", "return_routed_experts": True})).json()["meta_info"]
    array = np.frombuffer(base64.b64decode(meta["routed_experts"]), dtype=np.int32)
    array = array.reshape(-1, config.num_layers, config.experts_per_token)
    assert array.shape[0] == meta["prompt_tokens"] + meta["completion_tokens"] - 1
    assert array.tolist() == decode_routed_experts(meta["routed_experts"], config.num_layers,
                                                   config.experts_per_token)


async def test_routed_experts_start_len_out_of_range_aborts(client: httpx.AsyncClient) -> None:
    """§1.1 ``routed_experts_start_len``: "Valid range is 0…prompt_tokens; anything else makes the request finish
    with an abort"."""
    for start in (-1, 10):
        r = await client.post("/generate", json={"input_ids": [100, 200, 300], "return_routed_experts": True,
                                                  "routed_experts_start_len": start})
        assert r.status_code == 400
        assert "routed_experts_start_len" in r.json()["error"]["message"]


async def test_routed_experts_absent_unless_requested_and_enabled(start_engine: StartEngine) -> None:
    """§1.1 ``return_routed_experts``: "only has an effect if the server was started with
    --enable-return-routed-experts ... Without that flag the key is silently absent from the response"."""
    handle = await start_engine(enable_return_routed_experts=False)
    async with client_for(handle) as client:
        meta = (await client.post("/generate", json={"text": "Hi", "return_routed_experts": True})).json()
        assert "routed_experts" not in meta["meta_info"]
        # Validation of start_len is skipped too when the feature is off.
        r = await client.post("/generate", json={"text": "Hi", "return_routed_experts": True,
                                                  "routed_experts_start_len": 99})
        assert r.status_code == 200
    handle = await start_engine()
    async with client_for(handle) as client:
        meta = (await client.post("/generate", json={"text": "Hi"})).json()["meta_info"]
        assert "routed_experts" not in meta


async def test_routed_experts_rows_follow_weight_version(
    start_engine: StartEngine, autojump_clock: trio.testing.MockClock
) -> None:
    """§1.4 rows are computed at the step where a position was the input: after a version change mid-request
    (retract pause + update, §3.1/§3.3), rows of later steps use the new weights. Final chunk only (§1.6)."""
    handle = await start_engine(token_rate=10.0)
    engine = handle.engine
    config = engine.config
    ids = engine.tokenizer.encode("Hello there")
    results: list = []
    async with client_for(handle) as client, trio.open_nursery() as nursery:

        async def call() -> None:
            results.append(await stream_events(client, {"input_ids": ids, "return_routed_experts": True,
                                                        "sampling_params": {"max_new_tokens": 12, "ignore_eos": True}}))

        nursery.start_soon(call)
        await engine.wait_until(lambda: any(len(s.output_ids) >= 4 for s in engine.active_requests()))
        await client.post("/pause_generation", json={"mode": "in_place"})
        await client.post("/update_weights_from_disk", json={"model_path": "m", "weight_version": "v2"})
        await client.post("/continue_generation", json={})
    chunks = results[0][:-1]
    assert all("routed_experts" not in c["meta_info"] for c in chunks[:-1])
    final = chunks[-1]
    record = engine.request_log[-1]
    rows = decode_routed_experts(final["meta_info"]["routed_experts"], config.num_layers, config.experts_per_token)
    tokens = ids + final["output_ids"]
    assert len(rows) == len(tokens) - 1
    for position, row in enumerate(rows):
        # Position p is the input of the step that produced token p + 1.
        version = record.token_versions[max(0, position + 1 - len(ids))]
        assert row == expected_row(config.seed, position, tokens[position], version, config.num_layers,
                                   config.num_experts, config.experts_per_token)
    assert record.token_versions[0] == "default" and record.token_versions[-1] == "v2"
