"""The Responses front end's translations, both ways: request bodies and input items -> chat, chat chunks -> typed
events and the Response object (checked against the openai SDK's own types and its stream accumulator), and the
echo rule: output items echoed back become exactly the chat assistant message they were made from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from proxy.api import ApiError, ChatCompletionRequest
from proxy.frontends.responses_items import (
    encrypt_reasoning,
    items_to_messages,
)
from proxy.frontends.responses_request import read_responses_body, responses_error, responses_param
from proxy.frontends.responses_store import ResponseChains, StoredResponse
from proxy.frontends.responses_stream import ResponseEvents
from proxy.frontends.template_probe import system_role_inside
from proxy.tokenization import load_tito_tokenizer
from tests.api.strategies import any_value

CODEX = Path(__file__).parent / "codex_requests"
EVENT = TypeAdapter(ResponseStreamEvent)
ECHO = read_responses_body({"input": "x"}).echo


def chunks_of(turn: dict[str, Any], finish: str = "stop") -> list[dict[str, Any]]:
    """The chat stream of one assistant ``turn`` (as ChatRun.chunks yields it), in small deltas."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}

    out = [chunk({"role": "assistant", "content": ""})]
    reasoning = turn.get("reasoning_content") or ""
    out += [chunk({"reasoning_content": reasoning[i:i + 3]}) for i in range(0, len(reasoning), 3)]
    content = turn.get("content") or ""
    out += [chunk({"content": content[i:i + 4]}) for i in range(0, len(content), 4)]
    for index, call in enumerate(turn.get("tool_calls") or ()):
        out.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        arguments = call["function"]["arguments"]
        out += [chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[i:i + 5]}}]})
                for i in range(0, len(arguments), 5)]
    out.append(chunk({}, finish))
    out.append({**base, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}})
    return out


def translate(turn: dict[str, Any], response_id: str = "resp_" + "1" * 32,
              **options: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    events = ResponseEvents(response_id, ECHO, model="", created_at=1, **options)
    out = events.opening()
    for chunk in chunks_of(turn):
        out += events.on_chunk(chunk)
    out += events.finish()
    return out, events.response


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


TURN = {"role": "assistant", "content": "Sure.", "reasoning_content": "Let me add.\n",
        "tool_calls": [call("call_1", "add", {"a": 1, "b": 2}), call("call_2", "multiply", {"a": 3, "b": 4})]}


def test_events_match_the_sdk_types_and_its_accumulator() -> None:
    events, response = translate(TURN)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    for event in events:
        EVENT.validate_python(event)  # every event is one of the SDK's typed events
    Response.model_validate(response)
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=[], text_format=omit)
    for event in events:
        state.handle_event(EVENT.validate_python(event))
    accumulated = state._completed_response
    assert accumulated is not None
    assert accumulated.output_text == "Sure."
    assert [item.type for item in accumulated.output] == ["reasoning", "message", "function_call", "function_call"]
    assert response["usage"]["input_tokens"] == 10 and response["usage"]["output_tokens"] == 7
    assert response["status"] == "completed"


