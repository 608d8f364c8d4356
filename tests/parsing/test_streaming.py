"""``StreamingMessageParser``: deltas as text arrives, hold-back of markup, and agreement with ``parse_local``."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.parsing import (
    ContentDelta,
    MessageFormat,
    ParseFlag,
    ReasoningDelta,
    StreamingMessageParser,
    ToolCallDelta,
    ToolCallFormat,
    ToolSpecs,
    merge_deltas,
    parse_local,
)
from proxy.parsing.formats import TOOL_CALL_END, TOOL_CALL_START
from proxy.parsing.tool_blocks import MALFORMED, arguments_object

from .strategies import TOOL_NAMES, TOOLS, cuts, mixed_output, well_formed_output

SPECS = ToolSpecs.from_openai(TOOLS)
FORMATS = [ToolCallFormat.JSON, ToolCallFormat.XML]
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def streamed(pieces: list[str], fmt: MessageFormat, specs: ToolSpecs = SPECS, *, open_at_start: bool = False,
             defer: bool = False) -> tuple[list, StreamingMessageParser]:
    parser = StreamingMessageParser(fmt, specs, "session-1", 3, reasoning_open_at_start=open_at_start,
                                    defer_blocks=defer)
    deltas = []
    for piece in pieces:
        deltas += parser.feed(piece)
    deltas += parser.finish()
    return deltas, parser


def assert_deltas_build(deltas: list, message) -> None:
    content, reasoning, calls = merge_deltas(deltas)
    assert content == message.content
    assert reasoning == (message.reasoning_content or "")
    assert calls == tuple((c.id, c.name, c.arguments_json) for c in message.tool_calls)
    assert all(d.text for d in deltas if isinstance(d, (ContentDelta, ReasoningDelta)))


@PROPERTY
@given(data=st.data(), tool_format=st.sampled_from(FORMATS), reasoning=st.booleans(), open_at_start=st.booleans(),
       offer_tools=st.booleans(), defer=st.booleans())
def test_streamed_deltas_reassemble_to_the_non_streaming_parse_for_any_cut(
    data: st.DataObject, tool_format: ToolCallFormat, reasoning: bool, open_at_start: bool, offer_tools: bool,
    defer: bool,
) -> None:
    """Property 1: whatever the text and however it is cut into deltas, the deltas add up to the streaming
    parser's message, and that message is exactly ``parse_local`` of the whole text (also when blocks are
    deferred and decided at the end)."""
    text = data.draw(mixed_output(tool_format) | well_formed_output(tool_format).map(lambda t: t[0]), label="text")
    pieces = data.draw(cuts(text), label="pieces")
    fmt = MessageFormat(tool_format, reasoning)
    specs = SPECS if offer_tools else ToolSpecs.from_openai([])
    expected = parse_local(text, fmt, specs, session_id="session-1", step_index=3,
                           reasoning_open_at_start=open_at_start)
    deltas, parser = streamed(pieces, fmt, specs, open_at_start=open_at_start, defer=defer)
    assert parser.message == expected
    assert_deltas_build(deltas, expected)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), reasoning=st.booleans())
def test_streaming_without_a_tool_call_type_leaves_markup_in_content(data: st.DataObject, reasoning: bool) -> None:
    text = data.draw(mixed_output(ToolCallFormat.JSON))
    fmt = MessageFormat(None, reasoning)
    deltas, parser = streamed(data.draw(cuts(text)), fmt)
    expected = parse_local(text, fmt, SPECS, session_id="session-1", step_index=3)
    assert parser.message == expected and not expected.tool_calls and not expected.flags
    assert_deltas_build(deltas, expected)


@PROPERTY
@given(data=st.data(), tool_format=st.sampled_from(FORMATS))
def test_well_formed_output_streams_no_markup_into_content_and_no_flags(
    data: st.DataObject, tool_format: ToolCallFormat
) -> None:
    """Property 2: for well-formed outputs, no content delta holds any part of the call markup, every block
    becomes a call (with a valid name and object arguments) and the step is not flagged."""
    text, open_at_start, n_calls = data.draw(well_formed_output(tool_format))
    deltas, parser = streamed(data.draw(cuts(text)), MessageFormat(tool_format, True), open_at_start=open_at_start)
    message = parser.message
    assert message.flags == frozenset()
    assert len(message.tool_calls) == n_calls
    assert TOOL_CALL_START not in message.content and TOOL_CALL_END not in message.content
    assert "<function=" not in message.content and '"arguments"' not in message.content
    assert all(c.name in TOOL_NAMES and arguments_object(c.arguments_json) is not None for c in message.tool_calls)
    if n_calls:
        assert message.finish_reason("stop") == "tool_calls"


def test_content_and_reasoning_flow_before_the_output_ends() -> None:
    parser = StreamingMessageParser(MessageFormat(ToolCallFormat.JSON, True), SPECS, "s", 0)
    assert parser.feed("<think>\nLet me") == [ReasoningDelta("Let me")]
    assert parser.feed(" think. ") == [ReasoningDelta(" think.")]  # trailing space held back
    assert parser.feed("</thi") == []
    assert parser.feed("nk>\n\nHello ") == [ReasoningDelta(" "), ContentDelta("Hello")]
    assert parser.feed("world") == [ContentDelta(" world")]


def test_a_marker_cut_anywhere_is_held_back_until_it_is_known() -> None:
    parser = StreamingMessageParser(MessageFormat(ToolCallFormat.JSON, True), SPECS, "s", 0)
    assert parser.feed("Checking <tool") == [ContentDelta("Checking")]
    assert parser.feed("_cal") == []
    assert parser.feed('l>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_') == []
    deltas = parser.feed("call>")
    assert [d.to_openai() for d in deltas] == [
        {"tool_calls": [{"index": 0, "id": deltas[0].id, "type": "function",
                         "function": {"name": "get_weather", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}]},
    ]
    # "<tool" turned out not to be markup: it is content after all.
    parser2 = StreamingMessageParser(MessageFormat(ToolCallFormat.JSON, True), SPECS, "s", 0)
    assert parser2.feed("a <tool") == [ContentDelta("a")]
    assert parser2.feed("box>") == [ContentDelta(" <toolbox>")]


def test_tool_call_deltas_follow_the_openai_streaming_format() -> None:
    """First delta of a call: index, id, type, function.name and empty arguments; then the arguments."""
    text = ('<tool_call>\n{"name": "calc", "arguments": {"x": 1}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>')
    deltas, parser = streamed([text], MessageFormat(ToolCallFormat.JSON, True))
    assert all(isinstance(d, ToolCallDelta) for d in deltas)
    first, second, third, fourth = (d.to_openai()["tool_calls"][0] for d in deltas)
    assert first == {"index": 0, "id": parser.message.tool_calls[0].id, "type": "function",
                     "function": {"name": "calc", "arguments": ""}}
    assert second == {"index": 0, "function": {"arguments": '{"x": 1}'}}
    assert third["index"] == 1 and third["function"]["name"] == "get_weather" and fourth["index"] == 1
    assert parser.message.finish_reason("stop") == "tool_calls"
    assert parser.message.finish_reason("length") == "length"
    assert json.loads(json.dumps(parser.message.to_openai()))["content"] is None


def test_malformed_block_streams_as_content_when_it_closes_and_flags_the_step() -> None:
    parser = StreamingMessageParser(MessageFormat(ToolCallFormat.JSON, False), SPECS, "s", 0)
    assert parser.feed("A\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {]}\n") == [ContentDelta("A")]
    assert parser.feed("</tool_call>\nB") == [
        ContentDelta('\n<tool_call>\n{"name": "calc", "arguments": {]}\n</tool_call>'), ContentDelta("\nB")]
    parser.finish()
    assert parser.message.flags == {ParseFlag.MALFORMED_TOOL_CALL}


def test_deferred_blocks_hold_everything_after_the_first_block_until_resolved() -> None:
    """With an SGLang backend the blocks wait for ``resolve()``; text before them still streams."""
    parser = StreamingMessageParser(MessageFormat(ToolCallFormat.JSON, False), SPECS, "s", 0, defer_blocks=True)
    block = '<tool_call>\n{"name": "calc", "arguments": {}}\n</tool_call>'
    assert parser.feed("Sure. " + block + " then more") == [ContentDelta("Sure.")]
    assert parser.end_input() == []
    assert parser.undecided_blocks == (block,)
    with pytest.raises(ValueError):
        parser.resolve([])
    out = parser.resolve([MALFORMED], flags=["parser_mismatch"])
    assert out == [ContentDelta(" " + block), ContentDelta(" then more")]
    assert parser.message.flags == {"malformed_tool_call", "parser_mismatch"}


def test_stream_misuse_raises_clearly() -> None:
    parser = StreamingMessageParser(MessageFormat(ToolCallFormat.JSON, True), SPECS, "s", 0)
    with pytest.raises(RuntimeError):
        parser.message
    parser.finish()
    with pytest.raises(RuntimeError):
        parser.feed("more")
    with pytest.raises(RuntimeError):
        parser.end_input()
