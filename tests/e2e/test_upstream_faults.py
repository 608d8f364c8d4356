"""Every upstream fault mode of the engine gives a clear OpenAI error, commits nothing and leaves the session usable
(a retry of the same request succeeds and continues the chain); a client that disconnects mid-stream cancels its
upstream request and commits nothing."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
import trio

from engine import EngineConfig, serve_engine
from engine.script import PROTOCOL_FAULTS
from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from tests.e2e.harness import Proxy

SYSTEM = {"role": "system", "content": "You are terse."}


async def settled(proxy: Proxy, session: str) -> dict[str, Any]:
    """The session's debug view once nothing is in flight (the driver releases right after the answer)."""
    with trio.fail_after(10):
        while True:
            view = await proxy.debug(session)
            if view is not None and view["in_flight"] == 0:
                return view
            await trio.sleep(0.01)


async def two_steps_with_a_fault(proxy: Proxy, session: str, fault: dict, expected: tuple[int, str]) -> None:
    """Step 1 succeeds; step 2 meets the fault (clear error, nothing committed); its retry succeeds and continues
    step 1's chain."""
    messages = [SYSTEM, {"role": "user", "content": "first"}]
    first = await proxy.chat(session, {"messages": messages, "return_token_ids": True})
    assert first.status_code == 200, first.text
    messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "second"}]
    failed = await proxy.chat(session, {"messages": messages, **fault})
    assert (failed.status_code, failed.json()["error"]["code"]) == expected, failed.text
    assert failed.json()["error"]["type"] == "upstream_error"
    view = await settled(proxy, session)
    assert view["steps"] == 1
    retry = await proxy.chat(session, {"messages": messages, "return_token_ids": True})
    assert retry.status_code == 200, retry.text
    step1, step2 = first.json(), retry.json()
    prefix = step1["prompt_token_ids"] + step1["token_ids"]
    assert step2["prompt_token_ids"][: len(prefix)] == prefix
    segments = await proxy.segments(session)
    assert [segment["step_ids"] for segment in segments] == [[1, 2]]
    assert segments[0]["token_ids"] == step2["prompt_token_ids"] + step2["token_ids"]


@pytest.mark.parametrize(
    ("script_fault", "engine_fault", "expected"),
    [
        ({"error_status": 500}, {}, (502, "upstream_error")),
        ({"error_status": 503}, {}, (503, "upstream_overloaded")),
        # Every 2nd stream is cut after 3 tokens: step 1 is stream 1, step 2 stream 2 (cut), its retry stream 3.
        ({}, {"fault_drop_stream_after": 3, "fault_drop_stream_every": 2}, (502, "upstream_unavailable")),
    ],
    ids=["http-500", "http-503", "stream-cut-after-3-tokens"],
)
async def test_upstream_fault_is_a_clear_error_and_the_retry_continues_the_chain(
    start_proxy, script_fault, engine_fault, expected
) -> None:
    session = "fault"
    script = [
        {"session": session, "output": "One."},
        {"session": session, "output": "Two, and more words after that.", **script_fault},
        {"session": session, "output": "Two, and more words after that."},
    ]
    # The stream cut needs a streamed upstream request: behind a router without worker URLs, a non-streaming
    # client's request streams upstream too (with worker URLs it would go non-streaming, and nothing is cut).
    proxy = await start_proxy(script=script, engine=engine_fault, worker_urls=not engine_fault)
    await two_steps_with_a_fault(proxy, session, {}, expected)
    if engine_fault:
        assert [r.dropped_by_fault for r in proxy.requests_of(session)] == [False, True, False]


async def test_stream_cut_after_the_first_bytes_is_an_sse_error_event_then_done(start_proxy) -> None:
    session = "cut-stream"
    output = "A long enough answer to be cut in the middle of it."
    proxy = await start_proxy(
        script=[{"session": session, "output": o} for o in ("Hello.", output)],
        engine={"fault_drop_stream_after": 4, "fault_drop_stream_every": 2},
    )
    messages = [SYSTEM, {"role": "user", "content": "hi"}]

    async def stream_with_sdk(messages: list[dict], session: str = session) -> str:
        async with proxy.async_client() as sdk:
            stream = await sdk.chat.completions.create(
                model="m", messages=messages, stream=True, extra_headers={"X-Session-Id": session},
            )
            async with stream:
                return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    assert await stream_with_sdk(messages) == "Hello."  # stream 1
    messages += [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "talk"}]
    async with httpx.AsyncClient(timeout=30) as client:  # stream 2: cut after 4 tokens
        async with client.stream("POST", proxy.url + "/v1/chat/completions", json={"messages": messages, "stream": True},
                                 headers={"X-Session-Id": session}) as response:
            assert response.status_code == 200
            raw = b"".join([chunk async for chunk in response.aiter_bytes()])
    events = [frame[len(b"data: "):] for frame in raw.split(b"\n\n") if frame]
    assert events[-1] == b"[DONE]"
    error = json.loads(events[-2])["error"]
    assert (error["code"], error["type"]) == ("upstream_unavailable", "upstream_error")
    assert all(b'"error"' not in event for event in events[:-2]) and len(events) > 3
    assert (await settled(proxy, session))["steps"] == 1
    assert await stream_with_sdk(messages) == output  # stream 3: the retry continues the chain
    assert [segment["step_ids"] for segment in await proxy.segments(session)] == [[1, 2]]
    # The SDK raises on the error event (stream 4 is cut again).
    with pytest.raises(openai.APIError, match="stream cut"):
        await stream_with_sdk([SYSTEM, {"role": "user", "content": "once more"}], session="another")


