"""The ``hybrid`` and ``sglang_api`` backends against SGLang 0.5.23 (docs/parsing.md, "Local and SGLang 0.5.23").

Two SGLangs answer here, both real parsers, neither a mock of the code under test (``proxy.parsing.parser``):

* :class:`Recorded` answers with what SGLang 0.5.23's own parser classes returned for the very requests the proxy
  sends for the clean outputs of ``fixtures/sglang_0_5_23.jsonl.gz`` (every block on its own, the output with
  ``<think>`` in front when the prompt left reasoning open);
* :class:`EngineParsers` answers with the embedded engine's parsers, which equal 0.5.23 on every recorded case
  (``tests/engine/test_parser_fixtures.py``), for the requests of all outputs, tricky ones included.

Properties: a clean output is never flagged ``parser_mismatch`` and parses as ``local`` does (streamed or not);
for every output, ``parser_mismatch`` is flagged exactly when the message differs from the local one; and each
documented difference between the local parser and 0.5.23 behaves as documented.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from engine.parsers import ParserCrash, parse_function_call, separate_reasoning
from proxy.parsing import (
    MessageParser,
    ParsedMessage,
    ParseFlag,
    ParserConfig,
    ToolCallFormat,
    ToolSpecs,
    parse_local,
)
from proxy.parsing.tool_blocks import arguments_object, decide_block
from proxy.upstream.errors import UpstreamHTTPError
from proxy.upstream.events import FunctionCallParse, ReasoningParse

from .sglang_fixtures import Output, load
from .sglang_fixtures import recorded_reply as _reply
from .strategies import TOOLS

IDS = {"session_id": "s", "step_index": 3}


class Recorded:
    """SGLang 0.5.23's recorded answers; a request that was not recorded fails the test."""

    def __init__(self) -> None:
        fixtures = load()
        self.tool_sets = {name: tuple(tools) for name, tools in fixtures.meta["tool_sets"].items()}
        self.answers = {(case.endpoint, case.text, case.parser, case.tool_set): case.expected
                        for case in fixtures.cases}
        self.requests = 0

    async def parse_function_call(self, text: str, parser: str, tools: Iterable[Mapping[str, Any]]) -> Any:
        tool_set = next(name for name, known in self.tool_sets.items() if known == tuple(tools))
        self.requests += 1
        return _reply(self.answers["parse_function_call", text, parser, tool_set], FunctionCallParse)

    async def separate_reasoning(self, text: str, parser: str) -> Any:
        self.requests += 1
        return _reply(self.answers["separate_reasoning", text, parser, ""], ReasoningParse)


class EngineParsers:
    """The embedded engine's parsers, called in-process (the HTTP layer is tested in ``tests/engine``)."""

    async def parse_function_call(self, text: str, parser: str, tools: Iterable[Mapping[str, Any]]) -> Any:
        try:
            normal_text, calls = parse_function_call(text, parser, list(tools))
        except ParserCrash:
            raise UpstreamHTTPError(500, "Internal Server Error") from None
        return FunctionCallParse.from_json({"normal_text": normal_text, "calls": [c.to_json() for c in calls]})

    async def separate_reasoning(self, text: str, parser: str) -> Any:
        result = separate_reasoning(text, parser)
        return ReasoningParse.from_json({"reasoning_text": result.reasoning_text, "text": result.text})


def config(output: Output, backend: str = "hybrid", reasoning_type: str = "qwen3") -> ParserConfig:
    return ParserConfig(tool_call_type=output.tool_call_parser, reasoning_type=reasoning_type,
                        tool_call_backend=backend, reasoning_backend=backend)  # type: ignore[arg-type]


def local_message(output: Output, cfg: ParserConfig) -> ParsedMessage:
    return parse_local(output.text, cfg.message_format, ToolSpecs.from_openai(output.tools),
                       reasoning_open_at_start=output.open_at_start, **IDS)


def cuts(text: str, rng: random.Random) -> list[str]:
    points = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 12))))
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def what(message: ParsedMessage) -> tuple[Any, ...]:
    """The message without its flags."""
    return message.content, message.reasoning_content, message.tool_calls


