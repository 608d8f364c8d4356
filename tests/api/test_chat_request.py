"""ChatCompletionRequest.from_http: every input gives a request or a 4xx ApiError; valid fields round-trip."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.datastructures import Headers

from proxy.api.chat_request import MAX_CHOICES, UNSERVED_PARAMETERS, ChatCompletionRequest
from proxy.api.chat_tools import ToolChoice
from proxy.api.constraints import ResponseFormat
from proxy.api.errors import ApiError, ErrorCode
from tests.api import strategies as s

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SESSION = {"X-Session-Id": "sess-1"}
USER = [{"role": "user", "content": "hi"}]


def parse(body: Any, headers: Any = None) -> ChatCompletionRequest:
    return ChatCompletionRequest.from_http(body, SESSION if headers is None else headers)


def refused(body: Any, headers: Any = None) -> ApiError:
    with pytest.raises(ApiError) as info:
        parse(body, headers)
    return info.value


def assert_client_error(error: ApiError) -> None:
    assert 400 <= error.status < 500
    body = json.loads(error.to_body())
    assert set(body["error"]) >= {"message", "type", "param", "code"}
    assert body["error"]["code"] in set(ErrorCode)


# -- fuzzing: nothing but a request or a 4xx ApiError ------------------------------------------------------------------


@FUZZ
@given(body=s.any_value, headers=s.headers(junk=True))
def test_from_http_on_random_values_returns_a_request_or_raises_api_error_4xx(body: Any, headers: dict) -> None:
    try:
        parse(body, headers)
    except ApiError as error:
        assert_client_error(error)


@FUZZ
@given(body=s.mutated_bodies(), headers=s.session_headers())
def test_from_http_on_mutated_valid_bodies_returns_a_request_or_raises_api_error_4xx(body: Any, headers: dict) -> None:
    try:
        parse(body, headers)
    except ApiError as error:
        assert_client_error(error)


# -- round trip --------------------------------------------------------------------------------------------------------


def expected_identity(body: dict, headers: dict) -> tuple[str, str, str | None, str | None]:
    lower = {name.lower(): value.strip() for name, value in headers.items() if value.strip()}

    def body_id(key: str) -> str | None:
        value = body.get(key)
        return None if value in (None, "") else str(value)

    if "x-session-id" in lower:
        session = (lower["x-session-id"], "header")
    elif body_id("session_id") is not None:
        session = (body_id("session_id"), "body")
    else:
        session = (lower["x-smg-routing-key"], "routing_key")
    return (*session, lower.get("x-instance-id", body_id("instance_id")), lower.get("x-turn-id", body_id("turn_id")))


def expected_message(message: dict) -> dict:
    role = "system" if message["role"] == "developer" else message["role"]
    content = message.get("content")
    if isinstance(content, list):
        content = [{"type": "text", "text": part["text"]} for part in content]
    out: dict[str, Any] = {"role": role, "content": content}
    if "name" in message:
        out["name"] = message["name"]
    if role == "tool" and "tool_call_id" in message:
        out["tool_call_id"] = message["tool_call_id"]
    if role == "assistant":
        for alias in ("reasoning_content", "reasoning", "thinking"):
            if alias in message:
                out["reasoning_content"] = message[alias]
                break
        if message.get("tool_calls"):
            out["tool_calls"] = [
                {**({"id": call["id"]} if "id" in call else {}), "type": "function", "function": call["function"]}
                for call in message["tool_calls"]
            ]
    return out


@settings(max_examples=200, deadline=None)
@given(body=s.valid_bodies(), headers=s.headers())
def test_from_http_round_trips_every_field_of_valid_bodies(body: dict, headers: dict) -> None:
    lowered = {name.lower() for name in headers}
    if "session_id" not in body and not lowered & {"x-session-id", "x-smg-routing-key"}:
        headers["x-session-id"] = "added"
    request = parse(body, headers)

    session_id, source, instance_id, turn_id = expected_identity(body, headers)
    assert (request.session_id, request.session_id_source) == (session_id, source)
    assert (request.instance_id, request.turn_id) == (instance_id, turn_id)
    assert request.model == (body.get("model") or None)
    assert list(request.messages) == [expected_message(message) for message in body["messages"]]
    assert request.tools == (tuple(body["tools"]) if body.get("tools") else None)
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        assert request.tool_choice == ToolChoice("function", choice["function"]["name"])
    else:
        assert request.tool_choice == (ToolChoice(choice) if choice else None)
    for key in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        assert getattr(request, key) == body.get(key)
        assert getattr(request, key) is None or isinstance(getattr(request, key), float)
    assert request.top_k == body.get("top_k")
    assert request.max_tokens == body.get("max_completion_tokens", body.get("max_tokens"))
    stop = body.get("stop")
    assert request.stop == ((stop,) if isinstance(stop, str) else tuple(stop) if stop else None)
    assert request.seed == body.get("seed")
    assert request.stream is bool(body.get("stream"))
    assert request.include_usage is bool(body.get("stream_options", {}).get("include_usage"))
    assert request.logprobs is bool(body.get("logprobs"))
    assert request.top_logprobs == body.get("top_logprobs", 0)
    assert request.chat_template_kwargs == expected_template_kwargs(body)
    assert request.n == (body.get("n") or 1)
    bias = body.get("logit_bias")
    assert request.logit_bias == ({key: float(value) for key, value in bias.items()} if bias else None)
    assert request.return_token_ids == body.get("return_token_ids")
    mask = body.get("response_mask")
    assert request.response_mask == (tuple(mask) if mask is not None else None)
    known = {"user", "some_future_field", "metadata"}
    assert request.ignored_fields == tuple(sorted(known & set(body)))
    assert request.parallel_tool_calls is body.get("parallel_tool_calls", True)
    response_format = body.get("response_format")
    assert request.response_format == (None if response_format is None else ResponseFormat(
        response_format["type"], response_format.get("json_schema", {}).get("schema")))

    params = request.to_sampling_params(request.max_tokens)
    assert params["max_new_tokens"] == request.max_tokens
    assert params.get("sampling_seed") == body.get("seed")
    assert params.get("stop") == (list(request.stop) if request.stop else None)
    assert "seed" not in params and "n" not in params
    assert params.get("logit_bias") == request.logit_bias


def expected_template_kwargs(body: dict) -> dict | None:
    """SGLang's rule for ``reasoning_effort`` (the request's kwargs win; thinking defaults to effort != none)."""
    kwargs, effort = body.get("chat_template_kwargs"), body.get("reasoning_effort")
    if effort is None:
        return kwargs
    thinking = effort != "none"
    return {"reasoning_effort": effort, "thinking": thinking, "enable_thinking": thinking, **(kwargs or {})}


# -- session identity --------------------------------------------------------------------------------------------------


def test_session_id_header_wins_over_body_and_routing_key() -> None:
    request = parse(
        {"messages": USER, "session_id": "from-body"}, {"x-smg-routing-key": "from-key", "X-Session-Id": "from-header"}
    )
    assert (request.session_id, request.session_id_source) == ("from-header", "header")


def test_session_id_falls_back_to_body_then_to_routing_key() -> None:
    body = parse({"messages": USER, "session_id": "from-body"}, {"X-SMG-Routing-Key": "from-key"})
    assert (body.session_id, body.session_id_source) == ("from-body", "body")
    key = parse({"messages": USER}, {"X-SMG-Routing-Key": "from-key"})
    assert (key.session_id, key.session_id_source) == ("from-key", "routing_key")


def test_missing_session_id_is_400_naming_the_header() -> None:
    error = refused({"messages": USER}, {"X-Instance-Id": "i"})
    assert (error.status, error.code, error.param) == (400, ErrorCode.MISSING_SESSION_ID, "X-Session-Id")
    assert "X-Session-Id" in error.message


def test_blank_session_header_and_empty_body_session_id_count_as_absent() -> None:
    error = refused({"messages": USER, "session_id": ""}, {"X-Session-Id": "   "})
    assert error.code == ErrorCode.MISSING_SESSION_ID


def test_identity_headers_are_read_case_insensitively_from_werkzeug_headers() -> None:
    headers = Headers([("x-SESSION-id", "s"), ("X-INSTANCE-ID", "i"), ("x-turn-id", "t")])
    request = parse({"messages": USER, "instance_id": "body-i", "turn_id": "body-t"}, headers)
    assert (request.session_id, request.instance_id, request.turn_id) == ("s", "i", "t")


def test_instance_and_turn_ids_fall_back_to_the_body_and_integers_become_strings() -> None:
    request = parse({"messages": USER, "instance_id": 7, "turn_id": 3, "session_id": 12}, {})
    assert (request.session_id, request.instance_id, request.turn_id) == ("12", "7", "3")


@pytest.mark.parametrize("value", ["a\nb", "caf\u00e9", " padded", "x" * 257, True, 1.5, ["s"]])
def test_session_id_must_be_printable_ascii_of_bounded_length(value: Any) -> None:
    error = refused({"messages": USER, "session_id": value}, {})
    assert (error.code, error.param) == (ErrorCode.INVALID_REQUEST, "session_id")


# -- messages ----------------------------------------------------------------------------------------------------------


def test_developer_role_becomes_system() -> None:
    request = parse({"messages": [{"role": "developer", "content": "be brief"}, *USER]})
    assert request.messages[0] == {"role": "system", "content": "be brief"}


def test_legacy_function_role_is_unsupported_and_unknown_roles_are_invalid() -> None:
    error = refused({"messages": [{"role": "function", "name": "f", "content": "1"}]})
    assert (error.code, error.param) == (ErrorCode.UNSUPPORTED_PARAMETER, "messages[0].role")
    error = refused({"messages": [{"role": "robot", "content": "1"}]})
    assert (error.code, error.param) == (ErrorCode.INVALID_REQUEST, "messages[0].role")


def test_image_content_part_is_unsupported_and_names_the_part() -> None:
    body = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "data:..."}},
    ]}]}
    error = refused(body)
    assert (error.status, error.code, error.param) == (400, ErrorCode.UNSUPPORTED_PARAMETER, "messages[0].content[1]")
    assert "text-only" in error.message


def test_text_parts_are_rebuilt_without_extra_keys() -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {"x": 1}}]}]}
    assert parse(body).messages[0]["content"] == [{"type": "text", "text": "a"}]


def test_null_content_is_accepted_for_assistant_messages_only() -> None:
    request = parse({"messages": [*USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})
    assert request.messages[1]["content"] is None
    error = refused({"messages": [{"role": "user", "content": None}]})
    assert error.param == "messages[0].content"


def test_reasoning_aliases_are_stored_as_reasoning_content() -> None:
    request = parse({"messages": [*USER, {"role": "assistant", "content": "x", "thinking": "hmm"}]})
    assert request.messages[1] == {"role": "assistant", "content": "x", "reasoning_content": "hmm"}


@pytest.mark.parametrize(
    ("arguments", "accepted"),
    [('{"a": 1}', True), ({"a": 1}, True), ("", True), (None, True), ("{not json", False), ("[1, 2]", False),
     ("3", False), (["a"], False), (7, False),
     # Issue 13: the object must be valid Unicode (the template renders it); an escaped pair is one character.
     ('{"a": "\\ud800"}', False), ('{"\\udfff": 1}', False), ('{"a": ["\\ud83d\\ude00"]}', True)],
)
def test_tool_call_arguments_must_encode_a_json_object(arguments: Any, accepted: bool) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    body = {"messages": [*USER, {"role": "assistant", "content": "", "tool_calls": [call]}]}
    if accepted:
        kept = parse(body).messages[1]["tool_calls"][0]["function"]["arguments"]
        assert kept == ("{}" if arguments is None else arguments)
    else:
        assert refused(body).param == "messages[1].tool_calls[0].function.arguments"


def test_tool_call_with_an_empty_name_is_refused() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "", "arguments": "{}"}}
    error = refused({"messages": [*USER, {"role": "assistant", "content": "", "tool_calls": [call]}]})
    assert error.param == "messages[1].tool_calls[0].function.name"


def test_tool_calls_in_history_may_name_undeclared_tools() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "gone", "arguments": "{}"}}
    request = parse({"messages": [*USER, {"role": "assistant", "content": "", "tool_calls": [call]}], "tools": []})
    assert request.messages[1]["tool_calls"][0]["function"]["name"] == "gone"


def test_messages_must_be_a_non_empty_array() -> None:
    assert refused({"messages": []}).param == "messages"
    assert refused({"messages": {"role": "user"}}).param == "messages"
    assert refused({}).param == "messages"


# -- tools and tool_choice ---------------------------------------------------------------------------------------------

TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}


def test_empty_tools_list_means_no_tools() -> None:
    assert parse({"messages": USER, "tools": []}).tools is None


def test_duplicate_tool_names_are_refused() -> None:
    assert refused({"messages": USER, "tools": [TOOL, TOOL]}).param == "tools[1]"


def test_custom_tools_are_unsupported() -> None:
    error = refused({"messages": USER, "tools": [{"type": "custom", "custom": {"name": "x"}}]})
    assert (error.code, error.param) == (ErrorCode.UNSUPPORTED_PARAMETER, "tools[0].type")


def test_tool_choice_naming_an_undeclared_tool_is_refused() -> None:
    choice = {"type": "function", "function": {"name": "multiply"}}
    assert refused({"messages": USER, "tools": [TOOL], "tool_choice": choice}).param == "tool_choice"
    named = parse({"messages": USER, "tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "add"}}})
    assert named.tool_choice == ToolChoice("function", "add")


def test_tool_choice_required_needs_tools() -> None:
    assert refused({"messages": USER, "tool_choice": "required"}).param == "tool_choice"
    assert parse({"messages": USER, "tool_choice": "none"}).tool_choice == ToolChoice("none")


def test_legacy_functions_field_is_unsupported() -> None:
    error = refused({"messages": USER, "functions": [{"name": "f"}]})
    assert (error.code, error.param) == (ErrorCode.UNSUPPORTED_PARAMETER, "functions")


# -- sampling fields ---------------------------------------------------------------------------------------------------


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert parse({"messages": USER, "max_tokens": 10, "max_completion_tokens": 20}).max_tokens == 20
    assert parse({"messages": USER, "max_tokens": 10}).max_tokens == 10
    assert parse({"messages": USER, "max_tokens": 10, "max_completion_tokens": None}).max_tokens == 10
    assert parse({"messages": USER}).max_tokens is None


@pytest.mark.parametrize("n", [2, 8, MAX_CHOICES])
def test_n_up_to_the_cap_is_accepted(n: int) -> None:
    assert parse({"messages": USER, "n": n}).n == n


@pytest.mark.parametrize("n", [MAX_CHOICES + 1, 128])
def test_n_above_the_cap_is_unsupported(n: int) -> None:
    error = refused({"messages": USER, "n": n})
    assert (error.status, error.code, error.param) == (400, ErrorCode.UNSUPPORTED_PARAMETER, "n")


def test_n_of_one_or_null_is_accepted_and_n_below_one_is_invalid() -> None:
    parse({"messages": USER, "n": 1})
    parse({"messages": USER, "n": None})
    assert refused({"messages": USER, "n": 0}).code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize(
    ("key", "value"),
    [("temperature", True), ("temperature", 2.5), ("temperature", float("nan")), ("temperature", 10**400),
     ("top_p", 0), ("top_p", 1.01), ("max_tokens", True), ("max_tokens", 0), ("max_tokens", 512.0),
     ("max_tokens", 10**400), ("max_completion_tokens", -1), ("seed", 2**64), ("seed", -1), ("seed", "1"), ("top_k", 0),
     ("stop", ""), ("stop", [""]), ("stop", [1]), ("stop", {"a": 1}), ("stream", "yes"), ("logprobs", 1),
     ("top_logprobs", 21), ("stream_options", []), ("stream_options", {"include_usage": "yes"}),
     ("chat_template_kwargs", []), ("return_token_ids", 0), ("response_mask", [0, 2]),
     ("response_mask", [True, False]), ("response_mask", "01"), ("model", 3)],
)
def test_invalid_field_values_are_invalid_request_naming_the_field(key: str, value: Any) -> None:
    body: dict[str, Any] = {"messages": USER, key: value}
    if key == "top_logprobs":
        body["logprobs"] = True
    error = refused(body)
    assert error.code == ErrorCode.INVALID_REQUEST
    assert error.param.split(".")[0] == key


def test_top_logprobs_needs_logprobs() -> None:
    assert refused({"messages": USER, "top_logprobs": 3}).param == "top_logprobs"
    assert parse({"messages": USER, "top_logprobs": 3, "logprobs": True}).top_logprobs == 3
    assert parse({"messages": USER, "top_logprobs": 0}).top_logprobs == 0


def test_to_sampling_params_maps_fields_and_sends_an_explicit_null_budget() -> None:
    request = parse({"messages": USER, "temperature": 0.7, "top_p": 0.9, "seed": 42, "stop": "END", "top_k": 20,
                     "n": 1, "max_tokens": 100, "logprobs": True})
    assert request.to_sampling_params(None) == {
        "max_new_tokens": None, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "stop": ["END"], "sampling_seed": 42,
    }


def test_to_sampling_params_applies_the_rollout_temperature_override() -> None:
    request = parse({"messages": USER, "temperature": 0.2})
    assert request.to_sampling_params(5, temperature_override=1.0) == {"max_new_tokens": 5, "temperature": 1.0}
    assert parse({"messages": USER}).to_sampling_params(5) == {"max_new_tokens": 5}


def test_each_choice_gets_its_own_seed_offset_from_the_request_seed() -> None:
    # SGLang 0.5.23 copies one sampling_seed into its n parallel samples (identical under deterministic inference);
    # sglang#28805 proposes seed + i.
    request = parse({"messages": USER, "seed": 2**63 - 2, "n": 3})
    seeds = [request.to_sampling_params(5, choice_index=index)["sampling_seed"] for index in range(3)]
    assert seeds == [2**63 - 2, 2**63 - 1, 0]  # choice 0 is an n=1 request's seed; the rest wrap within int64
    assert "sampling_seed" not in parse({"messages": USER, "n": 3}).to_sampling_params(5, choice_index=2)


def test_logit_bias_is_forwarded_as_sglang_takes_it_with_canonical_keys() -> None:
    request = parse({"messages": USER, "logit_bias": {"007": -100, "151645": 5.5, "0": 100}})
    assert request.logit_bias == {"7": -100.0, "151645": 5.5, "0": 100.0}
    assert request.to_sampling_params(5)["logit_bias"] == {"7": -100.0, "151645": 5.5, "0": 100.0}
    assert parse({"messages": USER, "logit_bias": {}}).logit_bias is None
    assert "logit_bias" not in parse({"messages": USER, "logit_bias": None}).to_sampling_params(5)


@pytest.mark.parametrize(
    ("bias", "param"),
    [([1], "logit_bias"), ("x", "logit_bias"), ({"a": 1}, "logit_bias.a"), ({"-1": 1}, 'logit_bias["-1"]'),
     ({"1.5": 1}, 'logit_bias["1.5"]'), ({" 1": 1}, 'logit_bias[" 1"]'),
     ({"99999999999": 1}, 'logit_bias["99999999999"]'),
     ({"1" * 5000: 1}, "logit_bias"), ({"\u0661": 1}, 'logit_bias["\\u0661"]'), ({"1": 100.5}, 'logit_bias["1"]'),
     ({"1": -101}, 'logit_bias["1"]'), ({"1": True}, 'logit_bias["1"]'), ({"1": None}, 'logit_bias["1"]'),
     ({"1": "5"}, 'logit_bias["1"]'), ({"1": 1, "01": 2}, 'logit_bias["01"]'), ({0: 1}, "logit_bias")],
)
def test_bad_logit_bias_is_invalid_request_naming_the_entry(bias: Any, param: str) -> None:
    error = refused({"messages": USER, "logit_bias": bias})
    assert (error.status, error.code, error.param) == (400, ErrorCode.INVALID_REQUEST, param)


@pytest.mark.parametrize(
    ("name", "value"),
    [("audio", {"voice": "alloy", "format": "wav"}), ("modalities", ["text", "audio"]), ("modalities", ["audio"]),
     ("modalities", []), ("prediction", {"type": "content", "content": "x"}), ("web_search_options", {}),
     ("service_tier", "flex"), ("service_tier", "priority"), ("store", True), ("verbosity", "low"),
     ("verbosity", "high"), ("store", 1)],
)
def test_unserved_openai_parameters_are_unsupported_naming_them(name: str, value: Any) -> None:
    error = refused({"messages": USER, name: value})
    assert (error.status, error.code, error.param) == (400, ErrorCode.UNSUPPORTED_PARAMETER, name)
    assert name in error.message


def test_unserved_openai_parameters_are_accepted_at_their_defaults_or_null() -> None:
    for name, (accepted, _why) in UNSERVED_PARAMETERS.items():
        for value in (None, *accepted):
            request = parse({"messages": USER, name: value})
            assert name not in request.ignored_fields


def test_labels_and_provider_hints_are_ignored_like_unknown_fields() -> None:
    hints = {"user": "u", "metadata": {"k": "v"}, "safety_identifier": "h", "prompt_cache_key": "c",
             "prompt_cache_retention": "24h", "ignore_eos": True}
    assert parse({"messages": USER, **hints}).ignored_fields == tuple(sorted(hints))


@pytest.mark.parametrize(
    ("effort", "kwargs", "expected"),
    [("none", None, {"reasoning_effort": "none", "thinking": False, "enable_thinking": False}),
     ("high", None, {"reasoning_effort": "high", "thinking": True, "enable_thinking": True}),
     (0.5, None, {"reasoning_effort": 0.5, "thinking": True, "enable_thinking": True}),
     ("low", {"enable_thinking": False, "x": 1},
      {"reasoning_effort": "low", "thinking": True, "enable_thinking": False, "x": 1}),
     ("high", {"reasoning_effort": "max"}, {"reasoning_effort": "max", "thinking": True, "enable_thinking": True})],
)
def test_reasoning_effort_is_merged_into_the_template_kwargs_as_sglang_does(
    effort: Any, kwargs: Any, expected: dict
) -> None:
    request = parse({"messages": USER, "reasoning_effort": effort, "chat_template_kwargs": kwargs})
    assert request.chat_template_kwargs == expected
    assert "reasoning_effort" not in request.ignored_fields


@pytest.mark.parametrize("effort", ["huge", "", True, 1, 1.5, -0.1, [], {"effort": "low"}])
def test_bad_reasoning_effort_is_invalid_request(effort: Any) -> None:
    error = refused({"messages": USER, "reasoning_effort": effort})
    assert (error.code, error.param) == (ErrorCode.INVALID_REQUEST, "reasoning_effort")


def test_stream_options_serve_include_usage_accept_obfuscation_and_refuse_continuous_usage() -> None:
    request = parse({"messages": USER, "stream": True,
                     "stream_options": {"include_usage": True, "include_obfuscation": False}})
    assert request.include_usage is True
    parse({"messages": USER, "stream_options": {"continuous_usage_stats": False}})
    error = refused({"messages": USER, "stream": True, "stream_options": {"continuous_usage_stats": True}})
    assert (error.code, error.param) == (ErrorCode.UNSUPPORTED_PARAMETER, "stream_options.continuous_usage_stats")
    error = refused({"messages": USER, "stream_options": {"include_obfuscation": "no"}})
    assert error.code == ErrorCode.INVALID_REQUEST


def test_wants_token_ids_follows_the_request_then_the_server_flag() -> None:
    assert parse({"messages": USER}).wants_token_ids(True) is True
    assert parse({"messages": USER}).wants_token_ids(False) is False
    assert parse({"messages": USER, "return_token_ids": False}).wants_token_ids(True) is False
    assert parse({"messages": USER, "return_token_ids": True}).wants_token_ids(False) is True


# -- hostile structure -------------------------------------------------------------------------------------------------


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return {"deep": value}


@pytest.mark.parametrize(
    "body",
    [
        {"messages": USER, "chat_template_kwargs": nested(20_000)},
        {"messages": USER, "tools": [{"type": "function", "function": {"name": "f", "parameters": nested(20_000)}}]},
        {"messages": [*USER, {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "f", "arguments": nested(20_000)}}]}]},
        {"messages": [*USER, {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "f", "arguments": "[" * 100_000}}]}]},
        {"messages": [{"role": nested(20_000), "content": "x"}]},
        {"messages": [{"role": "user", "content": [{"type": nested(20_000), "text": "x"}]}]},
        {"messages": USER, "tool_choice": {"type": nested(20_000)}},
        nested(20_000),
    ],
    ids=["template-kwargs", "tool-schema", "arguments-object", "arguments-string", "role", "part-type",
         "tool-choice", "body"],
)
def test_deeply_nested_values_are_refused_without_recursion_error(body: Any) -> None:
    assert_client_error(refused(body))


def test_deeply_nested_unknown_field_is_ignored() -> None:
    request = parse({"messages": USER, "extra": nested(20_000)})
    assert request.ignored_fields == ("extra",)


@given(st.sampled_from(["temperature", "top_p", "max_tokens", "seed", "n", "top_logprobs", "presence_penalty"]),
       st.integers(min_value=2**63, max_value=10**500))
@settings(max_examples=50, deadline=None)
def test_huge_integers_are_refused_cleanly(key: str, value: int) -> None:
    body = {"messages": USER, key: value, "logprobs": True}
    error = refused(body)
    assert error.param == key
