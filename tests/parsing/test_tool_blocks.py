"""``decide_block``: one ``<tool_call>`` block -> calls, or content with a flag (field notes 14, 15)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.parsing import ParseFlag, ToolCallFormat, ToolSpecs, decide_block
from proxy.parsing.tool_blocks import arguments_object, convert_xml_value

from .strategies import TOOLS

SPECS = ToolSpecs.from_openai(TOOLS)
JSON, XML = ToolCallFormat.JSON, ToolCallFormat.XML
MALFORMED = {ParseFlag.MALFORMED_TOOL_CALL}


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def test_json_block_with_nested_unicode_arguments_keeps_them_exactly() -> None:
    arguments = {"city": "São Paulo 🌧", "days": 3, "nested": {"list": [1, 2.5, None, True, {"深": "层"}]}}
    decision = decide_block(block(json.dumps({"name": "get_weather", "arguments": arguments})), JSON, SPECS)
    assert decision.accepted and decision.flags == frozenset()
    ((name, arguments_json),) = decision.calls
    assert name == "get_weather" and json.loads(arguments_json) == arguments
    assert "São Paulo 🌧" in arguments_json  # ensure_ascii=False, as SGLang writes it


def test_json_block_accepts_lists_the_parameters_key_and_string_arguments() -> None:
    body = json.dumps([{"name": "calc", "parameters": {"x": 1}}, {"name": "calc", "arguments": '{"x": 2}'}])
    assert decide_block(block(body), JSON, SPECS).calls == (("calc", '{"x": 1}'), ("calc", '{"x": 2}'))
    assert decide_block(block('{"name": "calc"}'), JSON, SPECS).calls == (("calc", "{}"),)


@pytest.mark.parametrize("body", [
    '{"name": "calc", "arguments": {"x": }}',   # invalid JSON (field notes 15)
    '{"name": "", "arguments": {}}',             # empty name (field notes 14)
    '{"name": "  ", "arguments": {}}',
    '{"arguments": {"x": 1}}',                   # no name
    '{"name": 5, "arguments": {}}',
    '{"name": "calc", "arguments": [1, 2]}',     # arguments not an object
    '{"name": "calc", "arguments": "not json"}',
    '{"name": "calc", "arguments": {"x": NaN}}', # not strict JSON
    '{"name": "calc", "arguments": {"x": 1e999}}',
    '[]',
    '"calc"',
    '[{"name": "calc", "arguments": {}}, 7]',    # one bad call spoils the block
    "",
    "[" * 100_000,                               # deep nesting must not escape as RecursionError
])
def test_malformed_json_block_is_flagged_not_raised(body: str) -> None:
    decision = decide_block(block(body), JSON, SPECS)
    assert not decision.accepted and decision.flags == MALFORMED


def test_call_to_a_tool_not_offered_stays_content_flagged_unknown_tool() -> None:
    decision = decide_block(block('{"name": "rm_rf", "arguments": {}}'), JSON, SPECS)
    assert not decision.accepted and decision.flags == {ParseFlag.UNKNOWN_TOOL}
    assert decide_block(block('{"name": "calc", "arguments": {}}'), JSON, ToolSpecs.from_openai(None)).flags == {
        ParseFlag.UNKNOWN_TOOL}


def test_open_block_is_never_a_call() -> None:
    raw = '<tool_call>\n{"name": "calc", "arguments": {}}'
    assert decide_block(raw, JSON, SPECS, closed=False).flags == MALFORMED
    assert decide_block(raw + "\n</tool_call>", JSON, SPECS, closed=False).flags == MALFORMED


def test_lone_surrogate_escape_gives_utf8_encodable_arguments() -> None:
    decision = decide_block(block('{"name": "calc", "arguments": {"s": "\\ud800"}}'), JSON, SPECS)
    ((_, arguments_json),) = decision.calls
    arguments_json.encode("utf-8")
    assert json.loads(arguments_json) == {"s": "\ud800"}


def xml(name: str, *params: tuple[str, str]) -> str:
    inner = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return block(f"<function={name}>\n{inner}</function>")


def test_xml_block_converts_values_by_the_schema_type() -> None:
    raw = xml("calc", ("x", "1.5"), ("exact", "true"), ("opts", '{"k": [1, "é"]}'), ("items", "[1, 2]"),
              ("maybe", "7"), ("undeclared", "42"))
    ((name, arguments_json),) = decide_block(raw, XML, SPECS).calls
    assert name == "calc"
    assert json.loads(arguments_json) == {"x": 1.5, "exact": True, "opts": {"k": [1, "é"]}, "items": [1, 2],
                                          "maybe": 7, "undeclared": "42"}


def test_xml_string_values_keep_inner_newlines_and_lose_one_outer_newline_each_side() -> None:
    ((_, arguments_json),) = decide_block(xml("get_weather", ("city", "\nLine 1\nLine 2 🌍\n")), XML, SPECS).calls
    assert json.loads(arguments_json) == {"city": "\nLine 1\nLine 2 🌍\n"}
    ((_, arguments_json),) = decide_block(xml("get_weather", ("days", "3"), ("city", "007")), XML, SPECS).calls
    assert json.loads(arguments_json) == {"days": 3, "city": "007"}


@pytest.mark.parametrize(("value", "schema", "expected"), [
    ("null", {"type": "string"}, None),
    ("NULL", {"type": "integer"}, None),
    ("12", {"type": "integer"}, 12),
    ("twelve", {"type": "integer"}, "twelve"),
    ("3", {"type": "number"}, 3),
    ("3.0", {"type": "number"}, 3.0),
    ("1e3", {"type": "number"}, 1000.0),
    ("nan", {"type": "number"}, "nan"),          # never NaN in arguments
    ("inf", {"type": "number"}, "inf"),
    ("False", {"type": "boolean"}, False),
    ("yes", {"type": "boolean"}, False),        # SGLang 0.5.23: anything but true is false
    ("1.0", {"type": "double"}, 1.0),           # not a float type: a Python literal
    ("7", {"anyOf": [{"type": "integer"}, {"type": "null"}]}, 7),
    ("7", {"enum": [1, 7]}, 7),
    ("7", {"enum": [1, "a"]}, "7"),
    ("true", {"type": "null"}, "true"),         # no json.loads for other types, and `true` is no Python literal
    ("[1]", {"items": {}}, [1]),
    ("[1, 2]", {"type": "array"}, [1, 2]),
    ("{'a': (1, 2)}", {"type": "object"}, {"a": [1, 2]}),  # Python literal fallback
    ("{1, 2}", {"type": "object"}, "{1, 2}"),    # a set is not JSON: stays the string
    ("not json", {"type": "object"}, "not json"),
    ("5", {"type": ["null", "integer"]}, 5),
    ("5", {}, "5"),
    ("5", "garbage schema", "5"),
])
def test_xml_value_conversion_follows_sglang_0_5_23(value: str, schema: object, expected: object) -> None:
    assert json.loads(json.dumps(convert_xml_value(value, schema))) == expected


def test_xml_parameter_schemas_are_found_as_sglang_0_5_23_finds_them() -> None:
    """``properties``; else those of ``anyOf``/``oneOf``/``allOf`` branches (the first wins); else, without a
    ``properties`` key, the ``parameters`` object itself (so a parameter named ``type`` has the schema
    ``"object"``, which names no type: a string). The first tool of a name wins."""
    tools = [
        {"type": "function", "function": {"name": "union", "parameters": {"anyOf": [
            {"type": "object", "properties": {"k": {"type": "integer"}}},
            {"type": "object", "properties": {"k": {"type": "string"}, "m": {"type": "boolean"}}}]}}},
        {"type": "function", "function": {"name": "bare", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "dup", "parameters": {"properties": {"v": {"type": "integer"}}}}},
        {"type": "function", "function": {"name": "dup", "parameters": {"properties": {"v": {"type": "boolean"}}}}},
    ]
    specs = ToolSpecs.from_openai(tools)
    raw = block("<function=union>\n<parameter=k>\n7\n</parameter>\n<parameter=m>\nyes\n</parameter>\n</function>")
    assert decide_block(raw, XML, specs).calls == (("union", '{"k": 7, "m": false}'),)
    raw = block("<function=bare>\n<parameter=type>\n7\n</parameter>\n<parameter=x>\n7\n</parameter>\n</function>")
    assert decide_block(raw, XML, specs).calls == (("bare", '{"type": "7", "x": "7"}'),)
    raw = block("<function=dup>\n<parameter=v>\n7\n</parameter>\n</function>")
    assert decide_block(raw, XML, specs).calls == (("dup", '{"v": 7}'),)


def test_xml_missing_parameter_end_is_tolerated_like_sglang() -> None:
    raw = block("<function=get_weather>\n<parameter=city>\nOslo\n<parameter=days>\n2\n</function>")
    assert json.loads(decide_block(raw, XML, SPECS).calls[0][1]) == {"city": "Oslo", "days": 2}


def test_xml_several_functions_in_one_block_are_several_calls() -> None:
    raw = block("<function=calc>\n</function>\n<function=get_weather>\n</function>")
    assert decide_block(raw, XML, SPECS).calls == (("calc", "{}"), ("get_weather", "{}"))


@pytest.mark.parametrize("inner", [
    "<function=>\n</function>",                                 # empty name
    "<function=get_weather>\n<parameter=city>\nx\n</parameter>",  # no </function>
    "junk <function=calc>\n</function>",                         # text outside the elements
    "<function=calc>\nstray text\n</function>",
    "<function=calc\n</function>",
    "<function=calc>\n<parameter=>\n1\n</parameter>\n</function>",
    "<function=calc>\n<function=calc>\n</function>",
    "",
    "just words",
])
def test_malformed_xml_block_is_flagged_not_raised(inner: str) -> None:
    assert decide_block(block(inner), XML, SPECS).flags == MALFORMED


@settings(max_examples=300, deadline=None)
@given(inner=st.text(max_size=60) | st.lists(st.sampled_from(
    ["<function=", "calc", ">", "</function>", "<parameter=", "x", "</parameter>", "\n", "{", "}", '"name"', ":",
     '"calc"', ",", '"arguments"', "null", "[", "]"]), max_size=20).map("".join),
       fmt=st.sampled_from([JSON, XML]))
def test_any_block_decides_without_raising_and_accepted_calls_are_valid(inner: str, fmt: ToolCallFormat) -> None:
    decision = decide_block(block(inner), fmt, SPECS)
    assert decision.accepted != bool(decision.flags)
    for name, arguments_json in decision.calls:
        assert name in SPECS and name.strip()
        assert arguments_object(arguments_json) is not None
        arguments_json.encode("utf-8")
