"""Conformance of non-streaming ``/generate`` with sglang-protocol.md §1 (request fields, defaults, finish reasons)."""

from __future__ import annotations

import json
from array import array
from functools import partial

import httpx
import trio
import trio.testing

from engine import EngineHandle

from .conftest import CHAT_PROMPT, StartEngine, client_for, read_sse

IM_END = 151645
NORMAL_META_KEYS = {
    "id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions", "reasoning_tokens",
    "completion_tokens", "cached_tokens", "e2e_latency", "response_sent_to_client_ts",
}


async def test_generate_text_prompt_stops_on_im_end(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.3: "output_ids always include the matched stop or EOS token"; "Only text is trimmed";
    ``{"type":"stop","matched": <int token id>}``. §1.4: the meta_info keys of a finished request."""
    r = await client.post("/generate", json={"text": CHAT_PROMPT, "rid": "r1"})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"text", "output_ids", "meta_info"}
    meta = body["meta_info"]
    assert set(meta) == NORMAL_META_KEYS
    assert body["output_ids"][-1] == IM_END
    assert meta["finish_reason"] == {"type": "stop", "matched": IM_END}
    assert meta["id"] == "r1"
    assert meta["completion_tokens"] == len(body["output_ids"])
    assert meta["prompt_tokens"] == len(engine.engine.tokenizer.encode(CHAT_PROMPT))
    assert meta["weight_version"] == "default"
    assert meta["cached_tokens"] == 0 and meta["num_retractions"] == 0
    assert "<|im_end|>" not in body["text"]
    assert body["text"] == engine.engine.tokenizer.decode(body["output_ids"][:-1])
    record = engine.engine.request_log[-1]
    assert record.rid == "r1" and record.output_ids == tuple(body["output_ids"])
    assert record.token_versions == ("default",) * len(body["output_ids"])
    assert not record.client_disconnected


async def test_generate_input_ids_and_text_wins(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.1: "Give exactly one of text, input_ids" ... "If both text and input_ids are present, text wins"."""
    ids = engine.engine.tokenizer.encode(CHAT_PROMPT)
    by_ids = (await client.post("/generate", json={"input_ids": ids})).json()
    by_text = (await client.post("/generate", json={"text": CHAT_PROMPT})).json()
    both = (await client.post("/generate", json={"text": CHAT_PROMPT, "input_ids": [1, 2, 3]})).json()
    assert by_ids["output_ids"] == by_text["output_ids"] == both["output_ids"]
    assert both["meta_info"]["prompt_tokens"] == len(ids)


async def test_generate_put_and_unknown_keys(client: httpx.AsyncClient) -> None:
    """§1: "PUT is accepted as well as POST"; "Unknown top-level keys are ignored"."""
    r = await client.put("/generate", json={"text": "Hello", "no_such_key": {"x": 1}, "session_id": "s"})
    assert r.status_code == 200


async def test_default_max_new_tokens_is_128(client: httpx.AsyncClient) -> None:
    """§1.2: "max_new_tokens (default 128 if the key is omitted)"; §1.3 ``{"type":"length","length": N}``."""
    r = await client.post("/generate", json={"text": "Hello", "sampling_params": {"ignore_eos": True}})
    body = r.json()
    assert len(body["output_ids"]) == 128
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 128}


async def test_null_max_new_tokens_runs_to_context_end(start_engine: StartEngine) -> None:
    """§1.2: "An explicit null means 'until context end'" (clamped to the context by the scheduler)."""
    handle = await start_engine(context_length=40)
    async with client_for(handle) as client:
        ids = handle.engine.tokenizer.encode("Hello there")
        r = await client.post("/generate", json={"input_ids": ids, "sampling_params": {
            "max_new_tokens": None, "ignore_eos": True}})
        body = r.json()
        assert len(body["output_ids"]) == 40 - len(ids)
        assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 40 - len(ids)}
        # Omitted: the default 128 is clamped too, not rejected.
        r = await client.post("/generate", json={"input_ids": ids, "sampling_params": {"ignore_eos": True}})
        assert r.status_code == 200 and len(r.json()["output_ids"]) == 40 - len(ids)


async def test_context_overflow_is_400(start_engine: StartEngine) -> None:
    """§1.2: "If prompt + max_new_tokens exceeds the context, the request is rejected with 400"."""
    handle = await start_engine(context_length=40)
    async with client_for(handle) as client:
        ids = handle.engine.tokenizer.encode("Hello there")
        r = await client.post("/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": 40}})
        assert r.status_code == 400
        message = r.json()["error"]["message"]
        assert message.startswith("Requested token count exceeds the model's maximum context length of 40 tokens.")
        assert f"{len(ids)} tokens from the input messages and 40 tokens for the completion" in message
        ok = await client.post("/generate", json={"input_ids": ids, "sampling_params": {
            "max_new_tokens": 40 - len(ids), "ignore_eos": True}})
        assert ok.status_code == 200
        r = await client.post("/generate", json={"input_ids": [100] * 40})
        assert r.status_code == 400
        assert "is longer than the model's context length (40 tokens)" in r.json()["error"]["message"]