@pytest.mark.parametrize("backend", ["hybrid", "sglang_api"])
async def test_clean_outputs_are_never_flagged_against_sglang_0_5_23(backend: str) -> None:
    """Every clean output, with SGLang 0.5.23's own answers: no flag at all, the local message, streamed or not."""
    sglang = Recorded()
    rng = random.Random(14)
    clean = [output for output in load().outputs if output.clean]
    assert len(clean) >= 1000
    for output in clean:
        cfg = config(output, backend)
        parser = MessageParser(cfg, sglang)
        expected = local_message(output, cfg)
        assert not expected.flags, output
        final = await parser.parse_final(output.text, output.tools, reasoning_open_at_start=output.open_at_start,
                                         **IDS)
        assert final == expected, output
        stream = parser.stream(output.tools, reasoning_open_at_start=output.open_at_start, **IDS)
        for piece in cuts(output.text, rng):
            stream.feed(piece)
        await stream.finish()
        assert stream.message == final, output
        assert parser.statistics().mismatches == 0
    assert sglang.requests >= len(clean)


@pytest.mark.parametrize("reasoning_type", ["qwen3", "qwen3-thinking"])
async def test_parser_mismatch_is_flagged_exactly_when_the_message_differs_from_local(reasoning_type: str) -> None:
    """All outputs, tricky ones included: the documented representation differences (whitespace, ``tool_index``,
    what SGLang calls normal text, how it drops an unknown tool) never flag a step; a step is flagged when, and
    only when, SGLang's decision gave another message than the local parser's."""
    flagged = 0
    rng = random.Random(9)
    for output in load().outputs:
        cfg = config(output, "hybrid", reasoning_type)
        parser = MessageParser(cfg, EngineParsers())
        message = await parser.parse_final(output.text, output.tools, reasoning_open_at_start=output.open_at_start,
                                           **IDS)
        if ParseFlag.PARSER_FALLBACK in message.flags:
            continue  # SGLang raised (a 500): the local parser decided
        differs = what(message) != what(local_message(output, cfg))
        assert (ParseFlag.PARSER_MISMATCH in message.flags) == differs, output
        assert not (output.clean and differs), output
        flagged += differs
        if not differs:  # streamed: the same message (a stream splits reasoning locally, so only then)
            stream = parser.stream(output.tools, reasoning_open_at_start=output.open_at_start, **IDS)
            for piece in cuts(output.text, rng):
                stream.feed(piece)
            await stream.finish()
            assert stream.message == message, output
    assert flagged > 300  # the tricky outputs do disagree


def test_where_both_make_calls_of_a_block_they_are_the_same_calls() -> None:
    """Every recorded block (alone in its request) that SGLang 0.5.23 and the local parser both turn into valid
    calls gives the same names and the same arguments, byte for byte: the XML values are converted as 0.5.23
    does (schema types through anyOf, enum, allOf...; a boolean that is not true is false)."""
    both = 0
    for case in load().of("parse_function_call"):
        text = case.text.strip()
        if case.crashes or not (text.startswith("<tool_call>") and text.count("<tool_call>") == 1
                                and text.endswith("</tool_call>") and text.count("</tool_call>") == 1):
            continue
        fmt = ToolCallFormat.XML if case.parser in ("qwen3_coder", "step3p5") else ToolCallFormat.JSON
        specs = ToolSpecs.from_openai(case.tools)
        theirs = [(call["name"], call["parameters"]) for call in case.expected["calls"]]
        mine = decide_block(text, fmt, specs)
        if mine.accepted and theirs and all(arguments_object(a) is not None and n in specs for n, a in theirs):
            assert list(mine.calls) == theirs, case.describe()
            both += 1
    assert both > 2000


async def hybrid(text: str, tool_call_type: str = "qwen3_coder", *, open_at_start: bool = False,
                 tools: list[Any] = TOOLS) -> tuple[ParsedMessage, ParsedMessage]:
    """``(hybrid message, local message)`` of one output, with the engine's (0.5.23) parsers."""
    cfg = ParserConfig(tool_call_type=tool_call_type, tool_call_backend="hybrid", reasoning_backend="hybrid")
    message = await MessageParser(cfg, EngineParsers()).parse_final(
        text, tools, reasoning_open_at_start=open_at_start, **IDS)
    local = parse_local(text, cfg.message_format, ToolSpecs.from_openai(tools),
                        reasoning_open_at_start=open_at_start, **IDS)
    return message, local


