"""GLM tool calls and reasoning (``glm47`` / ``glm45``; reasoning ``glm45``): the local parser inverts the official
GLM-4.7 template's rendering of a turn, streaming equals non-streaming, and malformed blocks stay content."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.parsing import MessageFormat, ParseFlag, StreamingMessageParser, ToolCallFormat, ToolSpecs, parse_local
from proxy.parsing.formats import TOOL_CALL_TYPES

from .strategies import MARKERS, TOOLS, _ALPHABET, cuts, json_values, plain_text

SPECS = ToolSpecs.from_openai(TOOLS)
GLM = MessageFormat.from_types("glm47", "glm45")
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GLM_MARKUP = ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<|")


def _value(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    kind = schema.get("type")
    if schema.get("enum"):
        return st.sampled_from(schema["enum"])
    if kind == "integer":
        return st.integers(-(10**9), 10**9)
    if kind == ["null", "integer"]:
        return st.none() | st.integers(-99, 99)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False) | st.integers(-999, 999)
    if kind == "boolean":
        return st.booleans()
    if kind == "object":
        return st.dictionaries(st.text(_ALPHABET, max_size=4), json_values, max_size=3)
    if kind == "array":
        return st.lists(json_values, max_size=3)
    return plain_text(20, GLM_MARKUP)


def _no_markup(value: Any) -> bool:
    text = json.dumps(value, ensure_ascii=False)
    return not any(m in text for m in GLM_MARKUP + MARKERS)


@st.composite
def glm_calls(draw: st.DrawFn) -> dict[str, Any]:
    """An OpenAI tool call to one of TOOLS with arguments that fit its schema."""
    tool = draw(st.sampled_from(TOOLS))["function"]
    properties = tool["parameters"]["properties"]
    keys = draw(st.lists(st.sampled_from(sorted(properties)), unique=True, max_size=len(properties)))
    arguments = {k: draw(_value(properties[k]).filter(_no_markup)) for k in keys}
    return {"type": "function", "function": {"name": tool["name"], "arguments": arguments}}


def render_block(call: dict[str, Any], newlines: bool = False) -> str:
    """A block as the GLM-4.7 template writes it (``glm45``: with GLM-4.5's newlines)."""
    sep = "\n" if newlines else ""
    function = call["function"]
    pairs = "".join(
        f"<arg_key>{k}</arg_key>{sep}<arg_value>{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
        f"</arg_value>{sep}" for k, v in function["arguments"].items()
    )
    return f"<tool_call>{function['name']}{sep}{pairs}</tool_call>"


def test_glm_parser_names_are_registered():
    assert TOOL_CALL_TYPES["glm47"] is TOOL_CALL_TYPES["glm45"] is ToolCallFormat.GLM
    assert GLM.reasoning and not GLM.reasoning_forced_open


@PROPERTY
@given(calls=st.lists(glm_calls(), min_size=1, max_size=3), reasoning=plain_text(30, GLM_MARKUP),
       content=plain_text(30, GLM_MARKUP), newlines=st.booleans())
def test_a_turn_written_as_the_template_writes_it_parses_back_to_its_calls(calls, reasoning, content, newlines):
    """The inverse of the template: reasoning, content and every call with its exact arguments, no flags."""
    text = f"{reasoning}</think>{content}" + "".join(render_block(c, newlines) for c in calls)
    message = parse_local(text, GLM, SPECS, session_id="s", step_index=0, reasoning_open_at_start=True)
    assert not message.flags
    assert [(c.name, json.loads(c.arguments_json)) for c in message.tool_calls] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in calls]
    # reasoning closed by </think> keeps its trailing whitespace (docs/parsing.md, local rule 1)
    assert message.content == content.strip() and message.reasoning_content == (reasoning.lstrip() or None)


