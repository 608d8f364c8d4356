"""Scripted generation and injected faults (spec §12: "scriptable ... inject faults (errors, dropped streams,
latency)"); the script format is documented in docs/engine.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from engine import EngineConfig, Engine
from engine.script import PROTOCOL_FAULTS, ScriptError
from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import UpstreamProtocolError

from .conftest import CHAT_PROMPT, StartEngine, client_for, stream_events

IM_END = 151645
REPLY_1 = "<think>\nLet me look.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"


async def generate(client: httpx.AsyncClient, key: str | None = None, **body: Any) -> dict[str, Any]:
    headers = {"X-SMG-Routing-Key": key} if key else {}
    body = body if "input_ids" in body else {"text": CHAT_PROMPT, **body}
    r = await client.post("/generate", json=body, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


async def test_script_entries_consumed_per_routing_key(start_engine: StartEngine) -> None:
    """Entries for a session are used in order by requests whose X-SMG-Routing-Key matches; ``"*"`` entries serve
    any request with no keyed entry left; then the default policy takes over."""
    handle = await start_engine(script_lines=[
        {"session": "s1", "output": REPLY_1},
        {"session": "s2", "output": "two"},
        {"session": "s1", "output": "second for s1"},
        {"session": "*", "output": "anyone"},
    ])
    engine = handle.engine
    tk = engine.tokenizer
    async with client_for(handle) as client:
        first = await generate(client, "s1")
        assert first["output_ids"] == tk.encode(REPLY_1) + [IM_END]
        assert first["text"] == REPLY_1  # <think> and <tool_call> are not special: they stay in text
        assert (await generate(client, "s2"))["text"] == "two"
        assert (await generate(client, "s1"))["text"] == "second for s1"
        assert (await generate(client, "s1"))["text"] == "anyone"
        assert "<think>" in (await generate(client, "s1"))["text"]  # default policy
    assert [r.source for r in engine.request_log] == ["script[0]", "script[1]", "script[2]", "script[3]", "default"]
    assert engine.statistics().script_remaining == {}


async def test_script_keys_rid_and_body_routing_key(start_engine: StartEngine) -> None:
    """The session key is the X-SMG-Routing-Key header, else the body's routing_key (§1.1), else the rid."""
    handle = await start_engine(script_lines=[
        {"session": "by-rid", "output": "rid entry"},
        {"session": "by-body", "output": "body entry"},
    ])
    async with client_for(handle) as client:
        assert (await generate(client, rid="by-rid"))["text"] == "rid entry"
        assert (await generate(client, routing_key="by-body"))["text"] == "body entry"
    assert handle.engine.request_log[1].routing_key == "by-body"


async def test_script_file(start_engine: StartEngine, tmp_path: Path) -> None:
    """``--script FILE``: JSON lines; blank lines and ``#`` comments are skipped."""
    path = tmp_path / "script.jsonl"
    path.write_text("# a comment\n" + json.dumps({"session": "*", "output": "from file"}) + "\n\n")
    handle = await start_engine(script=path, script_lines=[{"session": "*", "output": "from memory"}])
    async with client_for(handle) as client:
        assert (await generate(client))["text"] == "from file"
        assert (await generate(client))["text"] == "from memory"


def test_invalid_script_is_rejected(qwen3_path: Path) -> None:
    """A malformed entry fails at start-up with its index, not at request time."""
    for bad in ({"session": "s"}, {"session": "", "output": "x"}, {"session": "s", "output": "x", "oops": 1},
                {"session": "s", "output": "x", "error_status": 200},
                {"session": "s", "output": "x", "protocol_fault": "gremlins"},
                {"session": "s", "output": "x", "protocol_fault": "not_json", "fault_after": -1}):
        with pytest.raises(ScriptError):
            Engine(EngineConfig(tokenizer_path=qwen3_path, script_lines=[bad]))