def test_output_items_echo_back_to_the_recorded_chat_message() -> None:
    _, response = translate(TURN)
    assert items_to_messages(response["output"]) == [TURN]
    # Dumped by the SDK (what an agent sends back), with a tool result and a new user message after it.
    dumped = [item.model_dump(exclude_none=True) for item in Response.model_validate(response).output]
    tool = {"type": "function_call_output", "call_id": "call_1", "output": "3"}
    assert items_to_messages([*dumped, tool, {"role": "user", "content": "and?"}]) == [
        TURN, {"role": "tool", "tool_call_id": "call_1", "content": "3"}, {"role": "user", "content": "and?"},
    ]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "reasoning_content": st.one_of(st.none(), st.text(min_size=1, max_size=20)),
    "content": st.one_of(st.none(), st.text(min_size=1, max_size=20)),
    "calls": st.lists(st.dictionaries(st.sampled_from("abc"), st.integers()), max_size=3),
}), min_size=1, max_size=4))
def test_any_conversation_round_trips(turns: list[dict[str, Any]]) -> None:
    """Whatever the turns (with or without reasoning, text, calls), the output items of each, echoed together with
    the tool results, give back exactly the chat messages: one assistant message per turn."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    expected: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for number, turn in enumerate(turns):
        message: dict[str, Any] = {"role": "assistant", "content": turn["content"]}
        if turn["reasoning_content"] is not None:
            message["reasoning_content"] = turn["reasoning_content"]
        calls = [call(f"call_{number}_{i}", "f", args) for i, args in enumerate(turn["calls"])]
        if calls:
            message["tool_calls"] = calls
        _, response = translate(message, f"resp_{number:032d}")
        items += response["output"]
        if not response["output"]:
            continue  # an empty answer has no item to echo
        expected.append(message)
        for tool_call in calls:
            items.append({"type": "function_call_output", "call_id": tool_call["id"], "output": "ok"})
            expected.append({"role": "tool", "tool_call_id": tool_call["id"], "content": "ok"})
    assert items_to_messages(items) == expected


def test_reasoning_options_summary_encrypted_and_incomplete() -> None:
    events, response = translate(TURN, reasoning_summary=True, encrypted_reasoning=True)
    for event in events:
        EVENT.validate_python(event)
    summary = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta")
    assert summary == "Let me add.\n"
    kinds = [event["type"] for event in events]
    assert kinds.index("response.reasoning_summary_part.added") < kinds.index(
        "response.reasoning_summary_part.done") < kinds.index("response.output_item.done")
    reasoning = response["output"][0]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Let me add.\n"}]
    only_encrypted = {"type": "reasoning", "summary": [], "encrypted_content": reasoning["encrypted_content"]}
    assert items_to_messages([only_encrypted])[0]["reasoning_content"] == "Let me add.\n"
    assert encrypt_reasoning("x") != "x"
    events = ResponseEvents("resp_2", ECHO, model="m", created_at=1)
    for chunk in chunks_of({"content": "cut"}, finish="length"):
        events.on_chunk(chunk)
    last = events.finish()[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    Response.model_validate(last["response"])


def test_logprobs_ride_on_text_deltas() -> None:
    events = ResponseEvents("resp_3", ECHO, model="m", created_at=1, logprobs=True)
    entry = {"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": []}
    chunk = {"choices": [{"index": 0, "delta": {"content": "Hi"}, "logprobs": {"content": [entry]}}]}
    out = events.opening() + events.on_chunk(chunk) + events.finish()
    delta = next(event for event in out if event["type"] == "response.output_text.delta")
    assert delta["logprobs"] == [entry]
    assert events.response["output"][0]["content"][0]["logprobs"] == [entry]
    for event in out:
        EVENT.validate_python(event)


def test_request_translation() -> None:
    body = read_responses_body({
        "model": "m", "instructions": "Be brief.", "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "dev"}]},
            {"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": False}],
        "tool_choice": {"type": "function", "name": "f"}, "max_output_tokens": 64, "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}},
        "include": ["message.output_text.logprobs"], "top_logprobs": 3, "metadata": {"k": "v"}, "user": "u",
        "client_metadata": {"anything": "goes"}, "temperature": 0.5,
    })
    chat = body.chat
    assert body.input_messages == [{"role": "system", "content": "dev"}, {"role": "user", "content": "hi"}]
    assert body.conversation([]) == [{"role": "system", "content": "Be brief.\n\ndev"},
                                     {"role": "user", "content": "hi"}]
    assert chat["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"},
                                                               "strict": False}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert (chat["max_completion_tokens"], chat["reasoning_effort"], chat["logprobs"]) == (64, "low", True)
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "out",
                                                                              "schema": {"type": "object"}}}
    # (a named tool and a json_schema format cannot both constrain decoding: the chat layer refuses the pair)
    request = ChatCompletionRequest.from_http(
        {**chat, "tool_choice": "auto", "messages": body.conversation([])}, {"X-Session-Id": "s"}
    )
    assert request.messages[0] == {"role": "system", "content": "Be brief.\n\ndev"}
    assert request.top_logprobs == 3 and request.max_tokens == 64


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "tools": [{"type": "file_search", "vector_store_ids": []}]}, "tools[0].type"),
    ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ({"input": "x", "background": True}, "background"),
    ({"input": "x", "include": ["file_search_call.results"]}, "include"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
    ({"input": 3}, "input"),
])
def test_refusals_name_the_responses_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as error:
        read_responses_body(body)
    assert error.value.status == 400 and error.value.param == param


def test_chat_errors_are_renamed() -> None:
    error = responses_error(ApiError.invalid_request("max_completion_tokens must be at least 1, not 0",
                                                     "max_completion_tokens"))
    assert (error.message, error.param) == ("max_output_tokens must be at least 1, not 0", "max_output_tokens")
    assert responses_error(ApiError.invalid_request("messages must not be empty", "messages")).message == (
        "input must not be empty")
    assert responses_param("messages[3].content") == "input"
    assert responses_param("max_completion_tokens") == "max_output_tokens"
    assert responses_param("tools[1].function.name") == "tools[1].name"
    assert responses_param("temperature") == "temperature"


def test_codex_cli_bodies_are_accepted() -> None:
    """The bodies Codex CLI 0.169 really sends (captured): turn 1 and turn 2 (the whole history echoed, its
    reasoning item with ``encrypted_content: null``); with its default config, a hosted tool is a clear 400."""
    turn1 = json.loads((CODEX / "codex-turn1.json").read_text())["body"]
    turn2 = json.loads((CODEX / "codex-turn2.json").read_text())["body"]
    first, second = read_responses_body(turn1), read_responses_body(turn2)
    assert first.stream and not first.store and first.encrypted_reasoning and first.reasoning_summary
    merged = second.conversation([])
    assert [message["role"] for message in merged] == ["system", "user", "user", "assistant", "tool"]
    assert merged[3]["reasoning_content"] == "I will run it."
    assert merged[3]["tool_calls"][0]["id"] == "call_capture"
    ChatCompletionRequest.from_http({**second.chat, "messages": merged}, {"X-Session-Id": "codex"})
    default = json.loads((CODEX / "codex-default-config-turn1.json").read_text())["body"]
    with pytest.raises(ApiError) as error:
        read_responses_body(default)
    assert error.value.code == "unsupported_parameter" and "function tools only" in error.value.message
    assert error.value.param == "tools[8].type" and "'web_search'" in error.value.message
    # Without the hosted web search (Codex: web_search = "disabled"), its namespace tool is served, flattened.
    tools = [tool for tool in default["tools"] if tool["type"] != "web_search"]
    served = read_responses_body({**default, "tools": tools})
    assert served.namespaces["spawn_agent"] == "multi_agent_v1" and "exec_command" not in served.namespaces
    assert {tool["function"]["name"] for tool in served.chat["tools"]} >= {"spawn_agent", "exec_command"}
    assert served.echo["tools"] == tools


def test_calls_of_a_namespaced_tool_carry_their_namespace() -> None:
    turn = {"role": "assistant", "content": None, "tool_calls": [call("call_1", "spawn_agent", {"task": "x"}),
                                                                 call("call_2", "exec_command", {"cmd": "ls"})]}
    _, response = translate(turn, namespaces={"spawn_agent": "multi_agent_v1"})
    calls = Response.model_validate(response).output
    assert [(c.name, c.namespace) for c in calls] == [("spawn_agent", "multi_agent_v1"), ("exec_command", None)]
    assert items_to_messages(response["output"]) == [turn]


def test_chains_are_bounded_and_die_with_their_session() -> None:
    alive = {"s1", "s2"}
    chains = ResponseChains(lambda session: session in alive, max_records=3)
    first = StoredResponse("s1", None, ({"role": "user", "content": "a"},))
    second = StoredResponse("s1", first, ({"role": "assistant", "content": "b"},))
    chains.add("r1", first)
    chains.add("r2", second)
    chains.add("r3", StoredResponse("s2", None, ()))
    assert chains.get("r2") is second and [m["content"] for m in second.conversation()] == ["a", "b"]
    chains.add("r4", StoredResponse("s2", None, ()))
    assert chains.get("r1") is None and chains.get("r2") is second  # the oldest id went; its chain lives on
    alive.discard("s1")
    assert chains.get("r2") is None and len(chains) == 2  # the session ended: its records are gone


JUNK_FIELDS = ["input", "instructions", "tools", "tool_choice", "max_output_tokens", "reasoning", "text", "include",
               "temperature", "top_p", "stream", "store", "previous_response_id", "top_logprobs",
               "parallel_tool_calls", "metadata", "truncation", "service_tier", "background", "conversation"]


@st.composite
def junk_bodies(draw: st.DrawFn) -> Any:
    """Codex CLI's real second request with one to three fields (top-level, an item, or a key of an item)
    replaced by random JSON."""
    body = json.loads((CODEX / "codex-turn2.json").read_text())["body"]
    body["tools"] = body["tools"][:1]
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "item", "key"]))
        items = body.get("input")
        if where == "top" or not isinstance(items, list) or not items:
            body[draw(st.sampled_from(JUNK_FIELDS))] = draw(any_value)
            continue
        index = draw(st.integers(0, len(items) - 1))
        if where == "item" or not isinstance(items[index], dict):
            items[index] = draw(any_value)
        else:
            key = draw(st.sampled_from(["type", "role", "content", "summary", "call_id", "name", "arguments",
                                        "output", "encrypted_content", "id"]))
            items[index][key] = draw(any_value)
    return body


@settings(max_examples=150, deadline=None)
@given(junk_bodies())
def test_any_junk_body_is_a_4xx_never_a_crash(body: Any) -> None:
    """Whatever a client sends, the translation and the chat validation after it answer a 4xx ``ApiError`` or a
    valid chat request: never another exception (a 500)."""
    try:
        parsed = read_responses_body(body)
        ChatCompletionRequest.from_http({**parsed.chat, "messages": parsed.conversation([])},
                                        {"X-Session-Id": "junk"})
    except ApiError as error:
        assert 400 <= error.status < 500, error


@pytest.mark.parametrize(("model", "role"), [("qwen3", "system"), ("qwen3_5", "user")])
def test_a_later_system_message_gets_the_role_the_template_takes(model: str, role: str, qwen3_path: Path,
                                                                  qwen3_5_path: Path) -> None:
    """Qwen3's template renders a system message anywhere; Qwen3.5's refuses one that is not first, so a later
    ``developer`` message (Codex sends them) goes as a user turn there, and the rendered prompt holds it."""
    tokenizer = load_tito_tokenizer(model, qwen3_path if model == "qwen3" else qwen3_5_path)
    assert system_role_inside(tokenizer) == role
    body = read_responses_body({"instructions": "rules", "input": [
        {"role": "developer", "content": "more rules"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"}, {"role": "developer", "content": "now sandboxed"},
        {"role": "user", "content": "go"}]})
    messages = body.conversation([], system_role_inside(tokenizer))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", role, "user"]
    assert messages[0]["content"] == "rules\n\nmore rules"
    assert "now sandboxed" in tokenizer.decode(tokenizer.encode_full(messages, None, None))
