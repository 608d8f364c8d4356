"""tool_choice / response_format / parallel_tool_calls: the request fields, and the constrained-decoding
``sampling_params`` SGLang 0.5.23's OpenAI server would send for them (pinned from reading its source)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.api.chat_request import ChatCompletionRequest
from proxy.api.chat_tools import ToolChoice
from proxy.api.constraints import CONSTRAINED_FORMATS, ResponseFormat
from proxy.api.errors import ApiError, ErrorCode
from proxy.parsing.formats import TOOL_CALL_TYPES as TOOL_CALL_FORMATS
from tests.api.sglang_expected import PARAMETERS, qwen3_coder_tag, qwen25_tag

SESSION = {"X-Session-Id": "s"}
USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": name, "parameters": PARAMETERS}} for name in ("add", "multiply")]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def parse(body: dict[str, Any], tool_call_type: str = "qwen25") -> ChatCompletionRequest:
    return ChatCompletionRequest.from_http({"messages": USER, **body}, SESSION, tool_call_type=tool_call_type)


def refused(body: dict[str, Any], tool_call_type: str = "qwen25") -> ApiError:
    with pytest.raises(ApiError) as info:
        parse(body, tool_call_type)
    return info.value


NAMED_MULTIPLY = {"type": "function", "function": {"name": "multiply"}}


@pytest.mark.parametrize(
    ("body", "tool_call_type", "expected"),
    [
        ({"tools": TOOLS}, "qwen25", {}),
        ({"tools": TOOLS, "tool_choice": "auto"}, "qwen3_coder", {}),
        ({"tools": TOOLS, "tool_choice": "none"}, "qwen25", {}),
        ({"tools": TOOLS, "tool_choice": "required"}, "qwen25",
         {"structural_tag": qwen25_tag(["add", "multiply"], at_least_one=True)}),
        # A named choice still lists every tool in the qwen25 tag (get_structure_constraint builds it from all).
        ({"tools": TOOLS, "tool_choice": NAMED_MULTIPLY}, "qwen25",
         {"structural_tag": qwen25_tag(["add", "multiply"], at_least_one=True)}),
        # The legacy tag has no call limit: parallel_tool_calls changes nothing for qwen25.
        ({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False}, "qwen25",
         {"structural_tag": qwen25_tag(["add", "multiply"], at_least_one=True)}),
        ({"tools": TOOLS, "tool_choice": "required"}, "qwen3_coder",
         {"structural_tag": qwen3_coder_tag(["add", "multiply"])}),
        ({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False}, "qwen3_coder",
         {"structural_tag": qwen3_coder_tag(["add", "multiply"], parallel=False)}),
        ({"tools": TOOLS, "tool_choice": NAMED_MULTIPLY}, "qwen3_coder",
         {"structural_tag": qwen3_coder_tag(["multiply"], forced=True)}),
    ],
    ids=["default", "auto", "none", "qwen25-required", "qwen25-named", "qwen25-required-serial",
         "qwen3_coder-required", "qwen3_coder-required-serial", "qwen3_coder-named"],
)
def test_tool_choice_sends_sglangs_constraint(body: dict, tool_call_type: str, expected: dict) -> None:
    request = parse(body, tool_call_type)
    assert request.constraint_params == expected
    assert request.to_sampling_params(7) == {"max_new_tokens": 7, **expected}


def test_auto_with_a_strict_tool_is_constrained_without_requiring_a_call() -> None:
    """get_structure_constraint L342-345: ``auto`` is constrained when a tool is strict; a strict tool's schema
    goes into the qwen25 tag, a non-strict one's is ``{}``; xgrammar maps ``strict: false`` to ``true``."""
    tools = [{"type": "function", "function": {"name": "add", "parameters": PARAMETERS, "strict": True}},
             {"type": "function", "function": {"name": "multiply", "parameters": PARAMETERS, "strict": False}}]
    assert parse({"tools": tools}).constraint_params == {
        "structural_tag": qwen25_tag(["add", "multiply"], at_least_one=False, schemas={"add": PARAMETERS})}
    assert parse({"tools": tools, "parallel_tool_calls": False}, "qwen3_coder").constraint_params == {
        "structural_tag": qwen3_coder_tag(["add", "multiply"], at_least_one=False, parallel=False,
                                          schemas={"multiply": True})}


def test_a_tool_without_parameters_is_any_json_in_the_qwen3_coder_tag() -> None:
    tools = [{"type": "function", "function": {"name": "ping"}}]
    assert parse({"tools": tools, "tool_choice": "required"}, "qwen3_coder").constraint_params == {
        "structural_tag": qwen3_coder_tag(["ping"], schemas={"ping": True})}