async def test_connection_refused_then_the_engine_comes_up_and_the_session_continues(nursery, qwen3_path) -> None:
    with trio.socket.socket() as sock:  # a port that was free a moment ago: connection refused
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    upstream = f"http://127.0.0.1:{port}"
    # The window is given: asked while the upstream is down, it would be the tokenizer's (131072), which the
    # engine (32768) refuses for the retry that follows within the window's 5 s refresh interval.
    config = ProxyConfig(
        port=0, tokenizer_path=qwen3_path, sglang_router_url=upstream, tool_call_parse_backend="local",
        reasoning_parse_backend="local", context_window=32768,
    )
    handle = await nursery.start(run_proxy, config)
    proxy = Proxy(handle, qwen3_path, "qwen3")
    messages = [SYSTEM, {"role": "user", "content": "anyone there?"}]
    refused = await proxy.chat("refused", {"messages": messages})
    assert refused.status_code == 502
    assert refused.json()["error"]["code"] == "upstream_unavailable"
    view = await settled(proxy, "refused")
    assert view["steps"] == 0
    await nursery.start(serve_engine, EngineConfig(tokenizer_path=qwen3_path, port=port, script_lines=(
        {"session": "refused", "output": "Yes."},
    )))
    retry = await proxy.chat("refused", {"messages": messages})
    assert retry.status_code == 200 and retry.json()["choices"][0]["message"]["content"] == "Yes."
    assert [segment["step_ids"] for segment in await proxy.segments("refused")] == [[1]]


async def test_upstream_latency_past_the_client_timeout_cancels_the_request_and_commits_nothing(start_proxy) -> None:
    session = "slow"
    proxy = await start_proxy(script=[
        {"session": session, "output": "Late answer.", "latency": 0.6},
    ])
    messages = [SYSTEM, {"role": "user", "content": "hurry"}]
    async with proxy.async_client(timeout=0.2) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(model="m", messages=messages, extra_headers={"X-Session-Id": session})
    engine = proxy.engine
    with trio.fail_after(10):
        await engine.wait_until(lambda: any(r.client_disconnected for r in proxy.requests_of(session)))
    assert (await settled(proxy, session))["steps"] == 0
    async with proxy.async_client() as client:
        retry = await client.chat.completions.create(model="m", messages=messages, extra_headers={"X-Session-Id": session})
    # The engine resumes the unfinished script entry for the session (its latency again): the same answer.
    assert retry.choices[0].message.content == "Late answer."
    assert [segment["step_ids"] for segment in await proxy.segments(session)] == [[1]]


