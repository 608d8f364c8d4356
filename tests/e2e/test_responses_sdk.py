"""``POST /v1/responses`` through the official openai SDK (``client.responses.create`` and ``.stream``) on the
embedded engine: function calls over several turns, continued by echoing the output items or by
``previous_response_id``, each conversation finalized and exported as ONE segment whose loss mask covers exactly
what the engine generated and whose logprobs include the ones the API answered."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.harness import generated_ids

TOOLS = [
    {
        "type": "function",
        "name": name,
        "description": f"{name} two integers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    }
    for name in ("add", "multiply")
]
INSTRUCTIONS = "You are a helpful calculator assistant with access to calculator tools."
USER = "Please calculate 5 plus 3, and then multiply the result by 2."
ANSWER = "5 plus 3 equals 8. Multiplying 8 by 2 gives 16."
RESULTS = ["8", "16"]


def qwen3_outputs() -> list[str]:
    def call(name: str, a: int, b: int) -> str:
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": {"a": a, "b": b}}) + "\n</tool_call>"

    return [
        "<think>\nFirst add 5 and 3.\n</think>\n\nI'll calculate that for you.\n" + call("add", 5, 3),
        "<think>\nNow multiply 8 by 2.\n</think>\n\n" + call("multiply", 8, 2),
        "<think>\nDone.\n</think>\n\n" + ANSWER,
    ]


def qwen3_5_outputs() -> list[str]:
    def call(name: str, a: int, b: int) -> str:
        return (
            f"<tool_call>\n<function={name}>\n<parameter=a>\n{a}\n</parameter>\n<parameter=b>\n{b}\n</parameter>\n"
            "</function>\n</tool_call>"
        )

    return [
        "First add 5 and 3.\n</think>\n\nI'll calculate that for you.\n\n" + call("add", 5, 3),
        "Now multiply 8 by 2.\n</think>\n\n" + call("multiply", 8, 2),
        "Done.\n</think>\n\n" + ANSWER,
    ]


def check_one_segment(proxy: Any, session: str, segments: list[dict[str, Any]], outputs: list[str],
                      answered_logprobs: list[list[float]]) -> None:
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
    assert proxy.tito.decode(ids).endswith(ANSWER + "<|im_end|>")


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
                assert kinds == (["reasoning", "message", "function_call"], ["reasoning", "function_call"])[turn]
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