def test_the_official_template_rendering_parses_back(tmp_path):
    """The real GLM-4.7 template's rendering of a tool-calling turn (render_assistant) parses to the same message."""
    from proxy.families import load_tito_tokenizer
    from tests.tokenization.glm_files import glm_path

    glm = load_tito_tokenizer("glm4_7", glm_path("glm4_7"))
    call = {"type": "function", "function": {"name": "calc", "arguments": {
        "x": 1.5, "exact": True, "opts": {"k": [1, None]}, "items": ["a", 2], "maybe": None}}}
    weather = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "  Zürich \n", "days": 3}}}
    turn = {"role": "assistant", "content": "Checking.", "reasoning_content": "two calls", "tool_calls": [call, weather]}
    completion = glm.render_assistant(turn)
    assert completion.endswith("<|observation|>")
    message = parse_local(completion[: -len("<|observation|>")], GLM, SPECS, session_id="s", step_index=0,
                          reasoning_open_at_start=True)
    assert (message.reasoning_content, message.content, message.flags) == ("two calls", "Checking.", frozenset())
    assert [json.loads(c.arguments_json) for c in message.tool_calls] == [
        call["function"]["arguments"], weather["function"]["arguments"]]


@pytest.mark.parametrize("block, flag", [
    ("<tool_call>get_weather<arg_key>city</arg_key></tool_call>", ParseFlag.MALFORMED_TOOL_CALL),
    ("<tool_call><arg_key>city</arg_key><arg_value>x</arg_value></tool_call>", ParseFlag.MALFORMED_TOOL_CALL),
    ("<tool_call>get_weather<arg_key>city</arg_key>junk<arg_value>x</arg_value></tool_call>",
     ParseFlag.MALFORMED_TOOL_CALL),
    ("<tool_call>get_weather<arg_key>city</arg_key><arg_value>x</tool_call>", ParseFlag.MALFORMED_TOOL_CALL),
    ("<tool_call>get weather\nnow</tool_call>", ParseFlag.MALFORMED_TOOL_CALL),
    ("<tool_call>no_such_tool<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>", ParseFlag.UNKNOWN_TOOL),
])
def test_malformed_and_unknown_blocks_stay_content(block, flag):
    message = parse_local("ok" + block, GLM, SPECS, session_id="s", step_index=0)
    assert not message.tool_calls and flag in message.flags and block in message.content


def test_values_follow_the_schema():
    """String-typed parameters keep the raw text (even when it looks like JSON); others are read as JSON."""
    block = ('<tool_call>get_weather<arg_key>city</arg_key><arg_value>"42"</arg_value>'
             '<arg_key>days</arg_key><arg_value>7</arg_value><arg_key>extra</arg_key><arg_value>[1]</arg_value>'
             '</tool_call>')
    message = parse_local(block, GLM, SPECS, session_id="s", step_index=0)
    assert json.loads(message.tool_calls[0].arguments_json) == {"city": '"42"', "days": 7, "extra": [1]}


@st.composite
def glm_mixed(draw: st.DrawFn) -> str:
    malformed = st.sampled_from([
        "<tool_call>get_weather<arg_key>city</arg_key></tool_call>", "<tool_call></tool_call>", "</tool_call>",
        "<tool_call>x<arg_value>1</arg_value></tool_call>", "<arg_key>", "<tool_call>calc<arg_key>x",
    ])
    piece = (plain_text(20) | glm_calls().map(render_block) | malformed | st.sampled_from(MARKERS)
             | st.sampled_from([" ", "\n", "\n\n"]))
    return "".join(draw(st.lists(piece, max_size=8)))


@PROPERTY
@given(data=st.data(), open_at_start=st.booleans(), defer=st.booleans())
def test_streaming_equals_non_streaming_for_any_cut(data, open_at_start, defer):
    text = data.draw(glm_mixed(), label="text")
    expected = parse_local(text, GLM, SPECS, session_id="s", step_index=1, reasoning_open_at_start=open_at_start)
    parser = StreamingMessageParser(GLM, SPECS, "s", 1, reasoning_open_at_start=open_at_start, defer_blocks=defer)
    for piece in data.draw(cuts(text), label="pieces"):
        parser.feed(piece)
    parser.finish()
    assert parser.message == expected