CODER_CALL = "<tool_call>\n<function=calc>\n<parameter=x>\n2\n</parameter>\n</function>\n</tool_call>"
WEATHER_CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>"
JSON_CALL = '<tool_call>\n{"name": "calc", "arguments": {"x": 2}}\n</tool_call>'


# -- documented differences that are not flagged: the same message ------------------------------------------------

@pytest.mark.parametrize(("text", "open_at_start"), [
    ("<think>\n  Plan.\n\n</think>\n\n  Answer.\n\n", False),  # 0.5.23: "\n  Plan.\n\n", "\n\n  Answer.\n\n"
    ("  Plan. \n</think>\n\nAnswer.", True),
    ("<think>\nPlan. \n" + CODER_CALL, False),                 # reasoning ended by <tool_call>: trailing space dropped
])
async def test_difference_1_whitespace_around_reasoning_and_content(text: str, open_at_start: bool) -> None:
    message, local = await hybrid(text, open_at_start=open_at_start)
    assert message == local and not message.flags
    assert message.reasoning_content is not None and not message.reasoning_content[0].isspace()
    assert message.content == message.content.strip()


async def test_difference_2_whitespace_before_the_opening_think() -> None:
    """0.5.23 would keep ``  <think>`` in the reasoning; the proxy sends the text from the ``<think>`` on."""
    message, local = await hybrid(" \n<think>\nPlan.\n</think>\n\nAnswer.")
    assert message == local and not message.flags and message.reasoning_content == "Plan.\n"


async def test_difference_3_qwen3_coder_tool_index_is_not_used() -> None:
    """0.5.23 numbers the calls 0, 1 by their position in the output; ids count accepted calls, as locally."""
    message, local = await hybrid(WEATHER_CALL + "\n" + CODER_CALL)
    assert message == local and not message.flags
    assert [c.name for c in message.tool_calls] == ["get_weather", "calc"]


@pytest.mark.parametrize("tool_call_type", ["qwen25", "qwen3_coder"])
async def test_difference_4_normal_text_is_the_proxys_own(tool_call_type: str) -> None:
    """0.5.23 keeps only the text before the first call (stripped by qwen25, not by qwen3_coder); the proxy cuts
    the text itself, keeps text after the calls, and asks SGLang about each block alone."""
    call = JSON_CALL if tool_call_type == "qwen25" else CODER_CALL
    message, local = await hybrid(f"Before.\n{call}\nAfter.", tool_call_type)
    assert message == local and not message.flags and message.content == "Before.\n\nAfter."


@pytest.mark.parametrize("tool_call_type", ["qwen25", "qwen3_coder"])
async def test_difference_5_a_tool_that_was_not_offered_is_never_called(tool_call_type: str) -> None:
    """qwen25 drops such a call, qwen3_coder returns it (by name, unchecked); either way no call is made and the
    block stays content, flagged ``unknown_tool``, without ``parser_mismatch``."""
    call = JSON_CALL if tool_call_type == "qwen25" else CODER_CALL
    message, local = await hybrid(call.replace("calc", "rm_rf"), tool_call_type)
    assert message == local and message.flags == {ParseFlag.UNKNOWN_TOOL} and not message.tool_calls


async def test_difference_6_open_blocks_and_requests_without_tools_are_decided_locally() -> None:
    """0.5.23's qwen3_coder would return the truncated call; the proxy does not ask, and makes none."""
    message, local = await hybrid("<tool_call>\n<function=calc>\n<parameter=x>\n2")
    assert message == local and message.flags == {ParseFlag.MALFORMED_TOOL_CALL}
    message, local = await hybrid(CODER_CALL, tools=[])
    assert message == local and message.flags == {ParseFlag.UNKNOWN_TOOL}


# -- documented differences that are flagged: SGLang decides, the message differs ---------------------------------