@pytest.mark.parametrize("tool_call_type", ["qwen25", "qwen3_coder"])
def test_response_format_is_sglangs_json_schema_string(tool_call_type: str) -> None:
    """protocol.py L1238-1249: the schema as ``json.dumps`` writes it; json_object is ``{"type": "object"}``;
    text constrains nothing."""
    spec = {"name": "city", "schema": SCHEMA, "strict": True}
    request = parse({"response_format": {"type": "json_schema", "json_schema": spec}}, tool_call_type)
    assert request.response_format == ResponseFormat("json_schema", SCHEMA)
    assert request.to_sampling_params(3) == {"max_new_tokens": 3, "json_schema": json.dumps(SCHEMA)}
    json_object = parse({"response_format": {"type": "json_object"}})
    assert json_object.constraint_params == {"json_schema": '{"type": "object"}'}
    assert parse({"response_format": {"type": "text"}}).constraint_params == {}
    # strict false still constrains (only a renderer that shows the format to the model may skip it, L1239-1247).
    spec = {"name": "city", "schema": SCHEMA, "strict": False}
    assert parse({"response_format": {"type": "json_schema", "json_schema": spec}}).constraint_params == {
        "json_schema": json.dumps(SCHEMA)}


def test_response_format_wins_over_an_auto_tool_constraint() -> None:
    """protocol.py L1263-1273: with an output constraint, an ``auto`` tool constraint is dropped (a warning)."""
    tools = [{"type": "function", "function": {"name": "add", "parameters": PARAMETERS, "strict": True}}]
    request = parse({"tools": tools, "response_format": {"type": "json_object"}})
    assert request.constraint_params == {"json_schema": '{"type": "object"}'}
    assert parse({"tools": TOOLS, "tool_choice": "none", "response_format": {"type": "json_object"}},
                 "qwen3_coder").constraint_params == {"json_schema": '{"type": "object"}'}


@pytest.mark.parametrize("choice", ["required", NAMED_MULTIPLY])
def test_a_forced_call_with_an_output_constraint_is_refused(choice: Any) -> None:
    error = refused({"tools": TOOLS, "tool_choice": choice, "response_format": {"type": "json_object"}})
    assert error.code == ErrorCode.INVALID_REQUEST and error.param == "tool_choice"
    assert "cannot be combined with response_format" in error.message
    # text is no constraint
    assert parse({"tools": TOOLS, "tool_choice": choice, "response_format": {"type": "text"}}).constraint_params


def test_sglangs_flat_json_schema_form() -> None:
    """protocol.py ``set_json_schema`` L1156-1183: ``{"type": "json_schema", "schema": ...}``, name from the title,
    a ``strict`` property taken out of the schema."""
    schema = {"title": "T", "type": "object", "properties": {"a": {"type": "string"}, "strict": {"default": True}}}
    request = parse({"response_format": {"type": "json_schema", "schema": schema}})
    expected = {"title": "T", "type": "object", "properties": {"a": {"type": "string"}}}
    assert request.constraint_params == {"json_schema": json.dumps(expected)}


@pytest.mark.parametrize(
    ("response_format", "param"),
    [
        ("json", "response_format"),
        ({}, "response_format.type"),
        ({"type": "xml"}, "response_format.type"),
        ({"type": "json_schema"}, "response_format.json_schema"),
        ({"type": "json_schema", "json_schema": {"schema": SCHEMA}}, "response_format.json_schema.name"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema.schema"),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": []}}, "response_format.json_schema.schema"),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA, "strict": "yes"}},
         "response_format.json_schema.strict"),
        ({"type": "json_schema", "json_schema": "x"}, "response_format.json_schema"),
    ],
)
def test_bad_response_formats_are_invalid_request(response_format: Any, param: str) -> None:
    error = refused({"response_format": response_format})
    assert (error.code, error.param) == (ErrorCode.INVALID_REQUEST, param)


def test_missing_schema_gets_sglangs_message() -> None:
    error = refused({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})
    assert error.message == "schema_ is required for json_schema response format request."


def test_structural_tag_response_format_is_unsupported() -> None:
    error = refused({"response_format": {"type": "structural_tag", "format": {"type": "any_text"}}})
    assert error.code == ErrorCode.UNSUPPORTED_PARAMETER


@pytest.mark.parametrize("value", ["false", 0, [], {}])
def test_parallel_tool_calls_must_be_a_boolean(value: Any) -> None:
    assert refused({"parallel_tool_calls": value}).param == "parallel_tool_calls"


