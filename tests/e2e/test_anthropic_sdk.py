"""The Anthropic Messages API end to end: the official ``anthropic`` SDK's ``messages.create`` and
``messages.stream`` against the proxy on its scripted engine, a tool-using conversation with thinking over three
turns (the SDK's own content blocks echoed back, thinking and tool_use included), then the session finalized and its
export checked: one segment, the generated spans trained (mask 1) with their logprobs, everything else mask 0.

Also: ``count_tokens`` equals the prompt the proxy sent for the same request, and errors come in Anthropic's shape
(the SDK raises its own typed exceptions), including those met before the route runs.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest
import trio

from tests.e2e.harness import generated_ids

SYSTEM = "You are a helpful calculator assistant with access to calculator tools."
USER = "Please calculate 5 plus 3, and then multiply the result by 2."
ANSWER = "5 plus 3 equals 8. Multiplying 8 by 2 gives 16."
TOOLS = [
    {
        "name": name,
        "description": f"{name} two integers",
        "input_schema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    }
    for name in ("add", "multiply")
]
REASONING = ["First add 5 and 3.", "Now multiply 8 by 2.", "Done."]
TEXTS = ["I'll calculate that for you.", "Continuing the calculation.", ANSWER]
CALLS = [("add", {"a": 5, "b": 3}), ("multiply", {"a": 8, "b": 2})]


def outputs() -> list[str]:
    def call(name: str, arguments: dict[str, int]) -> str:
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"

    return [
        f"<think>\n{REASONING[0]}\n</think>\n\n{TEXTS[0]}\n" + call(*CALLS[0]),
        f"<think>\n{REASONING[1]}\n</think>\n\n{TEXTS[1]}\n" + call(*CALLS[1]),
        f"<think>\n{REASONING[2]}\n</think>\n\n{ANSWER}",
    ]


def client(proxy: Any, session: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy.url, api_key="not-needed", max_retries=0, timeout=60.0,
        default_headers={"X-Session-Id": session},
    )


def request(messages: list[Any]) -> dict[str, Any]:
    return dict(
        model="claude-dressage", max_tokens=512, system=SYSTEM, messages=messages, tools=TOOLS,
        thinking={"type": "enabled", "budget_tokens": 1024},
        # The 2026 API has no sampling parameters any more; older clients send them, and they are served.
        extra_body={"temperature": 0.7, "top_p": 0.9},
    )


async def count_tokens(proxy: Any, session: str, messages: list[Any]) -> int:
    def run() -> int:
        body = request(messages)
        del body["max_tokens"], body["extra_body"]
        return client(proxy, session).messages.count_tokens(**body).input_tokens

    return await trio.to_thread.run_sync(run)


def check_answer(message: Any, turn: int) -> None:
    """The Message of turn ``turn``: thinking (signed by the proxy), text, the tool call; the stop reason."""
    kinds = [block.type for block in message.content]
    assert kinds == (["thinking", "text", "tool_use"] if turn < 2 else ["thinking", "text"]), kinds
    thinking, text = message.content[0], message.content[1]
    assert thinking.thinking.strip() == REASONING[turn]
    assert thinking.signature.startswith("dressage-v1:")
    assert text.text == TEXTS[turn]
    if turn < 2:
        call = message.content[2]
        assert (call.name, call.input) == CALLS[turn]
        assert call.id.startswith("call_")
        assert message.stop_reason == "tool_use"
    else:
        assert message.stop_reason == "end_turn"
    assert message.stop_sequence is None
    assert message.role == "assistant" and message.model == "claude-dressage"
    assert message.id.startswith("msg_")


async def run_conversation(proxy: Any, session: str, *, stream: bool) -> None:
    tito = proxy.tito
    messages: list[Any] = [{"role": "user", "content": USER}]
    results = ["8", "16"]
    events: list[str] = []
    for turn, output in enumerate(outputs()):
        counted = await count_tokens(proxy, session, messages)

        def create() -> Any:
            with client(proxy, session) as sdk:
                if not stream:
                    return sdk.messages.create(**request(messages))
                with sdk.messages.stream(**request(messages)) as answer:
                    for event in answer:
                        events.append(event.type)
                    return answer.get_final_message()

        message = await trio.to_thread.run_sync(create)
        check_answer(message, turn)
        sent = proxy.requests_of(session)[-1]
        # usage and count_tokens say the prompt the proxy sent; output_tokens every generated token.
        assert message.usage.input_tokens == len(sent.input_ids) == counted
        assert message.usage.output_tokens == len(generated_ids(tito, output))
        assert list(sent.output_ids) == generated_ids(tito, output)
        assert (sent.sampling_params["temperature"], sent.sampling_params["top_p"]) == (0.7, 0.9)
        assert sent.sampling_params["max_new_tokens"] == 512
        # The agent echoes the SDK's own blocks back (thinking with its signature, text, tool_use), as the SDK's
        # docs show, then answers the tool call with a tool_result.
        messages.append({"role": "assistant", "content": message.content})
        if turn < 2:
            call = message.content[2]
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": results[turn]},
            ]})
    if stream:
        assert events[0] == "message_start" and events[-1] == "message_stop"
        assert {"thinking", "signature", "text", "input_json", "content_block_stop", "message_delta"} <= set(events)

    # One segment: every request continued the previous prompt and answer, token for token.
    sent = proxy.requests_of(session)
    assert len(sent) == 3
    for before, after in zip(sent, sent[1:]):
        assert after.input_ids[: len(before.input_ids) + len(before.output_ids)] == \
            before.input_ids + before.output_ids
    segments = await proxy.segments(session)
    assert len(segments) == 1, [segment["boundary_reason"] for segment in segments]
    segment = segments[0]
    last = sent[-1]
    assert segment["token_ids"] == list(last.input_ids + last.output_ids)
    expected_mask = [0] * len(segment["token_ids"])
    for record in sent:
        start = len(record.input_ids)
        expected_mask[start:start + len(record.output_ids)] = [1] * len(record.output_ids)
    assert segment["loss_mask"] == expected_mask
    trained = [lp for lp, mask in zip(segment["logprobs"], expected_mask) if mask]
    assert len(trained) == sum(len(record.output_ids) for record in sent)
    assert all(lp != 0.0 for lp in trained[:-1])
    assert segment["num_turns"] == 3
    assert tito.decode(segment["token_ids"]).endswith(ANSWER + "<|im_end|>")


async def test_messages_create_tools_and_thinking_three_turns_one_segment(start_proxy) -> None:
    proxy = await start_proxy(model="qwen3", script=[{"session": "anth-create", "output": o} for o in outputs()])
    await run_conversation(proxy, "anth-create", stream=False)


async def test_messages_stream_tools_and_thinking_three_turns_one_segment(start_proxy) -> None:
    proxy = await start_proxy(model="qwen3", script=[{"session": "anth-stream", "output": o} for o in outputs()])
    await run_conversation(proxy, "anth-stream", stream=True)