async def test_script_without_eos_truncates(start_engine: StartEngine) -> None:
    """``"eos": false``: no end-of-turn token; the model keeps generating (filler) until max_new_tokens, the
    truncation case (§1.3 ``{"type":"length"}``)."""
    handle = await start_engine(script_lines=[{"session": "*", "output": "cut short", "eos": False}])
    async with client_for(handle) as client:
        body = await generate(client, sampling_params={"max_new_tokens": 12})
    tk = handle.engine.tokenizer
    head = tk.encode("cut short")
    assert body["output_ids"][: len(head)] == head and len(body["output_ids"]) == 12
    assert IM_END not in body["output_ids"]
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 12}


async def test_script_resumes_after_abort(start_engine: StartEngine, autojump_clock: trio.testing.MockClock) -> None:
    """An entry cut short by an abort stays open for its session: a continuation request (prompt + partial output,
    the partial-rollout recipe of §8) continues the same reply."""
    long_reply = " ".join(f"word{i}" for i in range(60))
    handle = await start_engine(token_rate=10.0, script_lines=[{"session": "k", "output": long_reply}])
    engine = handle.engine
    tk = engine.tokenizer
    prompt = tk.encode(CHAT_PROMPT)
    results: list[Any] = []
    async with client_for(handle) as client:
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                results.append(await generate(client, "k", input_ids=prompt, rid="seg1",
                                              sampling_params={"max_new_tokens": 1000}))

            nursery.start_soon(call)
            await engine.wait_until(lambda: any(len(s.output_ids) >= 5 for s in engine.active_requests()))
            await client.post("/abort_request", json={"rid": "seg1"})
        partial = results[0]["output_ids"]
        assert results[0]["meta_info"]["finish_reason"]["type"] == "abort"
        # Truncation by length leaves the entry open too.
        middle = await generate(client, "k", input_ids=prompt + partial, rid="seg2",
                                sampling_params={"max_new_tokens": 10})
        assert middle["meta_info"]["finish_reason"] == {"type": "length", "length": 10}
        so_far = partial + middle["output_ids"]
        rest = await generate(client, "k", input_ids=prompt + so_far, rid="seg3",
                              sampling_params={"max_new_tokens": 1000})
        assert so_far + rest["output_ids"] == tk.encode(long_reply) + [IM_END]
        assert rest["meta_info"]["finish_reason"] == {"type": "stop", "matched": IM_END}


def test_several_entries_cut_at_once_are_each_resumed_by_their_own_continuation() -> None:
    """The choices of an ``n > 1`` request, paused together, leave several entries of one session open: each
    continuation (its input ends with its own partial reply) resumes its own; a request that continues none takes
    the last one left open, as when only one entry could be open."""
    from engine.planner import resume_offset
    from engine.script import ScriptBook, ScriptEntry

    book = ScriptBook()
    a, b, c = (ScriptEntry("k", text) for text in ("a", "b", "c"))
    book.leave_open("k", a, (1, 2, 3, 4), 2)
    book.leave_open("k", b, (5, 6, 7, 8), 3)
    book.leave_open("k", c, (9, 10, 11), 1)

    def fit(prompt: list[int]) -> Any:
        return lambda entry: resume_offset(prompt, entry.tokens, entry.emitted)

    assert book.take_open("k", fit([0, 5, 6, 7])).entry is b
    assert book.take_open("k", fit([0, 1, 2])).entry is a
    book.leave_open("k", a, (1, 2, 3, 4), 2)
    assert book.take_open("k", fit([0, 42])).entry is a  # a fresh request: the last one left open
    assert book.take_open("k", fit([0, 9])) is None  # ...and the others were dropped


