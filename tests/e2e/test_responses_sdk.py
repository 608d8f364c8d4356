"""``POST /v1/responses`` through the official openai SDK (``client.responses.create`` and ``.stream``) on the
embedded engine: function calls over several turns, continued by echoing the output items or by
``previous_response_id``, each conversation finalized and exported as ONE segment whose loss mask covers exactly
what the engine generated and whose logprobs include the ones the API answered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import trio

from tests.e2e.harness import CALCULATOR_TOOLS, generated_ids
from tests.e2e.test_calculator_flow import ANSWER, SYSTEM, USER, qwen3_5_outputs, qwen3_outputs
from tests.e2e.test_choices import settled

#: the calculator tools of the chat tests, as Responses function tools
TOOLS = [{"type": "function", **tool["function"]} for tool in CALCULATOR_TOOLS]
INSTRUCTIONS = SYSTEM
RESULTS = ["8", "16"]


def check_one_segment(proxy: Any, session: str, segments: list[dict[str, Any]], outputs: list[str],
                      answered_logprobs: list[list[float]], answer: str = ANSWER) -> None:
    """One segment, the engine's requests its prefixes, mask 1 exactly on what the engine generated, and the
    logprobs the API answered found (in order) in each generated span."""
    assert len(segments) == 1, [s["boundary_reason"] for s in segments]
    segment = segments[0]
    ids, mask, logprobs = segment["token_ids"], segment["loss_mask"], segment["logprobs"]
    requests = proxy.requests_of(session)
    assert len(requests) == len(outputs) and segment["num_turns"] == len(outputs)
    expected_mask = [0] * len(ids)
    for record, output, answered in zip(requests, outputs, answered_logprobs, strict=True):
        start = len(record.input_ids)
        span = list(record.output_ids)
        assert span == generated_ids(proxy.tito, output)
        assert ids[:start] == list(record.input_ids) and ids[start:start + len(span)] == span
        expected_mask[start:start + len(span)] = [1] * len(span)
        remaining = iter(logprobs[start:start + len(span)])
        assert all(any(value == pytest.approx(got) for got in remaining) for value in answered), "logprobs"
    assert mask == expected_mask
    assert proxy.tito.decode(ids).endswith(answer + "<|im_end|>")


def turn_logprobs(response: Any) -> list[float]:
    return [lp.logprob for item in response.output if item.type == "message"
            for part in item.content for lp in (part.logprobs or [])]


@pytest.mark.parametrize("model", ["qwen3", "qwen3_5"])
async def test_function_calls_over_turns_echoing_items(start_proxy, model: str) -> None:
    """Non-streaming, stateless (``store: false``, the whole conversation sent each turn, reasoning items and all,
    as Codex CLI does): three turns, two function calls, one segment."""
    outputs = qwen3_outputs() if model == "qwen3" else qwen3_5_outputs()
    session = f"responses-echo-{model}"
    proxy = await start_proxy(model=model, script=[{"session": session, "output": o} for o in outputs])
    items: list[Any] = [{"role": "user", "content": USER}]
    answered: list[list[float]] = []
    async with proxy.async_client() as client:
        for turn in range(3):
            response = await client.responses.create(
                model="calculator", instructions=INSTRUCTIONS, input=items, tools=TOOLS, store=False,
                include=["message.output_text.logprobs"], top_logprobs=2, temperature=0.7,
                extra_headers={"X-Session-Id": session},
            )
            assert response.status == "completed" and response.id.startswith("resp_")
            answered.append(turn_logprobs(response))
            kinds = [item.type for item in response.output]
            reasoning = response.output[0]
            assert reasoning.type == "reasoning" and reasoning.content[0].text.strip()
            items += [item.model_dump(exclude_none=True) for item in response.output]
            if turn < 2:
                call = response.output[-1]
                assert call.type == "function_call" and call.name == ("add", "multiply")[turn]
                assert json.loads(call.arguments) == [{"a": 5, "b": 3}, {"a": 8, "b": 2}][turn]
                assert kinds == ["reasoning", "message", "function_call"]
                items.append({"type": "function_call_output", "call_id": call.call_id, "output": RESULTS[turn]})
            else:
                assert kinds == ["reasoning", "message"] and response.output_text == ANSWER
                assert answered[-1] and all(lp <= 0 for lp in answered[-1])
    check_one_segment(proxy, session, await proxy.segments(session), outputs, answered)


async def test_streaming_with_previous_response_id(start_proxy) -> None:
    """Streaming, stateful: each turn sends only its new items and ``previous_response_id`` (and no session id:
    the chain's session is used). The SDK's ``responses.stream()`` accumulates the typed events into the same
    Response; one segment."""
    outputs = qwen3_outputs()
    proxy = await start_proxy(model="qwen3", script=[{"session": "*", "output": o} for o in outputs])
    previous: str | None = None
    new_items: Any = USER
    session: str | None = None
    answered: list[list[float]] = []
    async with proxy.async_client() as client:
        for turn in range(3):
            async with client.responses.stream(
                model="calculator", instructions=INSTRUCTIONS, input=new_items, tools=TOOLS,
                previous_response_id=previous, include=["message.output_text.logprobs"],
            ) as stream:
                events = [event async for event in stream]
                response = await stream.get_final_response()
            numbers = [event.sequence_number for event in events]
            assert numbers == list(range(len(events)))
            kinds = [event.type for event in events]
            assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
            assert "response.reasoning_text.delta" in kinds and "response.output_item.done" in kinds
            deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
            assert deltas == response.output_text
            answered.append(turn_logprobs(response))
            previous = response.id
            if turn < 2:
                call = response.output[-1]
                assert "response.function_call_arguments.delta" in kinds
                assert call.type == "function_call" and call.name == ("add", "multiply")[turn]
                new_items = [{"type": "function_call_output", "call_id": call.call_id, "output": RESULTS[turn]}]
            else:
                assert response.output_text == ANSWER
    # The first response named a new session after itself; the chain kept it.
    session = proxy.engine.request_log[-1].routing_key
    assert session is not None and session.startswith("resp_")
    assert len({record.routing_key for record in proxy.engine.request_log}) == 1
    check_one_segment(proxy, session, await proxy.segments(session), outputs, answered)


async def test_raw_event_stream_and_session_header(start_proxy) -> None:
    """``stream=True`` on ``responses.create``: typed events in order; the answer names its session."""
    proxy = await start_proxy(model="qwen3", script=[{"session": "raw", "output": qwen3_outputs()[0]}])
    async with httpx.AsyncClient(timeout=60) as client:
        async with client.stream("POST", proxy.url + "/v1/responses", json={
            "model": "m", "input": USER, "tools": TOOLS, "stream": True,
        }, headers={"X-Session-Id": "raw"}) as answer:
            assert answer.status_code == 200 and answer.headers["x-session-id"] == "raw"
            assert answer.headers["content-type"].startswith("text/event-stream")
            lines = [line async for line in answer.aiter_lines() if line.startswith("event: ")]
    kinds = [line[len("event: "):] for line in lines]
    assert kinds == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", *["response.reasoning_text.delta"] * (
            kinds.count("response.reasoning_text.delta")),
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", *["response.output_text.delta"] * (
            kinds.count("response.output_text.delta")),
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed",
    ]


async def test_max_output_tokens_is_incomplete(start_proxy) -> None:
    proxy = await start_proxy(model="qwen3", script=[{"session": "short", "output": "Cut off here", "eos": False}])
    async with proxy.async_client() as client:
        response = await client.responses.create(
            model="m", input="Say something long.", max_output_tokens=8, extra_headers={"X-Session-Id": "short"},
        )
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 8


async def test_refusals_in_openai_error_shape(start_proxy) -> None:
    proxy = await start_proxy(model="qwen3")
    async with proxy.async_client() as client:
        with pytest.raises(openai.BadRequestError) as hosted:
            await client.responses.create(model="m", input="hi", tools=[{"type": "web_search"}],
                                          extra_headers={"X-Session-Id": "bad"})
        with pytest.raises(openai.BadRequestError) as unknown:
            await client.responses.create(model="m", input="hi", previous_response_id="resp_nope")
        with pytest.raises(openai.BadRequestError) as image:
            await client.responses.create(model="m", input=[{"role": "user", "content": [
                {"type": "input_image", "image_url": "https://example.invalid/x.png"}]}],
                extra_headers={"X-Session-Id": "bad"})
    assert hosted.value.body["param"] == "tools[0].type" and "web_search" in hosted.value.body["message"]
    assert hosted.value.body["code"] == "unsupported_parameter"
    assert unknown.value.body["param"] == "previous_response_id"
    assert image.value.body["param"] == "input[0].content[0]"
    assert proxy.engine.request_log == type(proxy.engine.request_log)()  # nothing reached the engine


CODEX = Path(__file__).parent.parent / "frontends" / "codex_requests"


async def sse_items(proxy: Any, body: dict[str, Any], session: str) -> list[dict[str, Any]]:
    """POST a Codex body; the items of its ``response.output_item.done`` events (what Codex keeps)."""
    async with httpx.AsyncClient(timeout=60) as client:
        async with client.stream("POST", proxy.url + "/v1/responses", json=body, headers={
            "X-Session-Id": session, "accept": "text/event-stream", "authorization": "Bearer dummy",
        }) as answer:
            assert answer.status_code == 200, await answer.aread()
            events = [json.loads(line[6:]) async for line in answer.aiter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["usage"]["output_tokens"] > 0
    return [event["item"] for event in events if event["type"] == "response.output_item.done"]


async def test_codex_cli_request_bodies_continue_one_segment(start_proxy) -> None:
    """Codex CLI 0.169's real first request (captured), then its second as Codex builds it (the whole history with
    the output items as received, ``encrypted_content: null``, and the tool output): one segment."""
    outputs = [
        "<think>\nI will run it.\n</think>\n\n<tool_call>\n"
        + json.dumps({"name": "exec_command", "arguments": {"cmd": "printf hello > hello.txt"}}) + "\n</tool_call>",
        "<think>\nDone.\n</think>\n\nI wrote hello.txt.",
    ]
    session = "codex-replay"
    proxy = await start_proxy(model="qwen3", script=[{"session": session, "output": o} for o in outputs])
    body = json.loads((CODEX / "codex-turn1.json").read_text())["body"]
    items = await sse_items(proxy, body, session)
    assert [item["type"] for item in items] == ["reasoning", "function_call"]
    reasoning, call = items
    assert reasoning["summary"][0]["text"] == "I will run it.\n" and reasoning["encrypted_content"]
    echoed = [
        {**reasoning, "encrypted_content": None},
        {"type": "function_call", "status": "completed", "id": call["id"], "name": call["name"],
         "arguments": call["arguments"], "call_id": call["call_id"]},
        {"type": "function_call_output", "id": "fco_1", "call_id": call["call_id"], "output": "exit 0"},
    ]
    items = await sse_items(proxy, {**body, "input": body["input"] + echoed}, session)
    assert [item["type"] for item in items] == ["reasoning", "message"]
    assert items[1]["content"][0]["text"] == "I wrote hello.txt."
    check_one_segment(proxy, session, await proxy.segments(session), outputs, [[], []], answer="I wrote hello.txt.")


async def test_upstream_failures_in_both_modes_and_chains_end_with_the_session(start_proxy) -> None:
    """An upstream error before the first token is the chat route's OpenAI error (status and body); a broken
    answer mid-stream ends the event stream with ``error`` and ``response.failed`` (a non-streaming client gets
    the error itself); nothing is recorded for either. A finalized session's response ids continue nothing."""
    proxy = await start_proxy(model="qwen3", script=[
        {"session": "fail", "output": "never sent", "error_status": 503},
        {"session": "fail", "output": "One two three four", "protocol_fault": "not_json", "fault_after": 2},
        {"session": "fail", "output": "One two three four", "protocol_fault": "not_json", "fault_after": 2},
        {"session": "fail", "output": "Fine."},
    ])
    headers = {"X-Session-Id": "fail"}
    before = await proxy.post("/v1/responses", {"input": "hi"}, headers)
    assert before.status_code == 503 and before.json()["error"]["code"] == "upstream_overloaded", before.text
    streamed = await proxy.post("/v1/responses", {"input": "hi", "stream": True}, headers)
    assert streamed.status_code == 200
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert [event["type"] for event in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "upstream_protocol_error" and events[-1]["response"]["status"] == "failed"
    whole = await proxy.post("/v1/responses", {"input": "hi"}, headers)
    assert whole.status_code == 502 and whole.json()["error"]["code"] == "upstream_protocol_error", whole.text
    async with proxy.async_client() as client:
        done = await client.responses.create(model="m", input="hi", extra_headers=headers)
        assert done.output_text == "Fine."
        segments = await proxy.segments("fail")
        assert len(segments) == 1 and segments[0]["num_turns"] == 1
        with pytest.raises(openai.BadRequestError) as gone:
            await client.responses.create(model="m", input="more", previous_response_id=done.id)
    assert gone.value.body["param"] == "previous_response_id"


async def test_a_client_that_leaves_commits_nothing(start_proxy) -> None:
    """A streaming client that stops reading after the first text delta, and a non-streaming one that gives up
    while the answer is generated: the generation hears it (the engine's request is aborted) and nothing is
    committed."""
    words = " ".join(f"w{i}" for i in range(200))
    proxy = await start_proxy(model="qwen3", engine={"token_rate": 50.0}, script=[
        {"session": "leave-stream", "output": words}, {"session": "leave-whole", "output": words},
    ])
    async with proxy.async_client() as client:
        stream = await client.responses.create(model="m", input="ramble", stream=True,
                                               extra_headers={"X-Session-Id": "leave-stream"})
        async with stream:
            async for event in stream:
                if event.type == "response.output_text.delta":
                    break
    with trio.move_on_after(0.5):
        await proxy.post("/v1/responses", {"input": "ramble"}, {"X-Session-Id": "leave-whole"})
    for session in ("leave-stream", "leave-whole"):
        with trio.fail_after(10):
            await proxy.engine.wait_until(lambda: len(proxy.requests_of(session)) == 1)
        record = proxy.requests_of(session)[0]
        assert record.client_disconnected and len(record.output_ids) < 200
        view = await settled(proxy, session)
        assert view is not None and view["steps"] == 0


async def test_session_id_sources(start_proxy) -> None:
    """Without a session header: ``prompt_cache_key`` (Codex's conversation id) names the session; without that
    either, a new session named after the response; a header wins over both; a previous response of another
    session is refused."""
    proxy = await start_proxy(model="qwen3", script=[{"session": "*", "output": "Hi."}] * 4)
    keyed = await proxy.post("/v1/responses", {"input": "a", "prompt_cache_key": "conv-1"})
    assert keyed.status_code == 200 and keyed.headers["x-session-id"] == "conv-1"
    fresh = await proxy.post("/v1/responses", {"input": "b"})
    assert fresh.headers["x-session-id"] == fresh.json()["id"]
    named = await proxy.post("/v1/responses", {"input": "c", "prompt_cache_key": "conv-1"}, {"X-Session-Id": "mine"})
    assert named.headers["x-session-id"] == "mine"
    other = await proxy.post("/v1/responses", {"input": "d", "previous_response_id": keyed.json()["id"]},
                             {"X-Session-Id": "mine"})
    assert other.status_code == 400 and other.json()["error"]["param"] == "previous_response_id"
    assert [record.routing_key for record in proxy.engine.request_log] == ["conv-1", fresh.json()["id"], "mine"]


@pytest.mark.parametrize("model", ["qwen3", "qwen3_5"])
async def test_a_developer_message_mid_conversation_is_served(start_proxy, model: str) -> None:
    """Codex CLI's shape: developer messages first, then later one more. Served on both templates (Qwen3.5's
    takes a system message only first: the later one goes as a user turn), and the conversation stays one
    segment across the turns."""
    outputs = ["<think>\nok\n</think>\n\nFirst." if model == "qwen3" else "ok\n</think>\n\nFirst.",
               "<think>\nok\n</think>\n\nSecond." if model == "qwen3" else "ok\n</think>\n\nSecond."]
    proxy = await start_proxy(model=model, script=[{"session": "dev", "output": o} for o in outputs])
    items: list[Any] = [{"role": "developer", "content": "rules"}, {"role": "developer", "content": "skills"},
                        {"role": "user", "content": "one"}]
    async with proxy.async_client() as client:
        for turn in range(2):
            response = await client.responses.create(model="m", input=items, store=False,
                                                     extra_headers={"X-Session-Id": "dev"})
            assert response.output_text == ("First.", "Second.")[turn]
            items += [item.model_dump(exclude_none=True) for item in response.output]
            items += [{"role": "developer", "content": "sandbox changed"}, {"role": "user", "content": "two"}]
    segments = await proxy.segments("dev")
    assert len(segments) == 1 and segments[0]["num_turns"] == 2