async def test_client_disconnect_mid_stream_cancels_the_upstream_request_and_commits_nothing(start_proxy) -> None:
    session = "leaver"
    words = " ".join(f"w{i}" for i in range(100))
    proxy = await start_proxy(
        script=[{"session": session, "output": words}],
        engine={"token_rate": 100.0},  # ~2 s for the whole answer: the disconnect lands long before its end
    )
    messages = [SYSTEM, {"role": "user", "content": "ramble"}]
    async with proxy.async_client() as client:
        stream = await client.chat.completions.create(
            model="m", messages=messages, stream=True, extra_headers={"X-Session-Id": session},
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
        received = 0
        async with stream:  # leaving it closes the connection: the client is gone
            async for chunk in stream:
                received += sum(1 for choice in chunk.choices if choice.delta.content)
                if received >= 3:
                    break
    engine = proxy.engine
    with trio.fail_after(10):
        await engine.wait_until(lambda: bool(proxy.requests_of(session)))
    record = proxy.requests_of(session)[0]
    assert record.client_disconnected
    assert len(record.output_ids) < len(proxy.tito.encode_text(words))  # cut long before the end
    view = await settled(proxy, session)
    assert view["steps"] == 0
    retry = await proxy.chat(session, {"messages": messages, "max_tokens": 4,
                                       "chat_template_kwargs": {"enable_thinking": False}})
    # The engine resumes the cut script entry for the session (from its start: the retry's prompt has none of it).
    assert retry.status_code == 200 and words.startswith(retry.json()["choices"][0]["message"]["content"])
    assert retry.json()["choices"][0]["finish_reason"] == "length"
    assert [segment["step_ids"] for segment in await proxy.segments(session)] == [[1]]


# -- answers that break SGLang's protocol (issue 13, item 6) ---------------------------------------------------------

ONE, TWO = "One.", "Two, and a few more words after that."
SESSION_FIELDS = ("trajectory_id", "parent_traj_id", "rollout_id")


def as_if_alone(segments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Segments without what names the session (its id, its generations' ids): what two sessions that lived the same
    steps share."""
    out = []
    for segment in segments:
        segment = {k: v for k, v in segment.items() if k not in SESSION_FIELDS}
        segment["steps"] = [{k: v for k, v in step.items() if k != "generation_id"} for step in segment["steps"]]
        out.append(segment)
    return out


async def protocol_error_of(proxy: Proxy, session: str, messages: list[dict], *, stream: bool) -> dict[str, Any]:
    """The error a request meets: an HTTP 502 (non-streaming, or nothing streamed yet), or an SSE error event and
    ``[DONE]`` after the tokens that arrived intact (the stream had opened)."""
    body = {"messages": messages, "stream": stream}
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", proxy.url + "/v1/chat/completions", json=body,
                                 headers={"X-Session-Id": session}) as response:
            raw = b"".join([chunk async for chunk in response.aiter_bytes()])
    if response.status_code != 200:
        assert stream is False or response.status_code == 502, raw
        assert response.status_code == 502, raw
        return json.loads(raw)["error"]
    assert stream, raw
    events = [frame[len(b"data: "):] for frame in raw.split(b"\n\n") if frame]
    assert events[-1] == b"[DONE]" and all(b'"error"' not in event for event in events[:-2]), raw
    return json.loads(events[-2])["error"]


@pytest.mark.parametrize("fault", sorted(PROTOCOL_FAULTS))
async def test_an_answer_that_breaks_the_protocol_is_a_clear_502_and_leaves_the_session_as_before(
    start_proxy, fault
) -> None:
    """Each scripted protocol fault, for a streaming client (the fault hits token 2: the tokens before it were
    streamed) and a non-streaming one (its upstream request is non-streaming too: worker URLs are known): a 502
    ``upstream_protocol_error`` that says what was wrong and names no internal address; nothing is committed; the
    retry succeeds and the export equals that of a session that never met the fault."""
    modes = {"stream": True, "whole": False}
    script = [{"session": "control", "output": output} for output in (ONE, TWO)]
    for mode in modes:
        script += [
            {"session": mode, "output": ONE},
            {"session": mode, "output": TWO, "protocol_fault": fault, "fault_after": 2},
            {"session": mode, "output": TWO},
        ]
    proxy = await start_proxy(script=script, engine={"token_rate": 200.0})
    first_turn = [SYSTEM, {"role": "user", "content": "first"}]

    async def step(session: str, messages: list[dict]) -> dict[str, Any]:
        response = await proxy.chat(session, {"messages": messages})
        assert response.status_code == 200, response.text
        return response.json()["choices"][0]["message"]

    answer = await step("control", first_turn)
    second_turn = first_turn + [answer, {"role": "user", "content": "second"}]
    assert (await step("control", second_turn))["content"] == TWO
    for mode, stream in modes.items():
        assert await step(mode, first_turn) == answer
        before = (await settled(proxy, mode))["trie"]
        error = await protocol_error_of(proxy, mode, second_turn, stream=stream)
        assert (error["code"], error["type"]) == ("upstream_protocol_error", "upstream_error"), (mode, error)
        message = error["message"]
        assert message.startswith("SGLang's answer broke the protocol: "), message
        assert proxy.engine_handle.url not in message and "127.0.0.1" not in message and "Traceback" not in message
        expected = {
            "token_out_of_vocab": "outside the vocabulary", "negative_token_id": "outside the vocabulary",
            "logprobs_short": "logprob triples", "logprobs_mismatch": "does not match output id",
            "no_output_ids": "no output_ids", "no_meta_info": "no meta_info", "not_json": "not JSON",
            "bad_finish_reason": "unknown finish_reason",
        }[fault]
        assert expected in message, message
        view = await settled(proxy, mode)
        assert (view["steps"], view["trie"]) == (1, before)
        assert (await step(mode, second_turn))["content"] == TWO
        assert as_if_alone(await proxy.segments(mode)) == as_if_alone(await proxy.segments("control")), mode
