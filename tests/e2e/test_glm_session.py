"""A multi-turn, tool-using GLM-4.7 session through the proxy on its embedded engine, which speaks GLM itself (its
default policy writes GLM markup and stops on ``<|observation|>`` / ``<|user|>``): the official openai SDK as the
agent, the local parsers, and one token-exact segment equal to the official template's render."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from engine import EngineConfig
from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from proxy.demo import _message_dict
from tests.e2e.family_session import official_ids, run_calculator_session
from tests.e2e.harness import CALCULATOR_TOOLS, Proxy
from tests.tokenization.glm_files import glm_path


def call(name: str, a: int, b: int) -> str:
    return f"<tool_call>{name}<arg_key>a</arg_key><arg_value>{a}</arg_value><arg_key>b</arg_key><arg_value>{b}</arg_value></tool_call>"


#: what a GLM-4.7 model writes after the prompt's "<|assistant|><think>" (the engine adds the stop token)
SCRIPTED = [
    "First add 5 and 3.</think>I'll calculate that." + call("add", 5, 3),
    "Now multiply 8 by 2.</think>" + call("multiply", 8, 2),
    "Done.</think>5 plus 3 is 8, times 2 is 16.",
]


@pytest.mark.parametrize("scripted", [True, False], ids=["scripted-3-turns", "engine-policy-2-turns"])
async def test_glm_tool_session_is_one_token_exact_segment(nursery: trio.Nursery, scripted: bool) -> None:
    """Three scripted GLM turns (two tool calls, then the answer), or the engine's own GLM policy (a call, then the
    answer): the tool calls parse, every checkpoint ends with the stop token, and the session is one segment whose
    ids are the official template's render of the whole conversation."""
    run = await run_calculator_session(
        nursery, family="glm4_7", path=glm_path("glm4_7"), session="glm-calc", script=SCRIPTED if scripted else (),
        turns=len(SCRIPTED) if scripted else 2, ends=("<|observation|>", "<|user|>"))
    # Token-exact: the segment is the official template's render of the whole conversation, closed by <|user|>
    # (the tools offered in the first turns are in its system prompt).
    run.assert_one_segment_equal_to(official_ids(run, run.messages, suffix="<|user|>"))


async def test_tool_results_after_a_turn_that_stopped_on_user_start_a_segment_saying_why(nursery: trio.Nursery) -> None:
    """The model answered without calls (stopped on <|user|>), then the client sends a tool result: the template
    continues with <|observation|>, so no exact fragment exists: a new segment, ``tito_failed``, junction named."""
    path = glm_path("glm4_7")
    config = ProxyConfig(port=0, tokenizer_path=path, trajectory_build_model="glm4_7",
                         tool_call_parse_backend="local", reasoning_parse_backend="local")
    handle = await nursery.start(run_proxy, config, EngineConfig(tokenizer_path=path))
    proxy = Proxy(handle, path, "glm4_7")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Say hello."}]
    async with proxy.async_client() as client:
        first = await client.chat.completions.create(model="glm", messages=messages,
                                                     extra_headers={"X-Session-Id": "glm-junction"})
        assert first.choices[0].finish_reason == "stop"
        messages += [_message_dict(first.choices[0].message),
                     {"role": "tool", "tool_call_id": "stray", "content": "late tool output"}]
        await client.chat.completions.create(model="glm", messages=messages,
                                             extra_headers={"X-Session-Id": "glm-junction"})
    segments = await proxy.segments("glm-junction")
    assert [s["boundary_reason"] for s in segments] == ["session_start", "tito_failed"]
    detail = segments[1].get("boundary_detail") or ""
    assert "junction_mismatch" in detail and "<|observation|>" in detail, segments[1]


async def test_a_streamed_glm_turn_carries_the_message_of_the_non_streamed_one(nursery: trio.Nursery) -> None:
    """The same GLM prompt (the engine's output depends only on it), once streamed and once not, through the SDK:
    the streamed deltas assemble into the same reasoning, content and tool call."""
    path = glm_path("glm4_7")
    config = ProxyConfig(port=0, tokenizer_path=path, trajectory_build_model="glm4_7",
                         tool_call_parse_backend="local", reasoning_parse_backend="local")
    handle = await nursery.start(run_proxy, config, EngineConfig(tokenizer_path=path))
    proxy = Proxy(handle, path, "glm4_7")
    request = {"model": "glm", "tools": CALCULATOR_TOOLS,
               "messages": [{"role": "user", "content": "Please add 5 and 3."}]}
    async with proxy.async_client() as client:
        whole = (await client.chat.completions.create(**request, extra_headers={"X-Session-Id": "a"})).choices[0]
        reasoning, content, calls = [], [], {}
        stream = await client.chat.completions.create(**request, stream=True, extra_headers={"X-Session-Id": "b"})
        async for chunk in stream:
            for choice in chunk.choices:
                delta = choice.delta
                reasoning.append((delta.model_extra or {}).get("reasoning_content") or "")
                content.append(delta.content or "")
                for call in delta.tool_calls or ():
                    entry = calls.setdefault(call.index, {"name": "", "arguments": ""})
                    entry["name"] += (call.function and call.function.name) or ""
                    entry["arguments"] += (call.function and call.function.arguments) or ""
    message = whole.message
    assert whole.finish_reason == "tool_calls"
    assert "".join(reasoning) == message.model_extra["reasoning_content"]
    assert "".join(content) == (message.content or "")
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        (c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls]