def flagged(message: ParsedMessage, local: ParsedMessage) -> bool:
    return ParseFlag.PARSER_MISMATCH in message.flags and what(message) != what(local)


async def test_difference_7_think_that_does_not_start_the_output() -> None:
    """0.5.23 opens reasoning at a ``<think>`` anywhere and removes every leading one; locally it is text."""
    message, local = await hybrid("Sure <think>x</think> done.")
    assert flagged(message, local)
    assert (message.reasoning_content, message.content) == ("Sure <think>x", "done.")
    assert (local.reasoning_content, local.content) == (None, "Sure <think>x</think> done.")
    message, local = await hybrid("<think><think>Plan.</think>Answer.")
    assert flagged(message, local) and (message.reasoning_content, local.reasoning_content) == ("Plan.", "<think>Plan.")


async def test_difference_8_tool_call_in_reasoning_before_a_think_end() -> None:
    """0.5.23 ends reasoning at ``<tool_call>`` only when no ``</think>`` follows; locally at the first of the two."""
    message, local = await hybrid(f"<think>\nMaybe {CODER_CALL}\n</think>\n\nNo call.")
    assert flagged(message, local)
    assert not message.tool_calls and CODER_CALL in (message.reasoning_content or "")
    assert [c.name for c in local.tool_calls] == ["calc"]
    message, local = await hybrid(f"<think>\nMaybe\n{CODER_CALL}")  # no </think>: both end reasoning there
    assert message == local and not message.flags


@pytest.mark.parametrize("inner", [
    "<function=calc>\n<parameter=x>\n2\n</parameter>\n",                      # no </function>
    "junk <function=calc>\n<parameter=x>\n2\n</parameter>\n</function>",      # text outside the elements
    "<function=calc>\n<parameter=x\n2</parameter>\n</function>",              # parameter name without '>'
])
async def test_difference_9_stricter_xml(inner: str) -> None:
    message, local = await hybrid(f"<tool_call>\n{inner}\n</tool_call>")
    assert flagged(message, local) and [c.name for c in message.tool_calls] == ["calc"] and not local.tool_calls


async def test_difference_10_spaced_names() -> None:
    """0.5.23 keeps ``<function= calc >``'s spaces: no offered tool has that name. Locally the name is stripped."""
    message, local = await hybrid(CODER_CALL.replace("<function=calc>", "<function= calc >"))
    assert flagged(message, local) and not message.tool_calls and [c.name for c in local.tool_calls] == ["calc"]


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "calc", "arguments": {"x": 2}}</tool_call>',                # no newlines
    '<tool_call>\n{"name": "calc", "arguments": "{\\"x\\": 2}"}\n</tool_call>',        # arguments as a string
    '<tool_call>\n{"name": "calc", "arguments": null}\n</tool_call>',
])
async def test_difference_11_laxer_json(text: str) -> None:
    message, local = await hybrid(text, "qwen25")
    assert flagged(message, local) and not message.tool_calls and [c.name for c in local.tool_calls] == ["calc"]


@pytest.mark.parametrize(("key", "value"), [("x", "nan"), ("x", "inf"), ("opts", "{1, 2}"), ("opts", "b'x'")])
async def test_difference_12_values_json_cannot_write(key: str, value: str) -> None:
    """0.5.23 writes ``NaN`` (not JSON: the call is refused) or, for a set or bytes, returns no call at all; the
    local parser keeps the value as a string."""
    text = f"<tool_call>\n<function=calc>\n<parameter={key}>\n{value}\n</parameter>\n</function>\n</tool_call>"
    message, local = await hybrid(text)
    assert flagged(message, local) and not message.tool_calls
    assert local.tool_calls[0].arguments_json == f'{{"{key}": "{value}"}}'


async def test_when_sglang_raises_the_local_parser_decides() -> None:
    """0.5.23 raises (its server answers 500) on a JSON list item that is not an object: ``parser_fallback``."""
    message, local = await hybrid(f"<tool_call>\n[1]\n</tool_call>\n{JSON_CALL}", "qwen25")
    assert message.flags == {ParseFlag.PARSER_FALLBACK, ParseFlag.MALFORMED_TOOL_CALL}
    assert what(message) == what(local)