async def test_script_entry_faults(start_engine: StartEngine, autojump_clock: trio.testing.MockClock) -> None:
    """Per-entry faults: ``error_status`` (HTTP error, entry consumed), ``drop_after`` (stream cut without
    [DONE]), ``latency`` (before the first token), ``token_rate``."""
    handle = await start_engine(script_lines=[
        {"session": "*", "output": "never", "error_status": 503},
        {"session": "*", "output": "one two three four five six", "drop_after": 2},
        {"session": "*", "output": "slow start", "latency": 30.0},
        {"session": "*", "output": "a b c d e f g h i j", "token_rate": 2.0},
    ])
    engine = handle.engine
    async with client_for(handle) as client:
        r = await client.post("/generate", json={"text": "Hi"})
        assert r.status_code == 503 and "error" in r.json()
        frames: list[bytes] = []
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream("POST", "/generate", json={"text": "Hi", "stream": True}) as response:
                async for chunk in response.aiter_bytes():
                    frames.append(chunk)
        raw = b"".join(frames)
        assert b"[DONE]" not in raw
        last = json.loads(raw.strip().split(b"\n\n")[-1][len(b"data: "):])
        assert len(last["output_ids"]) == 2
        record = engine.request_log[-1]
        assert record.dropped_by_fault and not record.client_disconnected
        start = trio.current_time()
        body = (await client.post("/generate", json={"text": "Hi"})).json()
        assert body["text"] == "slow start" and trio.current_time() - start >= 30.0
        assert body["meta_info"]["e2e_latency"] >= 30.0
        start = trio.current_time()
        body = (await client.post("/generate", json={"text": "Hi"})).json()
        n = len(body["output_ids"])
        assert trio.current_time() - start >= n / 2.0


async def test_global_faults(start_engine: StartEngine) -> None:
    """Engine-wide faults: every k-th request answered with an HTTP error; every k-th stream cut after n tokens."""
    handle = await start_engine(fault_error_every=2, fault_error_status=500,
                                fault_drop_stream_after=3, fault_drop_stream_every=2)
    async with client_for(handle) as client:
        assert (await client.post("/generate", json={"text": "Hi"})).status_code == 200
        assert (await client.post("/generate", json={"text": "Hi"})).status_code == 500
        events = await stream_events(client, {"text": "Hi"})  # request 3, stream 1: intact
        assert events[-1] == "[DONE]"
        # Request 4 (a stream) is answered 500 before it counts as a stream.
        assert (await client.post("/generate", json={"text": "Hi", "stream": True})).status_code == 500
        with pytest.raises(httpx.RemoteProtocolError):  # request 5 is the 2nd stream: cut after 3 tokens
            await stream_events(client, {"text": "Hi"})


FAULTY = "one two three four five six seven"


@pytest.mark.parametrize("fault", sorted(PROTOCOL_FAULTS))
@pytest.mark.parametrize("mode", ["stream", "incremental-stream", "whole"])
async def test_script_protocol_faults_break_the_answer_where_they_say(
    start_engine: StartEngine, fault: str, mode: str
) -> None:
    """``protocol_fault``: the answer breaks SGLang's protocol from output token ``fault_after`` on; the project's
    own decoder (told the vocabulary size) refuses it with a protocol error after exactly the intact tokens; the
    entry is used up (the session's next request gets its next entry, not a resumption of the broken one)."""
    stream, incremental = mode != "whole", mode.startswith("incremental")
    handle = await start_engine(incremental_streaming_output=incremental, token_rate=200.0, script_lines=[
        {"session": "k", "output": FAULTY, "protocol_fault": fault, "fault_after": 2},
        {"session": "k", "output": "fine"},
    ])
    tk = handle.engine.tokenizer
    prompt = tk.encode(CHAT_PROMPT)
    async with SGLangClient.single_server(handle.url, incremental_streaming=incremental) as upstream:
        with pytest.raises(UpstreamProtocolError) as info:
            if stream:
                async with upstream.generate_stream(prompt, routing_key="k", vocab_size=tk.vocab_size) as events:
                    async for _ in events:
                        pass
            else:
                await upstream.generate(prompt, routing_key="k", vocab_size=tk.vocab_size)
        kept = list(info.value.partial.output_ids) if info.value.partial is not None else []
        # What was accepted is intact, and nothing from the faulty position on (but for the finish reason, which
        # only the final chunk carries).
        assert kept == (tk.encode(FAULTY) + [IM_END])[: len(kept)]
        assert fault == "bad_finish_reason" or len(kept) <= 2
        finished = await upstream.generate(prompt, routing_key="k", vocab_size=tk.vocab_size)
        assert finished.text == "fine"
