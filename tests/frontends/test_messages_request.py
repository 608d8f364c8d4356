"""The Anthropic Messages body translated into the chat model (``proxy/frontends/messages_request.py``), checked
through the real chat validation (``ChatCompletionRequest.from_http``), and the echo rule both ways: an answer's
content blocks, sent back as the client's history, become exactly the chat message the proxy recorded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.api import ApiError, ChatCompletionRequest
from proxy.frontends.messages_output import content_blocks, reasoning_from_signature, thinking_signature
from proxy.frontends.messages_request import chat_body

HEADERS = {"X-Session-Id": "s1"}
TOOL = {
    "name": "add", "description": "add two integers",
    "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    "cache_control": {"type": "ephemeral"},
}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], **fields}


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.from_http(chat_body(body(**fields)), HEADERS)


def refused(anthropic_body: Any, *, require_max_tokens: bool = True) -> ApiError:
    with pytest.raises(ApiError) as caught:
        ChatCompletionRequest.from_http(chat_body(anthropic_body, require_max_tokens=require_max_tokens), HEADERS)
    assert 400 <= caught.value.status < 500
    return caught.value


def test_a_tool_conversation_with_thinking_becomes_the_chat_messages() -> None:
    reasoning = "Add them."
    request = chat(
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Use tools."}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "<reminder>"}, {"type": "text", "text": "5+3?"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": reasoning, "signature": thinking_signature(reasoning)},
                {"type": "text", "text": "Calling add."},
                {"type": "tool_use", "id": "call_1", "name": "add", "input": {"a": 5, "b": 3}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": [{"type": "text", "text": "8"}]},
                {"type": "text", "text": "Thanks, and now?"},
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_2", "name": "add", "input": {"a": 8}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_2", "content": "oops", "is_error": True},
            ]},
        ],
        tools=[TOOL],
    )
    assert list(request.messages) == [
        {"role": "system", "content": "Be brief.\n\nUse tools."},
        {"role": "user", "content": "<reminder>\n\n5+3?"},
        {"role": "assistant", "content": "Calling add.", "reasoning_content": reasoning, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": {"a": 5, "b": 3}}}]},
        {"role": "tool", "content": "8", "tool_call_id": "call_1"},
        {"role": "user", "content": "Thanks, and now?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": {"a": 8}}}]},
        {"role": "tool", "content": "oops", "tool_call_id": "call_2"},
    ]
    assert request.tools == ({"type": "function", "function": {
        "name": "add", "parameters": TOOL["input_schema"], "description": "add two integers"}},)
    assert request.max_tokens == 64 and request.model == "m" and not request.stream


def test_thinking_signed_elsewhere_and_redacted_thinking_are_dropped() -> None:
    forged = thinking_signature("x")[:-1] + ("0" if thinking_signature("x")[-1] != "0" else "1")
    request = chat(messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Claude's own thoughts", "signature": "EqQBCkYIARgCIkD..."},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va..."},
            {"type": "thinking", "thinking": "x", "signature": forged},
            {"type": "text", "text": "Hello."},
        ]},
        {"role": "user", "content": "more"},
    ])
    assert request.messages[1] == {"role": "assistant", "content": "Hello."}
    assert reasoning_from_signature(forged) is None


def test_the_signature_carries_the_recorded_reasoning() -> None:
    """Under ``display: "omitted"`` the block's text is empty (or a client shows an edited one): the reasoning
    echoed is the one the proxy recorded, carried by its signature."""
    reasoning = "Think \u00e9\n\ud83d\ude00 twice."
    for shown_text in ("", reasoning, "edited"):
        request = chat(messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": shown_text, "signature": thinking_signature(reasoning)},
                {"type": "text", "text": "Hello."},
            ]},
            {"role": "user", "content": "more"},
        ])
        assert request.messages[1]["reasoning_content"] == reasoning
    omitted = content_blocks({"role": "assistant", "content": "a", "reasoning_content": reasoning}, show_thinking=False)
    assert omitted[0] == {"type": "thinking", "thinking": "", "signature": thinking_signature(reasoning)}


def test_a_system_message_inside_messages_keeps_its_place() -> None:
    messages = [{"role": "user", "content": "hi"},
                {"role": "system",
                 "content": [{"type": "text", "text": "env", "cache_control": {"type": "ephemeral"}}]},
                {"role": "user", "content": "go"}]
    for role in ("system", "user"):
        translated = chat_body(body(messages=messages), inner_system_role=role)
        assert translated["messages"][1] == {"role": role, "content": "env"}
    # The same message as a string (Claude Code's next turn) is the same chat message.
    again = chat_body(body(messages=[messages[0], {"role": "system", "content": "env"}, messages[2]]))
    assert again["messages"][1] == {"role": "system", "content": "env"}


@pytest.mark.parametrize(
    ("thinking", "enabled"),
    [({"type": "enabled", "budget_tokens": 2048}, True), ({"type": "adaptive"}, True), ({"type": "disabled"}, False)],
)
def test_thinking_is_the_templates_switch(thinking: dict[str, Any], enabled: bool) -> None:
    assert chat(thinking=thinking).chat_template_kwargs == {"enable_thinking": enabled}
    assert chat().chat_template_kwargs is None  # absent: the template's (and the server's) default
    extension = chat(thinking=thinking, chat_template_kwargs={"enable_thinking": not enabled, "x": 1})
    assert extension.chat_template_kwargs == {"enable_thinking": enabled, "x": 1}


@pytest.mark.parametrize(
    ("choice", "mode", "name", "parallel"),
    [
        ({"type": "auto"}, "auto", None, True),
        ({"type": "any"}, "required", None, True),
        ({"type": "tool", "name": "add", "disable_parallel_tool_use": True}, "function", "add", False),
        ({"type": "none"}, "none", None, True),
    ],
)
def test_tool_choice(choice: dict[str, Any], mode: str, name: str | None, parallel: bool) -> None:
    request = chat(tools=[TOOL], tool_choice=choice)
    assert request.tool_choice is not None
    assert (request.tool_choice.mode, request.tool_choice.name, request.parallel_tool_calls) == (mode, name, parallel)


def test_sampling_stop_stream_and_ignored_fields() -> None:
    request = chat(
        temperature=0.5, top_p=0.9, top_k=40, stop_sequences=["END"], stream=True,
        metadata={"user_id": "u"}, cache_control={"type": "ephemeral"}, service_tier="auto",
        context_management={"edits": [{"type": "clear_tool_uses_20250919"}]}, output_config={"effort": "high"},
    )
    assert (request.temperature, request.top_p, request.top_k, request.stop) == (0.5, 0.9, 40, ("END",))
    assert request.stream and request.include_usage


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"max_tokens": None}, "max_tokens", "invalid_request"),
        ({"max_tokens": 0}, "max_tokens", "unsupported_parameter"),
        ({"max_tokens": "64"}, "max_tokens", "invalid_request"),
        ({"model": None}, "model", "invalid_request"),
        ({"messages": []}, "messages", "invalid_request"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role", "invalid_request"),
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
         "messages[0].content[0].type", "unsupported_parameter"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
         "messages[0].content[0].text", "invalid_request"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
         "messages[0].content[0].tool_use_id", "invalid_request"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "prefill"}]},
         "messages[1]", "unsupported_parameter"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type", "unsupported_parameter"),
        ({"tools": [{"name": "add"}]}, "tools[0].input_schema", "invalid_request"),
        ({"tool_choice": {"type": "weird"}}, "tool_choice.type", "invalid_request"),
        ({"tools": [TOOL], "tool_choice": {"type": "tool"}}, "tool_choice.name", "invalid_request"),
        ({"tool_choice": {"type": "tool", "name": "missing"}}, "tool_choice", "invalid_request"),
        ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens", "invalid_request"),
        ({"temperature": 1.5}, "temperature", "invalid_request"),
        ({"stop_sequences": "END"}, "stop_sequences", "invalid_request"),
        ({"metadata": {"user_id": 5}}, "metadata.user_id", "invalid_request"),
        ({"output_config": {"format": {"type": "json_schema", "schema": {}}}}, "output_config.format",
         "unsupported_parameter"),
        ({"mcp_servers": [{"type": "url", "url": "https://example.invalid", "name": "x"}]}, "mcp_servers",
         "unsupported_parameter"),
    ],
)
def test_bad_bodies_are_refused_naming_the_field(fields: dict[str, Any], param: str, code: str) -> None:
    error = refused(body(**fields))
    assert (error.param, error.code) == (param, code), error.message


def test_count_tokens_bodies_need_no_max_tokens() -> None:
    translated = chat_body({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, require_max_tokens=False)
    assert "max_tokens" not in translated
    assert refused({"model": "m", "messages": "hi"}, require_max_tokens=False).param == "messages"


# -- the echo rule, both ways ---------------------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
_arguments = st.dictionaries(st.text(min_size=1, max_size=5), st.integers() | _text | st.booleans(), max_size=3)


@settings(max_examples=150, deadline=None)
@given(
    reasoning=st.none() | _text, content=st.none() | _text,
    calls=st.lists(st.tuples(st.sampled_from(["add", "read_file"]), _arguments), max_size=3),
)
def test_an_answer_echoed_back_is_the_recorded_message(
    reasoning: str | None, content: str | None, calls: list[tuple[str, dict[str, Any]]]
) -> None:
    recorded: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        recorded["reasoning_content"] = reasoning
    if calls:
        recorded["tool_calls"] = [
            {"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for index, (name, args) in enumerate(calls)
        ]
    blocks = json.loads(json.dumps(content_blocks(recorded)))  # over the wire
    echoed = chat(messages=[
        {"role": "user", "content": "q"}, {"role": "assistant", "content": blocks}, {"role": "user", "content": "r"},
    ]).messages[1]
    # What the session trie compares (docs/sessions.md): content ("" and None alike), the reasoning variant, the
    # calls' ids, names and parsed arguments.
    assert (echoed["content"] or "") == (content or "")
    assert echoed.get("reasoning_content") == (reasoning or None)
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in echoed.get("tool_calls", [])] == \
        [(f"call_{index}", name, args) for index, (name, args) in enumerate(calls)]


def test_an_answers_text_split_into_blocks_echoes_as_the_recorded_text() -> None:
    request = chat(messages=[
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check.\n"},
            {"type": "thinking", "thinking": "", "signature": thinking_signature("hmm")},
            {"type": "text", "text": "It is 8."},
        ]},
        {"role": "user", "content": "r"},
    ])
    assert request.messages[1] == {
        "role": "assistant", "content": "Let me check.\nIt is 8.", "reasoning_content": "hmm"}


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3), max_leaves=12,
)
_block_types = st.sampled_from(["text", "tool_use", "tool_result", "thinking", "redacted_thinking", "image", None])
_blocks = st.lists(st.fixed_dictionaries({"type": _block_types}, optional={
    "text": _json, "id": _json, "name": _json, "input": _json, "tool_use_id": _json, "content": _json,
    "thinking": _json, "signature": _json, "is_error": _json, "cache_control": _json}), max_size=3)
_messages = st.lists(st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool"]) | _json, "content": _blocks | _json}), max_size=3)


@settings(max_examples=200, deadline=None)
@given(fields=st.fixed_dictionaries({}, optional={
    "model": _json, "max_tokens": _json, "system": _blocks | _json, "messages": _messages | _json,
    "tools": st.lists(st.fixed_dictionaries({"name": _json, "input_schema": _json}, optional={"type": _json}),
                      max_size=2) | _json,
    "tool_choice": st.fixed_dictionaries({"type": st.sampled_from(["auto", "any", "tool", "none"]) | _json},
                                         optional={"name": _json, "disable_parallel_tool_use": _json}) | _json,
    "thinking": st.fixed_dictionaries({"type": st.sampled_from(["enabled", "disabled", "adaptive"]) | _json},
                                      optional={"budget_tokens": _json, "display": _json}) | _json,
    "stop_sequences": _json, "temperature": _json, "top_p": _json, "top_k": _json, "stream": _json,
    "metadata": _json, "chat_template_kwargs": _json, "output_config": _json,
}))
def test_any_body_is_translated_or_refused_with_an_api_error(fields: dict[str, Any]) -> None:
    """Junk anywhere in the body is a 4xx ApiError, never another exception (which would be a 500)."""
    try:
        ChatCompletionRequest.from_http(chat_body({"model": "m", "max_tokens": 8, **fields}), HEADERS)
    except ApiError as error:
        assert 400 <= error.status < 500