async def test_streaming_value_error_is_an_error_chunk(client: httpx.AsyncClient) -> None:
    """§1.6: "A ValueError during streaming produces one data: {"error":{"message":…,"type":"invalid_request_error",
    "code":400,"retryable":false}} before [DONE]" (HTTP 200); a malformed body stays a plain 400 (§1.5)."""
    for body in ({"input_ids": [], "stream": True},
                 {"text": "Hi", "stream": True, "sampling_params": {"temperature": -1}},
                 {"input_ids": [1] * 40000, "stream": True}):
        r = await client.post("/generate", json=body)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.text.split("\n\n") if line]
        assert events[-1] == "data: [DONE]" and len(events) == 2
        error = json.loads(events[0][len("data: "):])["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == 400 and error["retryable"] is False
    r = await client.post("/generate", json={"text": 5, "stream": True})
    assert r.status_code == 400 and "text" in r.json()["error"]["message"]


async def test_bad_input_is_400_never_500(client: httpx.AsyncClient) -> None:
    """§1.1 / §1.2 validation; §1.5 "A ValueError in a non-streaming request, such as a bad input ... returns HTTP
    400 with body {"error":{"message":…}}"."""
    cases = [
        b"", b"{", b"[]", b'"text"', b"{}", b'{"input_ids": []}', b'{"input_ids": [1, "a"]}',
        b'{"input_ids": [999999999]}', b'{"text": ["a", "b"]}', b'{"text": "Hi", "rid": 5}',
        b'{"text": "Hi", "sampling_params": []}', b'{"text": "Hi", "sampling_params": {"max_new_tokens": -1}}',
        b'{"text": "Hi", "sampling_params": {"top_p": 0}}', b'{"text": "Hi", "sampling_params": {"top_k": 0}}',
        b'{"text": "Hi", "sampling_params": {"stop": 5}}', b'{"text": "Hi", "sampling_params": {"n": 2}}',
        b'{"text": "Hi", "sampling_params": {"no_such_param": 1}}', b'{"text": "Hi", "stream": "yes"}',
        b'{"text": "\\ud800"}', b'{"text": "Hi", "top_logprobs_num": -1}',
    ]
    for content in cases:
        r = await client.post("/generate", content=content, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (content, r.status_code, r.text)
        assert isinstance(r.json()["error"]["message"], str)


async def test_logit_bias_is_validated_as_sglang_and_recorded(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.2: ``logit_bias`` (token id strings -> numbers) is a sampling parameter; SGLang's ``SamplingParams.verify``
    refuses a key outside the vocabulary. The scripted engine records it and does not apply it (docs/engine.md)."""
    ok = await client.post("/generate", json={"text": "Hi", "sampling_params": {
        "max_new_tokens": 2, "logit_bias": {"13": -100, "42": 2.5}, "sampling_seed": 3}})
    assert ok.status_code == 200
    record = engine.engine.request_log[-1]
    assert record.sampling.logit_bias == ((13, -100.0), (42, 2.5)) and record.sampling.sampling_seed == 3
    for bias in ([1], {"x": 1}, {"1": "a"}, {"1": True}, {"-1": 1}, {"999999999": 1}):
        bad = await client.post("/generate", json={"text": "Hi", "sampling_params": {"logit_bias": bias}})
        assert bad.status_code == 400, (bias, bad.text)
        assert "logit_bias" in bad.json()["error"]["message"]


async def test_stop_string_trims_text_but_keeps_token(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.3: ``{"type":"stop","matched": "<stop string>"}``; "output_ids always include the matched stop";
    "Only text is trimmed ... With no_stop_trim=true the stop string is kept in text"."""
    full = (await client.post("/generate", json={"text": CHAT_PROMPT})).json()
    # A stop string that occurs inside the default reply: the first "about".
    assert "about" in full["text"]
    r = (await client.post("/generate", json={"text": CHAT_PROMPT, "sampling_params": {"stop": ["about"]}})).json()
    assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": "about"}
    decoded = engine.engine.tokenizer.decode(r["output_ids"])
    assert decoded.endswith("about") and "about" not in decoded[:-5]
    assert r["text"] == decoded[: decoded.find("about")]
    assert full["output_ids"][: len(r["output_ids"])] == r["output_ids"]
    kept = (await client.post("/generate", json={"text": CHAT_PROMPT, "sampling_params": {
        "stop": "about", "no_stop_trim": True}})).json()
    assert kept["text"] == decoded


async def test_stop_token_ids_and_ignore_eos(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.2 ``stop_token_ids``, ``ignore_eos``; §1.3 a ``stop_token_ids`` hit is ``FINISH_MATCHED_TOKEN``."""
    full = (await client.post("/generate", json={"text": CHAT_PROMPT})).json()
    target = full["output_ids"][3]
    r = (await client.post("/generate", json={"text": CHAT_PROMPT, "sampling_params": {
        "stop_token_ids": [target]}})).json()
    assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": target}
    assert r["output_ids"] == full["output_ids"][: full["output_ids"].index(target) + 1]
    ignored = (await client.post("/generate", json={"text": CHAT_PROMPT, "sampling_params": {
        "ignore_eos": True, "max_new_tokens": len(full["output_ids"]) + 5}})).json()
    assert ignored["meta_info"]["finish_reason"]["type"] == "length"
    assert ignored["output_ids"][: len(full["output_ids"])] == full["output_ids"]


async def test_skip_special_tokens_affects_text_only(client: httpx.AsyncClient) -> None:
    """§1.2 ``skip_special_tokens`` (default true), ``no_stop_trim``; §5.4 "<|im_end|> is special and is stripped
    from text, but it remains in output_ids"; §1.3 "a stop token's text is kept too unless skip_special_tokens
    removes it"."""
    slime = {"skip_special_tokens": False, "spaces_between_special_tokens": False, "no_stop_trim": True}
    raw = (await client.post("/generate", json={"text": CHAT_PROMPT, "sampling_params": slime})).json()
    assert raw["text"].endswith("<|im_end|>")
    assert raw["text"].startswith("<think>")
    trimmed = (await client.post("/generate", json={"text": CHAT_PROMPT, "sampling_params": {
        "skip_special_tokens": False}})).json()
    assert trimmed["text"] == raw["text"][: -len("<|im_end|>")]
    assert trimmed["output_ids"] == raw["output_ids"]


async def test_logprobs_triples(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.4: "Logprob tuples are [logprob, token_id, token_text|null]"; "token_text is filled only when
    return_text_in_logprobs=true"; "output_token_logprobs has the same length as output_ids" (§1.3)."""
    body = (await client.post("/generate", json={"text": CHAT_PROMPT, "return_logprob": True})).json()
    meta = body["meta_info"]
    lps = meta["output_token_logprobs"]
    assert [t[1] for t in lps] == body["output_ids"]
    assert all(t[2] is None and -4.0 <= t[0] < 0 for t in lps)
    assert meta["output_token_logprobs_length"] == len(lps)
    assert meta["input_token_logprobs"] == []
    with_text = (await client.post("/generate", json={
        "text": CHAT_PROMPT, "return_logprob": True, "return_text_in_logprobs": True})).json()["meta_info"]
    tk = engine.engine.tokenizer
    assert [t[2] for t in with_text["output_token_logprobs"]] == [tk.token_text(t) for t in body["output_ids"]]
    assert [t[0] for t in with_text["output_token_logprobs"]] == [t[0] for t in lps]


async def test_prompt_logprobs_and_top_logprobs(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.1 ``logprob_start_len``: "N≥0 also returns prompt logprobs from position N"; §1.4 "Its first element
    has logprob null when logprob_start_len=0"; ``output_top_logprobs`` "per position, a list of such triples"."""
    ids = engine.engine.tokenizer.encode(CHAT_PROMPT)
    meta = (await client.post("/generate", json={
        "input_ids": ids, "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 3,
        "token_ids_logprob": [ids[0]]})).json()["meta_info"]
    assert [t[1] for t in meta["input_token_logprobs"]] == ids
    assert meta["input_token_logprobs"][0][0] is None
    assert all(t[0] < 0 for t in meta["input_token_logprobs"][1:])
    assert len(meta["output_top_logprobs"]) == len(meta["output_token_logprobs"])
    for top, chosen in zip(meta["output_top_logprobs"], meta["output_token_logprobs"]):
        assert len(top) == 3 and top[0][:2] == chosen[:2]
        assert [t[0] for t in top] == sorted((t[0] for t in top), reverse=True)
    assert len(meta["output_token_ids_logprobs"]) == len(meta["output_token_logprobs"])
    later = (await client.post("/generate", json={
        "input_ids": ids, "return_logprob": True, "logprob_start_len": 5})).json()["meta_info"]
    assert [t[1] for t in later["input_token_logprobs"]] == ids[5:]


async def test_every_logprob_is_a_float32_value_as_sglangs_are(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """SGLang's logprobs are float32 tensors turned into lists: each value survives a float32 round trip, which is
    what lets a client store them in 4 bytes (``proxy/trajectory/tokens.py:exact_logprobs``). The engine's too:
    output, prompt, top and requested-id logprobs."""
    ids = engine.engine.tokenizer.encode(CHAT_PROMPT)
    meta = (await client.post("/generate", json={
        "input_ids": ids, "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 3,
        "token_ids_logprob": [ids[0]]})).json()["meta_info"]
    values = [t[0] for t in meta["output_token_logprobs"] + meta["input_token_logprobs"][1:]]
    values += [t[0] for top in meta["output_top_logprobs"] + meta["output_token_ids_logprobs"] for t in top]
    assert len(values) > 3 * len(meta["output_token_logprobs"])
    assert array("f", values).tolist() == values


async def test_logprob_start_len_past_prompt_aborts(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.1: "N > prompt_len makes the request finish with an abort"; §1.5 "A validation abort (status_code 400)
    in non-streaming mode raises ValueError, which becomes 400"; §1.6 "an abort with status_code 400 is also
    yielded as a normal chunk"."""
    ids = engine.engine.tokenizer.encode("Hello there")
    body = {"input_ids": ids, "return_logprob": True, "logprob_start_len": len(ids) + 1}
    r = await client.post("/generate", json=body)
    assert r.status_code == 400 and "logprob_start_len" in r.json()["error"]["message"]
    async with client.stream("POST", "/generate", json={**body, "stream": True}) as response:
        events = await read_sse(response)
    assert events[-1] == "[DONE]"
    reason = events[-2]["meta_info"]["finish_reason"]
    assert reason["type"] == "abort" and reason["status_code"] == 400


async def test_return_prompt_token_ids(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§1.1 ``return_prompt_token_ids``: "Adds a top-level prompt_token_ids to the response"."""
    body = (await client.post("/generate", json={"text": "Hi", "return_prompt_token_ids": True})).json()
    assert body["prompt_token_ids"] == engine.engine.tokenizer.encode("Hi")


async def test_duplicate_inflight_rid_is_400(start_engine: StartEngine, autojump_clock: trio.testing.MockClock) -> None:
    """§1.1 ``rid``: "A duplicate raises ValueError("Duplicate request ID detected")"; §1.5 → 400."""
    handle = await start_engine(token_rate=5.0)
    async with client_for(handle) as client, trio.open_nursery() as nursery:
        nursery.start_soon(partial(client.post, "/generate", json={"text": "Hi", "rid": "same"}))
        await handle.engine.wait_until(lambda: handle.engine.active_requests())
        r = await client.post("/generate", json={"text": "Hi", "rid": "same"})
        assert r.status_code == 400
        assert r.json() == {"error": {"message": "Duplicate request ID detected"}}
        handle.engine.abort("same")
    # Once finished, the rid may be reused.
    async with client_for(handle) as client:
        assert (await client.post("/generate", json={"text": "Hi", "rid": "same"})).status_code == 200


async def test_deterministic_for_a_seed(start_engine: StartEngine) -> None:
    """spec §12: "be deterministic for a given seed" (text, ids and logprobs)."""
    results = []
    for seed in (7, 7, 8):
        handle = await start_engine(seed=seed)
        async with client_for(handle) as client:
            body = (await client.post("/generate", json={"text": CHAT_PROMPT, "return_logprob": True})).json()
            results.append((body["output_ids"], body["meta_info"]["output_token_logprobs"]))
    assert results[0] == results[1]
    assert results[0] != results[2]


async def test_min_new_tokens_defers_eos(client: httpx.AsyncClient) -> None:
    """§1.2 ``min_new_tokens``: EOS / stop tokens are not honoured before that many tokens."""
    full = (await client.post("/generate", json={"text": CHAT_PROMPT})).json()
    n = len(full["output_ids"])
    longer = (await client.post("/generate", json={"text": CHAT_PROMPT, "sampling_params": {
        "min_new_tokens": n, "max_new_tokens": n + 3}})).json()
    assert longer["output_ids"][:n] == full["output_ids"]
    assert longer["meta_info"]["finish_reason"] == {"type": "length", "length": n + 3}


async def test_create_engine_app_in_process(qwen3_path) -> None:
    """``create_engine_app(config)`` gives a quart-trio app and its engine, usable without a socket."""
    from engine import EngineConfig, create_engine_app

    app, engine = create_engine_app(EngineConfig(tokenizer_path=qwen3_path))
    async with app.test_app() as test_app:
        client = test_app.test_client()
        r = await client.post("/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 4}})
        body = await r.get_json()
        assert r.status_code == 200 and len(body["output_ids"]) == 4
    assert engine.statistics().finished == 1