def test_parallel_tool_calls_defaults_to_true_and_is_read() -> None:
    assert parse({}).parallel_tool_calls is True
    assert parse({"parallel_tool_calls": None}).parallel_tool_calls is True
    request = parse({"parallel_tool_calls": False, "response_format": {"type": "text"}})
    assert request.parallel_tool_calls is False
    assert "parallel_tool_calls" not in request.ignored_fields and "response_format" not in request.ignored_fields


def test_conflicting_defs_are_refused_for_a_forced_qwen25_call_only() -> None:
    """function_call/utils.py ``_get_tool_schema_defs``: the legacy tag fails, SGLang falls back to its JSON-schema
    constraint, which raises (400); for ``auto`` the failure only drops the constraint."""
    tools = [{"type": "function", "function": {"name": name, "strict": True, "parameters": {
        "type": "object", "$defs": {"X": {"type": kind}}}}} for name, kind in (("f", "string"), ("g", "integer"))]
    error = refused({"tools": tools, "tool_choice": "required"})
    assert error.message == "Tool definition 'X' has multiple schemas, which is not supported."
    assert parse({"tools": tools}).constraint_params == {}
    assert parse({"tools": tools, "tool_choice": "required"}, "qwen3_coder").constraint_params


def test_template_and_parse_tools_follow_sglang() -> None:
    """serving_chat.py L1858-1873: none renders no tools, a named choice renders that tool alone; L1080-1092: none
    parses no calls."""
    tools = tuple(TOOLS)
    assert parse({"tools": TOOLS}).template_tools == tools
    assert parse({"tools": TOOLS, "tool_choice": "required"}).template_tools == tools
    none = parse({"tools": TOOLS, "tool_choice": "none"})
    assert (none.template_tools, none.parse_tools) == (None, None)
    named = parse({"tools": TOOLS, "tool_choice": NAMED_MULTIPLY})
    assert named.template_tools == (TOOLS[1],)
    assert named.parse_tools == tools
    assert parse({}).template_tools is None


def test_tool_choice_unmet() -> None:
    assert parse({"tools": TOOLS, "tool_choice": "required"}).tool_choice_unmet([])
    assert not parse({"tools": TOOLS, "tool_choice": "required"}).tool_choice_unmet(["add"])
    named = parse({"tools": TOOLS, "tool_choice": NAMED_MULTIPLY})
    assert named.tool_choice == ToolChoice("function", "multiply")
    assert named.tool_choice_unmet(["add"]) and not named.tool_choice_unmet(["add", "multiply"])
    assert not parse({"tools": TOOLS}).tool_choice_unmet([])


# The served formats whose SGLang grammar the proxy does not build (GLM's EBNF, DeepSeek's native tags, MiniMax's
# JSON-array schema): every --model-tool-call-type value of proxy/parsing/formats.py but the Qwen ones.
UNCONSTRAINED = sorted(set(TOOL_CALL_FORMATS) - set(CONSTRAINED_FORMATS))


@pytest.mark.parametrize("tool_call_type", UNCONSTRAINED)
@pytest.mark.parametrize("choice", ["required", NAMED_MULTIPLY])
def test_a_forced_call_in_a_format_without_its_grammar_is_a_clear_400(tool_call_type: str, choice: Any) -> None:
    # Was a ValueError (an internal error, 500) for every GLM, DeepSeek and MiniMax model.
    error = refused({"tools": TOOLS, "tool_choice": choice}, tool_call_type)
    assert (error.status, error.code, error.param) == (400, ErrorCode.UNSUPPORTED_PARAMETER, "tool_choice")
    assert tool_call_type in error.message and "'auto'" in error.message


@pytest.mark.parametrize("tool_call_type", UNCONSTRAINED)
def test_auto_with_a_strict_tool_in_a_format_without_its_grammar_is_served_unconstrained(tool_call_type: str) -> None:
    strict = [{"type": "function", "function": {**TOOLS[0]["function"], "strict": True}}]
    assert parse({"tools": strict}, tool_call_type).constraint_params == {}
    assert parse({"tools": strict, "tool_choice": "auto"}, tool_call_type).constraint_params == {}


@pytest.mark.parametrize(("alias", "same_as"), [("qwen", "qwen25"), ("step3p5", "qwen3_coder")])
def test_sglangs_parser_aliases_get_their_detectors_constraint(alias: str, same_as: str) -> None:
    for choice in ("required", NAMED_MULTIPLY):
        assert parse({"tools": TOOLS, "tool_choice": choice}, alias).constraint_params == parse(
            {"tools": TOOLS, "tool_choice": choice}, same_as).constraint_params != {}
