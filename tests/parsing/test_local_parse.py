"""``parse_local``: reasoning split, content and calls of a finished output; junk never raises."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.parsing import MessageFormat, ParseFlag, ToolCallFormat, ToolSpecs, parse_local, tool_call_id
from proxy.parsing.local import split_reasoning
from proxy.parsing.tool_blocks import arguments_object

from .strategies import MARKERS, TOOLS

SPECS = ToolSpecs.from_openai(TOOLS)
QWEN3 = MessageFormat.from_types("qwen25", "qwen3")
QWEN35 = MessageFormat.from_types("qwen3_coder", "qwen3")
CALL = '<tool_call>\n{"name": "calc", "arguments": {"x": 1}}\n</tool_call>'


def parse(text: str, fmt: MessageFormat = QWEN3, *, open_at_start: bool = False, tools: object = TOOLS):
    return parse_local(text, fmt, ToolSpecs.from_openai(tools), session_id="s", step_index=7,  # type: ignore[arg-type]
                       reasoning_open_at_start=open_at_start)


def test_reasoning_block_then_answer() -> None:
    message = parse("<think>\nStep 1.\nStep 2.\n</think>\n\nThe answer is 4.")
    assert (message.reasoning_content, message.content, message.flags) == ("Step 1.\nStep 2.\n", "The answer is 4.",
                                                                           frozenset())


def test_qwen35_thinking_prompt_leaves_reasoning_open_so_only_the_end_marker_appears() -> None:
    text = "Hmm, weather.\n</think>\n\nChecking.\n" + CALL
    message = parse(text, QWEN3, open_at_start=True)
    assert message.reasoning_content == "Hmm, weather.\n" and message.content == "Checking."
    assert len(message.tool_calls) == 1
    # Without the flag the same text is all answer (as SGLang's qwen3 parser sees it).
    assert parse(text).reasoning_content is None and "</think>" in parse(text).content
    # qwen3-thinking forces it open.
    assert parse(text, MessageFormat.from_types("qwen25", "qwen3-thinking")).reasoning_content == "Hmm, weather.\n"


def test_tool_call_inside_reasoning_closes_it() -> None:
    message = parse("<think>\nI will call calc.\n\n" + CALL)
    assert message.reasoning_content == "I will call calc." and message.content == ""
    assert [c.name for c in message.tool_calls] == ["calc"]


def test_output_cut_inside_reasoning_is_all_reasoning() -> None:
    message = parse("<think>\nstill thinking  \n")
    assert (message.reasoning_content, message.content) == ("still thinking", "")


def test_empty_reasoning_is_none_and_think_elsewhere_is_plain_text() -> None:
    assert parse("<think>\n\n</think>\n\nHi").reasoning_content is None
    message = parse("Hi <think>not reasoning</think>")
    assert message.reasoning_content is None and message.content == "Hi <think>not reasoning</think>"


def test_calls_get_deterministic_ids_by_position() -> None:
    message = parse("Doing both.\n" + CALL + "\n" + CALL.replace("calc", "get_weather"))
    assert [c.id for c in message.tool_calls] == [tool_call_id("s", 7, 0), tool_call_id("s", 7, 1)]
    assert [c.name for c in message.tool_calls] == ["calc", "get_weather"]
    assert message.to_openai()["tool_calls"][1]["function"] == {"name": "get_weather", "arguments": '{"x": 1}'}


def test_text_after_a_call_is_kept_as_content() -> None:
    assert parse("Before.\n" + CALL + "\nAfter.").content == "Before.\n\nAfter."


def test_malformed_block_stays_content_verbatim_and_flags_the_step() -> None:
    bad = '<tool_call>\n{"name": "calc", "arguments": {"x": 1}\n</tool_call>'
    message = parse("Try:\n" + bad + "\n" + CALL)
    assert message.content == "Try:\n" + bad
    assert len(message.tool_calls) == 1 and message.tool_calls[0].id == tool_call_id("s", 7, 0)
    assert message.flags == {ParseFlag.MALFORMED_TOOL_CALL}


def test_stray_closing_tag_and_open_block_are_malformed() -> None:
    assert parse("oops </tool_call> x").flags == {ParseFlag.MALFORMED_TOOL_CALL}
    cut = '<tool_call>\n{"name": "calc", "arguments": {"x": 1'
    message = parse("Calling.\n" + cut)
    assert message.content == "Calling.\n" + cut and not message.tool_calls
    assert message.flags == {ParseFlag.MALFORMED_TOOL_CALL}


def test_without_tools_every_call_is_unknown_and_stays_content() -> None:
    message = parse("x " + CALL, tools=None)
    assert message.content == "x " + CALL and message.flags == {ParseFlag.UNKNOWN_TOOL}


def test_without_a_tool_call_type_markup_is_ordinary_content() -> None:
    message = parse("x " + CALL, MessageFormat.from_types(None, "qwen3"))
    assert message.content == "x " + CALL and not message.flags and not message.tool_calls


def test_qwen3_coder_output_with_reasoning() -> None:
    text = ("<think>\nNeed the file.\n</think>\n\n<tool_call>\n<function=файл_🔧>\n"
            "<parameter=path>\n/tmp/ü.txt\n</parameter>\n</function>\n</tool_call>")
    message = parse(text, QWEN35)
    assert message.reasoning_content == "Need the file.\n" and message.content == ""
    calls = [(c.name, json.loads(c.arguments_json)) for c in message.tool_calls]
    assert calls == [("файл_🔧", {"path": "/tmp/ü.txt"})]
    assert message.to_openai()["content"] is None


junk = st.lists(st.text(max_size=12) | st.sampled_from(MARKERS + ("<function=calc>", "</function>", "{", '"name"')),
                max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=junk, fmt=st.sampled_from([QWEN3, QWEN35, MessageFormat(ToolCallFormat.JSON, False)]),
       open_at_start=st.booleans(), offer_tools=st.booleans())
def test_junk_never_raises_loses_no_text_and_flags_markup_left_in_content(
    text: str, fmt: MessageFormat, open_at_start: bool, offer_tools: bool
) -> None:
    """Property 4: any text parses; emitted calls are valid; with no call, content is the whole non-reasoning
    text (stripped); markup left in content is always flagged; the message serializes to UTF-8 JSON."""
    message = parse(text, fmt, open_at_start=open_at_start, tools=TOOLS if offer_tools else [])
    for call in message.tool_calls:
        assert offer_tools and call.name in SPECS and arguments_object(call.arguments_json) is not None
    rest = split_reasoning(text, open_at_start=open_at_start).rest if fmt.reasoning else text
    if not message.tool_calls:
        assert message.content == rest.strip()
    if "<tool_call>" in message.content or "</tool_call>" in message.content:
        assert message.flags & {ParseFlag.MALFORMED_TOOL_CALL, ParseFlag.UNKNOWN_TOOL}
    json.dumps(message.to_openai(), ensure_ascii=False).encode("utf-8")
