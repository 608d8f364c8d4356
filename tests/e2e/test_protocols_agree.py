"""One trajectory, whatever the protocol (issue 18 item 3): the same tool-using conversation with reasoning, driven
through chat completions, the Responses API and Anthropic Messages by their official SDKs (each echoing its own
answer objects back, as agents do), exports the same segment: the same token ids, loss mask and logprobs, one
segment each. A front end that translated any message differently (an echoed reasoning block, a tool call's
arguments or id, the system prompt, the tools) would show here as a different prompt or a second segment.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest
import trio

from tests.e2e.harness import CALCULATOR_TOOLS
from tests.e2e.test_calculator_flow import ANSWER, SYSTEM, USER, qwen3_5_outputs, qwen3_outputs

RESULTS = ["8", "16"]


async def chat_conversation(proxy: Any, session: str) -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    async with proxy.async_client() as client:
        for turn in range(3):
            answer = await client.chat.completions.create(
                model="calculator", messages=messages, tools=CALCULATOR_TOOLS, extra_headers={"X-Session-Id": session},
            )
            message = answer.choices[0].message.model_dump(exclude_none=True)
            messages.append(message)
            if turn < 2:
                call = message["tool_calls"][0]
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": RESULTS[turn]})
    assert messages[-1]["content"] == ANSWER


async def responses_conversation(proxy: Any, session: str) -> None:
    tools = [{"type": "function", **tool["function"]} for tool in CALCULATOR_TOOLS]
    items: list[Any] = [{"role": "user", "content": USER}]
    async with proxy.async_client() as client:
        for turn in range(3):
            response = await client.responses.create(
                model="calculator", instructions=SYSTEM, input=items, tools=tools, store=False,
                extra_headers={"X-Session-Id": session},
            )
            items += [item.model_dump(exclude_none=True) for item in response.output]
            if turn < 2:
                call = response.output[-1]
                items.append({"type": "function_call_output", "call_id": call.call_id, "output": RESULTS[turn]})
    assert response.output_text == ANSWER


async def messages_conversation(proxy: Any, session: str) -> None:
    tools = [
        {"name": tool["function"]["name"], "description": tool["function"]["description"],
         "input_schema": tool["function"]["parameters"]}
        for tool in CALCULATOR_TOOLS
    ]

    def run() -> str:
        messages: list[Any] = [{"role": "user", "content": USER}]
        sdk = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0, timeout=60.0,
                                  default_headers={"X-Session-Id": session})
        with sdk:
            for turn in range(3):
                message = sdk.messages.create(model="calculator", max_tokens=512, system=SYSTEM, messages=messages,
                                              tools=tools)
                messages.append({"role": "assistant", "content": message.content})
                if turn < 2:
                    call = next(block for block in message.content if block.type == "tool_use")
                    messages.append({"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": call.id, "content": RESULTS[turn]},
                    ]})
        return "".join(block.text for block in message.content if block.type == "text")

    assert await trio.to_thread.run_sync(run) == ANSWER


@pytest.mark.parametrize("model", ["qwen3", "qwen3_5"])
async def test_the_three_protocols_record_the_same_trajectory(start_proxy, model: str) -> None:
    outputs = qwen3_outputs() if model == "qwen3" else qwen3_5_outputs()
    conversations = {"chat": chat_conversation, "responses": responses_conversation,
                     "messages": messages_conversation}
    script = [{"session": f"agree-{name}", "output": output} for name in conversations for output in outputs]
    proxy = await start_proxy(model=model, script=script)
    exported: dict[str, dict[str, Any]] = {}
    for name, converse in conversations.items():
        session = f"agree-{name}"
        await converse(proxy, session)
        segments = await proxy.segments(session)
        assert len(segments) == 1, (name, [segment["boundary_reason"] for segment in segments])
        exported[name] = segments[0]
    chat = exported["chat"]
    assert chat["num_turns"] == 3 and sum(chat["loss_mask"]) > 0
    for name in ("responses", "messages"):
        segment = exported[name]
        # The prompt each protocol's translation rendered: compared as text first, so a mismatch reads easily.
        assert proxy.tito.decode(segment["token_ids"]) == proxy.tito.decode(chat["token_ids"]), name
        assert segment["token_ids"] == chat["token_ids"], name
        assert segment["loss_mask"] == chat["loss_mask"], name
        assert json.dumps(segment["logprobs"]) == json.dumps(chat["logprobs"]), name
        assert segment["num_turns"] == chat["num_turns"], name
