"""Streaming end to end: the streamed message equals the non-streamed one for the same engine script (content,
reasoning and tool calls; ``finish_reason`` ``tool_calls``), for Qwen3 and Qwen3.5 and both parser backends;
tokens reach the client while the engine still generates; the token extension fields and usage in streams."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.harness import CALCULATOR_TOOLS

QWEN3_OUTPUT = (
    "<think>\nThe user wants 6 times 7; I will call the tool.\n</think>\n\nLet me multiply — ça va.\n"
    + "<tool_call>\n" + json.dumps({"name": "multiply", "arguments": {"a": 6, "b": 7}}) + "\n</tool_call>"
)
QWEN3_5_OUTPUT = (
    "The user wants 6 times 7; I will call the tool.\n</think>\n\nLet me multiply — ça va.\n\n"
    "<tool_call>\n<function=multiply>\n<parameter=a>\n6\n</parameter>\n<parameter=b>\n7\n</parameter>\n"
    "</function>\n</tool_call>"
)
MESSAGES = [{"role": "user", "content": "What is 6 times 7?"}]


async def collect_stream(client: Any, session: str, **kwargs: Any) -> dict[str, Any]:
    """The message an OpenAI client assembles from a stream, plus what the stream carried besides."""
    stream = await client.chat.completions.create(
        model="m", messages=MESSAGES, tools=CALCULATOR_TOOLS, stream=True,
        extra_headers={"X-Session-Id": session}, **kwargs,
    )
    content, reasoning, calls, finish, usage, token_ids, extras_first = [], [], {}, None, None, [], None
    async for chunk in stream:  # (runs to [DONE]; the stream closes itself)
        extra = chunk.model_extra or {}
        if extras_first is None:
            extras_first = extra.get("prompt_token_ids")
        token_ids += extra.get("token_ids") or []
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
            if (delta.model_extra or {}).get("reasoning_content"):
                reasoning.append(delta.model_extra["reasoning_content"])
            for call in delta.tool_calls or ():
                entry = calls.setdefault(call.index, {"id": None, "name": None, "arguments": ""})
                entry["id"] = entry["id"] or call.id
                if call.function and call.function.name:
                    entry["name"] = call.function.name
                entry["arguments"] += (call.function.arguments or "") if call.function else ""
            finish = choice.finish_reason or finish
    return {
        "content": "".join(content), "reasoning": "".join(reasoning) or None,
        "tool_calls": [calls[i] for i in sorted(calls)], "finish_reason": finish, "usage": usage,
        "token_ids": token_ids, "prompt_token_ids": extras_first,
    }


def as_plain(completion: Any) -> dict[str, Any]:
    message = completion.choices[0].message
    return {
        "content": message.content or "", "reasoning": (message.model_extra or {}).get("reasoning_content"),
        "tool_calls": [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                       for c in message.tool_calls or ()],
        "finish_reason": completion.choices[0].finish_reason,
    }


@pytest.mark.parametrize(
    ("model", "output", "backend"),
    [("qwen3", QWEN3_OUTPUT, "sglang_api"), ("qwen3", QWEN3_OUTPUT, "local"), ("qwen3_5", QWEN3_5_OUTPUT, "sglang_api")],
)
async def test_streamed_message_equals_the_non_streamed_one(start_proxy, model, output, backend) -> None:
    proxy = await start_proxy(
        model=model, tool_call_parse_backend=backend, reasoning_parse_backend=backend,
        script=[{"session": "plain", "output": output}, {"session": "streamed", "output": output}],
        engine={"token_rate": 2000.0},
    )
    async with proxy.async_client() as client:
        plain = await client.chat.completions.create(
            model="m", messages=MESSAGES, tools=CALCULATOR_TOOLS, extra_headers={"X-Session-Id": "plain"},
            extra_body={"return_token_ids": True},
        )
        streamed = await collect_stream(
            client, "streamed", stream_options={"include_usage": True}, extra_body={"return_token_ids": True},
        )
    expected = as_plain(plain)
    assert expected["finish_reason"] == "tool_calls"
    assert expected["tool_calls"][0]["name"] == "multiply"
    assert json.loads(expected["tool_calls"][0]["arguments"]) == {"a": 6, "b": 7}
    assert expected["content"] == "Let me multiply — ça va."
    assert expected["reasoning"].startswith("The user wants 6 times 7")
    # The tool-call ids are deterministic per (session, step, index): the two sessions differ only in the session.
    for call in streamed["tool_calls"]:
        call.pop("id")
    for call in expected["tool_calls"]:
        call.pop("id")
    assert {k: streamed[k] for k in expected} == expected
    assert streamed["token_ids"] == plain.model_extra["token_ids"]
    assert streamed["prompt_token_ids"] == plain.model_extra["prompt_token_ids"]
    assert streamed["usage"].completion_tokens == plain.usage.completion_tokens == len(plain.model_extra["token_ids"])
    # Both sessions recorded the same answer.
    plain_segment = (await proxy.segments("plain"))[0]
    streamed_segment = (await proxy.segments("streamed"))[0]
    assert plain_segment["token_ids"] == streamed_segment["token_ids"]
    assert plain_segment["loss_mask"] == streamed_segment["loss_mask"]


async def test_streaming_is_real_tokens_reach_the_client_while_the_engine_generates(start_proxy) -> None:
    words = " ".join(f"word{i}" for i in range(40))
    proxy = await start_proxy(script=[{"session": "live", "output": words}], engine={"token_rate": 100.0})
    seen_while_running = None
    async with proxy.async_client() as client:
        stream = await client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, extra_headers={"X-Session-Id": "live"}, logprobs=True,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
        text, logprob_tokens = [], []
        async with stream:
            async for chunk in stream:
                for choice in chunk.choices:
                    if choice.delta.content:
                        text.append(choice.delta.content)
                        if seen_while_running is None:
                            seen_while_running = proxy.engine.statistics().running
                    if choice.logprobs and choice.logprobs.content:
                        logprob_tokens += [entry.token for entry in choice.logprobs.content]
    assert "".join(text) == words
    assert seen_while_running == 1  # the first words arrived while the engine was still generating the rest
    assert "".join(logprob_tokens) == words


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_top_logprobs_returns_n_alternatives_per_token_and_the_trajectory_keeps_the_chosen_logprob(
    start_proxy, stream
) -> None:
    """``logprobs`` + ``top_logprobs: 3`` is SGLang's ``top_logprobs_num`` (issue 14, item 4): each token entry has
    three alternatives, most likely first, the chosen token among them with its own logprob (the engine's
    synthetic alternatives put the sampled token first); the recorded step keeps only the chosen logprobs."""
    proxy = await start_proxy(script=[{"session": "*", "output": "six times seven is forty-two"}] * 2)
    session = f"top-{stream}"
    async with proxy.async_client() as client:
        kwargs = dict(model="m", messages=MESSAGES, logprobs=True, top_logprobs=3,
                      extra_headers={"X-Session-Id": session}, extra_body={"return_token_ids": True,
                                                                          "chat_template_kwargs": {"enable_thinking": False}})
        entries, token_logprobs = [], []
        if stream:
            async for chunk in await client.chat.completions.create(stream=True, **kwargs):
                extra = chunk.model_extra or {}
                token_logprobs += extra.get("token_logprobs") or []
                for choice in chunk.choices:
                    if choice.logprobs and choice.logprobs.content:
                        entries += choice.logprobs.content
        else:
            completion = await client.chat.completions.create(**kwargs)
            entries = completion.choices[0].logprobs.content
            token_logprobs = completion.model_extra["token_logprobs"]
    assert entries
    for entry in entries:
        assert len(entry.top_logprobs) == 3
        values = [alt.logprob for alt in entry.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert (entry.top_logprobs[0].token, entry.top_logprobs[0].logprob) == (entry.token, entry.logprob)
        assert entry.top_logprobs[1].token != entry.token
    (segment,) = await proxy.segments(session)
    trained = [value for value, mask in zip(segment["logprobs"], segment["loss_mask"]) if mask]
    assert trained == token_logprobs
