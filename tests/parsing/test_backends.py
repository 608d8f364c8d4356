"""``MessageParser`` backends: ``local``, ``sglang_api``, ``hybrid`` (spec §10), with fake SGLang answers and an
unreachable server."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import pytest
import trio
from trio.testing import MockClock

from proxy.parsing import MessageParser, ParsedMessage, ParseFlag, ParserConfig, ToolSpecs, merge_deltas, parse_local
from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import UpstreamHTTPError, UpstreamTimeout, UpstreamUnavailable
from proxy.upstream.events import FunctionCallParse, ReasoningParse, ToolCallItem

from .strategies import TOOLS

CALL = '<tool_call>\n{"name": "calc", "arguments": {"x": 1}}\n</tool_call>'
TEXT = "<think>\nPlan.\n</think>\n\nComputing.\n" + CALL
LOCAL = ParserConfig(tool_call_backend="local", reasoning_backend="local")
IDS = {"session_id": "s", "step_index": 1}


def expected_local(text: str = TEXT, config: ParserConfig = LOCAL):
    return parse_local(text, config.message_format, ToolSpecs.from_openai(TOOLS), **IDS)


class FakeSGLang:
    """Answers the parser endpoints with a function of the text, or raises, or hangs; counts calls."""

    def __init__(self, calls: Callable[[str], list[ToolCallItem]] | BaseException | None = None,
                 reasoning: Callable[[str], ReasoningParse] | BaseException | None = None) -> None:
        self.calls = calls
        self.reasoning = reasoning
        self.requests: list[tuple[str, str]] = []

    async def parse_function_call(
        self, text: str, parser: str, tools: Iterable[Mapping[str, Any]]
    ) -> FunctionCallParse:
        self.requests.append(("parse_function_call", text))
        if isinstance(self.calls, BaseException):
            raise self.calls
        if self.calls is None:
            await trio.sleep_forever()
        return FunctionCallParse(normal_text="", calls=tuple(self.calls(text)))

    async def separate_reasoning(self, text: str, parser: str) -> ReasoningParse:
        self.requests.append(("separate_reasoning", text))
        if isinstance(self.reasoning, BaseException):
            raise self.reasoning
        if self.reasoning is None:
            await trio.sleep_forever()
        return self.reasoning(text)


def with_flags(message: ParsedMessage, *flags: str) -> ParsedMessage:
    return attrs.evolve(message, flags=message.flags | set(flags))


def sglang_split(text: str) -> ReasoningParse:
    return ReasoningParse(reasoning_text="Plan.\n", text="Computing.\n" + CALL)


def calls_of(*calls: tuple[str, str]) -> Callable[[str], list[ToolCallItem]]:
    return lambda text: [ToolCallItem(0, name, parameters) for name, parameters in calls]


def config(backend: str) -> ParserConfig:
    return ParserConfig(tool_call_backend=backend, reasoning_backend=backend)  # type: ignore[arg-type]


async def parse_both_ways(parser: MessageParser, text: str = TEXT):
    """``parse_final`` and a streamed parse of the same text, which must agree."""
    final = await parser.parse_final(text, TOOLS, **IDS)
    stream = parser.stream(TOOLS, **IDS)
    deltas = [d for ch in text for d in stream.feed(ch)] + await stream.finish()
    assert stream.message == final
    content, reasoning, calls = merge_deltas(deltas)
    assert (content, reasoning) == (final.content, final.reasoning_content or "")
    assert calls == tuple((c.id, c.name, c.arguments_json) for c in final.tool_calls)
    return final


async def test_sglang_api_uses_sglang_answers_and_agrees_with_local_when_they_match() -> None:
    fake = FakeSGLang(calls_of(("calc", '{"x": 1}')), sglang_split)
    message = await parse_both_ways(MessageParser(config("sglang_api"), fake))
    assert message == expected_local()
    assert ("parse_function_call", CALL) in fake.requests  # each block on its own
    assert ("separate_reasoning", TEXT) in fake.requests


async def test_sglang_decision_wins_and_a_disagreement_is_flagged_parser_mismatch() -> None:
    parser = MessageParser(config("sglang_api"), FakeSGLang(calls_of(("calc", '{"x": 2}')), sglang_split))
    message = await parse_both_ways(parser)
    assert message.tool_calls[0].arguments_json == '{"x": 2}'
    assert message.flags == {ParseFlag.PARSER_MISMATCH}
    assert parser.statistics().mismatches == 2


@pytest.mark.parametrize(("answer", "flags"), [
    ([], {ParseFlag.MALFORMED_TOOL_CALL, ParseFlag.PARSER_MISMATCH}),  # SGLang found no call
    ([("", '{"x": 1}')], {ParseFlag.MALFORMED_TOOL_CALL, ParseFlag.PARSER_MISMATCH}),  # empty name (field notes 14)
    ([("calc", "null")], {ParseFlag.MALFORMED_TOOL_CALL, ParseFlag.PARSER_MISMATCH}),  # arguments not an object
    ([("calc", "{bad")], {ParseFlag.MALFORMED_TOOL_CALL, ParseFlag.PARSER_MISMATCH}),
    ([("rm_rf", "{}")], {ParseFlag.UNKNOWN_TOOL, ParseFlag.PARSER_MISMATCH}),
])
async def test_sglang_answers_that_break_the_invariants_leave_the_block_as_content(
    answer: list[tuple[str, str]], flags: set[str]
) -> None:
    parser = MessageParser(config("sglang_api"), FakeSGLang(calls_of(*answer), sglang_split))
    message = await parse_both_ways(parser)
    assert message.tool_calls == () and message.content == "Computing.\n" + CALL
    assert message.flags == flags


async def test_sglang_api_failure_propagates() -> None:
    fake = FakeSGLang(UpstreamHTTPError(500, "boom"), UpstreamHTTPError(500, "boom"))
    parser = MessageParser(config("sglang_api"), fake)
    with pytest.raises(UpstreamHTTPError):
        await parser.parse_final(TEXT, TOOLS, **IDS)
    stream = parser.stream(TOOLS, **IDS)
    stream.feed(TEXT)
    with pytest.raises(UpstreamHTTPError):
        await stream.finish()  # streaming splits reasoning locally; the tool-call backend still fails


async def test_hybrid_falls_back_to_local_when_sglang_answers_with_an_error() -> None:
    fake = FakeSGLang(UpstreamHTTPError(500, "boom"), UpstreamHTTPError(503, "busy"))
    parser = MessageParser(config("hybrid"), fake)
    message = await parse_both_ways(parser)
    local = expected_local()
    assert message == with_flags(local, ParseFlag.PARSER_FALLBACK)
    assert parser.statistics().fallbacks == 3  # reasoning + blocks (parse_final), blocks (stream)


async def test_hybrid_falls_back_to_local_when_sglang_hangs_past_the_timeout(autojump_clock: MockClock) -> None:
    parser = MessageParser(attrs.evolve(config("hybrid"), backend_timeout=2.0), FakeSGLang(None, None))
    start = trio.current_time()
    message = await parse_both_ways(parser)
    assert message == with_flags(expected_local(), ParseFlag.PARSER_FALLBACK)
    assert trio.current_time() - start == pytest.approx(6.0)  # three calls, each given up after 2 s
    strict = MessageParser(attrs.evolve(config("sglang_api"), backend_timeout=2.0), FakeSGLang(None, None))
    with pytest.raises(UpstreamTimeout):
        await strict.parse_final(TEXT, TOOLS, **IDS)


async def test_hybrid_falls_back_to_local_when_sglang_is_unreachable() -> None:
    """A closed port: connection refused -> ``UpstreamUnavailable`` -> the local parser, flagged."""
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    async with SGLangClient.single_server(f"http://127.0.0.1:{port}") as client:
        message = await parse_both_ways(MessageParser(config("hybrid"), client))
        assert message == with_flags(expected_local(), ParseFlag.PARSER_FALLBACK)
        with pytest.raises(UpstreamUnavailable):
            await MessageParser(config("sglang_api"), client).parse_final(TEXT, TOOLS, **IDS)


async def test_requests_without_tools_and_open_blocks_never_ask_sglang() -> None:
    fake = FakeSGLang(calls_of(("calc", "{}")), sglang_split)
    parser = MessageParser(ParserConfig(tool_call_backend="sglang_api", reasoning_backend="local"), fake)
    message = await parser.parse_final("x " + CALL, [], **IDS)
    assert message.flags == {ParseFlag.UNKNOWN_TOOL} and fake.requests == []
    message = await parser.parse_final("x " + CALL[:-5], TOOLS, **IDS)
    assert message.flags == {ParseFlag.MALFORMED_TOOL_CALL} and fake.requests == []


async def test_reasoning_left_open_by_the_prompt_is_sent_to_sglang_with_its_think_tag() -> None:
    fake = FakeSGLang(calls_of(), lambda text: ReasoningParse("Plan.", "Done."))
    parser = MessageParser(ParserConfig(tool_call_backend="local", reasoning_backend="sglang_api"), fake)
    message = await parser.parse_final("Plan.</think>Done.", TOOLS, reasoning_open_at_start=True, **IDS)
    assert fake.requests == [("separate_reasoning", "<think>Plan.</think>Done.")]
    assert (message.reasoning_content, message.content, message.flags) == ("Plan.", "Done.", frozenset())


@pytest.mark.parametrize("backend", ["sglang_api", "hybrid"])
async def test_text_without_reasoning_markers_is_not_sent_to_separate_reasoning(backend: str) -> None:
    # Not open at the start and no marker: SGLang's answer cannot differ from "all normal text".
    fake = FakeSGLang(calls_of(), lambda text: ReasoningParse("wrong", "wrong"))
    parser = MessageParser(ParserConfig(tool_call_backend="local", reasoning_backend=backend), fake)  # type: ignore
    message = await parser.parse_final("Just the answer.", TOOLS, **IDS)
    assert fake.requests == [] and parser.statistics().backend_calls == 0
    assert (message.reasoning_content, message.content, message.flags) == (None, "Just the answer.", frozenset())


@pytest.mark.parametrize("text", ["Plan.</think>Done.", "Done.<think>", "<think>Plan."])
async def test_any_reasoning_marker_sends_the_text_to_separate_reasoning(text: str) -> None:
    fake = FakeSGLang(calls_of(), lambda text: ReasoningParse("from sglang", "Done."))
    parser = MessageParser(ParserConfig(tool_call_backend="local", reasoning_backend="sglang_api"), fake)
    message = await parser.parse_final(text, TOOLS, **IDS)
    assert fake.requests == [("separate_reasoning", text)]
    assert message.reasoning_content == "from sglang"


async def test_local_backend_needs_no_client_and_counts_messages() -> None:
    parser = MessageParser(LOCAL)
    assert await parse_both_ways(parser) == expected_local()
    stats = parser.statistics()
    assert (stats.messages_parsed, stats.backend_calls, stats.fallbacks) == (2, 0, 0)


def test_parser_config_rejects_unknown_names_clearly() -> None:
    with pytest.raises(ValueError, match="qwen25"):
        ParserConfig(tool_call_type="qwen3")
    with pytest.raises(ValueError, match="hybrid"):
        ParserConfig(tool_call_backend="remote")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reasoning type"):
        ParserConfig(reasoning_type="deepseek")
    with pytest.raises(ValueError, match="client"):
        MessageParser(ParserConfig())
    assert ParserConfig().tool_call_backend == ParserConfig().reasoning_backend == "sglang_api"  # spec §10
    MessageParser(ParserConfig(tool_call_type=None, reasoning_type=None))  # nothing to ask SGLang


def test_tools_given_as_junk_are_ignored_not_fatal() -> None:
    specs = ToolSpecs.from_openai([None, 5, {"type": "function"}, {"function": {"name": ""}},
                                   {"name": "bare", "parameters": {"properties": {"a": {"type": "integer"}}}}])
    assert "bare" in specs and len(specs.properties) == 1 and specs.parameter_schema("bare", "a") == {"type": "integer"}
    assert json.dumps(specs.openai_tools)
