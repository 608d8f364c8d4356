"""MiniMax-M3 reasoning and tool calls (SGLang 0.5.23 ``minimax-m3`` for both). Reasoning is ``<mm:think>...</mm:think>``,
open at the start only when the prompt opened it (``thinking_mode=enabled``); a turn that does not think opens with a
bare ``</mm:think>``. Tool calls are namespaced element trees in ``]<]minimax[>[<tool_call>`` blocks. Checked against
SGLang's own parsers' recorded answers (``fixtures/sglang_minimax_m3_0_5_23.json``, made by
``fixtures/generate_minimax_m3_fixtures.py``), streaming against non-streaming, and against the official template:
what it renders parses back to the message, and what we parse re-renders to the generated text."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from engine.parsers import parse_function_call, separate_reasoning
from proxy.families import get_family, load_tito_tokenizer
from proxy.parsing import MessageFormat, MessageParser, ParserConfig, StreamingMessageParser, ToolSpecs, parse_local
from proxy.upstream.events import FunctionCallParse, ReasoningParse
from serving.tokenizer_files import model_tokenizer_path

from .test_minimax_parsing import _streamed

FIXTURE = Path(__file__).parent / "fixtures" / "sglang_minimax_m3_0_5_23.json"
NS = "]<]minimax[>["
REASONING = MessageFormat.from_types(None, "minimax-m3")
CALLS = MessageFormat.from_types("minimax-m3", "minimax-m3")
TOOLS_ONLY = MessageFormat.from_types("minimax-m3", None)
NO_TOOLS = ToolSpecs.from_openai(None)


def _data() -> dict[str, Any]:
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert (data["sglang"], data["parser"], data["tool_parser"]) == ("0.5.23", "minimax-m3", "minimax-m3")
    return data


def test_the_family_names_sglangs_parsers_and_the_markers_are_the_formats():
    family = get_family("minimax_m3")
    assert (family.tool_call_parser, family.reasoning_parser) == ("minimax-m3", "minimax-m3")
    assert (CALLS.think.start, CALLS.think.end) == ("<mm:think>", "</mm:think>")
    assert CALLS.tool_call.markers == (NS + "<tool_call>", NS + "</tool_call>")
    assert not CALLS.reasoning_forced_open  # only thinking_mode=enabled opens it, through the prompt
    assert CALLS.think.prompt_opens("]~b]ai\n<mm:think>") and not CALLS.think.prompt_opens("]~b]ai\n</mm:think>")


def test_the_engine_answers_both_endpoints_as_sglang_0_5_23_does():
    data = _data()
    for case in data["cases"]:
        result = separate_reasoning(case["text"], "minimax-m3")
        assert (result.reasoning_text, result.text) == (case["reasoning_text"], case["text_out"]), case
    for case in data["tool_cases"]:
        normal, calls = parse_function_call(case["text"], "minimax-m3", data["tools"])
        assert normal == case["normal_text"], case
        assert [(c.name, json.loads(c.parameters)) for c in calls] == [
            (c["name"], c["arguments"]) for c in case["calls"]], case


def test_local_reasoning_agrees_with_sglang_modulo_the_documented_differences():
    """Whitespace (docs/parsing.md rule 1), and M3-1: SGLang opens reasoning at a ``<mm:think>`` anywhere in an output
    whose prompt did not open it (also right after a dropped leading ``</mm:think>``); locally only one that starts
    the output does (the template writes it only there)."""
    differing = 0
    for case in _data()["cases"]:
        output = case["output"]
        message = parse_local(output, REASONING, NO_TOOLS, session_id="s", step_index=0,
                              reasoning_open_at_start=case["opened"])
        closed = "</mm:think>" in case["text"]
        reasoning = case["reasoning_text"].lstrip() if closed else case["reasoning_text"].strip()
        if (message.reasoning_content, message.content) == (reasoning or None, case["text_out"].strip()):
            continue
        differing += 1
        body = output.lstrip()
        assert not case["opened"] and "<mm:think>" in body and not body.startswith("<mm:think>"), case
    assert differing < len(_data()["cases"]) // 5


def _sglang_view(value: Any) -> Any:
    """What SGLang 0.5.23 makes of a value we read back exactly (M3-2, M3-3): it strips each piece between namespace
    tokens, so a string leaf loses its trailing whitespace, and it turns an integral float (``2.0``) into an int."""
    if isinstance(value, dict):
        return {k: _sglang_view(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sglang_view(v) for v in value]
    if isinstance(value, str):
        return value.rstrip()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def test_tool_calls_agree_with_sglang_on_the_templates_blocks_modulo_the_documented_differences():
    data = _data()
    specs = ToolSpecs.from_openai(data["tools"])
    clean = [case for case in data["tool_cases"] if case["kind"] == "clean"]
    assert len(clean) >= 150
    for case in clean:
        message = parse_local(case["text"], TOOLS_ONLY, specs, session_id="s", step_index=0)
        assert not message.flags, case
        ours = [(c.name, _sglang_view(json.loads(c.arguments_json))) for c in message.tool_calls]
        assert ours == [(c["name"], c["arguments"]) for c in case["calls"]], case
        assert message.content == case["normal_text"].strip(), case


def test_streaming_equals_non_streaming():
    data = _data()
    specs = ToolSpecs.from_openai(data["tools"])
    rng = random.Random(7)
    texts = [case["output"] for case in data["cases"]] + [case["text"] for case in data["tool_cases"]]
    texts += ["</mm:think", "</mm:thinkX", "  </mm:think>  a", "r</mm:think>a" + NS + "<tool_call>\n" + NS,
              "x" + NS + "</tool_call>", NS + "<tool_call>junk" + NS + "</tool_call>t"]
    for text in texts:
        for open_at_start in (False, True):
            expected = parse_local(text, CALLS, specs, session_id="s", step_index=1,
                                   reasoning_open_at_start=open_at_start)
            parser = StreamingMessageParser(CALLS, specs, "s", 1, reasoning_open_at_start=open_at_start)
            assert _streamed(parser, text, rng) == expected, (text, open_at_start)


@pytest.mark.parametrize(
    "block, flag",
    [
        (f'{NS}<tool_call>\n{NS}<invoke name="nope">{NS}</invoke>\n{NS}</tool_call>', "unknown_tool"),
        (f'{NS}<tool_call>\ntext{NS}<invoke name="ping">{NS}</invoke>\n{NS}</tool_call>', "malformed_tool_call"),
        (f'{NS}<tool_call>\n{NS}<invoke name="free">{NS}<a>1{NS}</b>{NS}</invoke>\n{NS}</tool_call>',
         "malformed_tool_call"),
        (f'{NS}<tool_call>\n{NS}<invoke name="free">{NS}<a>x{NS}<b>1{NS}</b>{NS}</a>{NS}</invoke>\n{NS}</tool_call>',
         "malformed_tool_call"),
        (f'{NS}<tool_call>\n{NS}<invoke name="free">{NS}<a>1{NS}</a>{NS}<a>2{NS}</a>{NS}</invoke>\n{NS}</tool_call>',
         "malformed_tool_call"),
        (f'{NS}<tool_call>\n{NS}<invoke name="free">{NS}<a>1{NS}</invoke>\n{NS}</tool_call>', "malformed_tool_call"),
        (f"{NS}<tool_call>\n{NS}</tool_call>", "malformed_tool_call"),
    ],
)
def test_rejected_blocks_stay_content_and_are_flagged(block, flag):
    specs = ToolSpecs.from_openai(_data()["tools"])
    message = parse_local("ok" + block, TOOLS_ONLY, specs, session_id="s", step_index=0)
    assert not message.tool_calls and flag in message.flags and block in message.content


@pytest.fixture(scope="module")
def m3_tito(tokenizer_root):
    return load_tito_tokenizer("minimax_m3", model_tokenizer_path("minimax-m3", tokenizer_root))


def _turn(message: dict, tito, kwargs: dict) -> str:
    generated = tito.render_assistant(message, kwargs)
    assert generated.endswith("[e~[")
    return generated[: -len("[e~[")]


@pytest.mark.parametrize("mode", ["enabled", "disabled", "adaptive", None])
def test_the_templates_own_turns_parse_back_to_the_message(m3_tito, mode):
    """What the model generates for a turn (the official template's rendering after the prompt of each
    ``thinking_mode``) parses back to its reasoning, content and calls, typed by the tools' schemas."""
    data = _data()
    specs = ToolSpecs.from_openai(data["tools"])
    kwargs = {} if mode is None else {"thinking_mode": mode}
    opened = CALLS.think.prompt_opens(m3_tito.thinking_prefix(kwargs))
    arguments = {"city": " Paris 中文 ", "days": 3, "exact": False, "x": 2.0,
                 "opts": {"unit": "c", "hours": [1, 2]}, "tags": ["a", "b c"], "points": [{"x": 0.5, "label": "p"}]}
    calls = [{"type": "function", "function": {"name": "get_weather", "arguments": arguments}},
             {"type": "function", "function": {"name": "ping", "arguments": {}}},
             {"type": "function", "function": {"name": "free", "arguments": {"k": {"a": ["x", True]}}}}]
    reasonings = (None,) if mode == "disabled" else ("Think first.", "multi\nline", None)
    for reasoning in reasonings:
        for content, tool_calls in (("Answer 中文 🦜", None), ("Let me check.", calls), ("", calls[1:])):
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if reasoning is not None:
                message["reasoning_content"] = reasoning
            if tool_calls:
                message["tool_calls"] = tool_calls
            text = _turn(message, m3_tito, kwargs)
            parsed = parse_local(text, CALLS, specs, session_id="s", step_index=0, reasoning_open_at_start=opened)
            assert not parsed.flags, text
            assert (parsed.reasoning_content, parsed.content) == (reasoning, content), text
            expected = [(c["function"]["name"], c["function"]["arguments"]) for c in tool_calls or ()]
            assert [(c.name, json.loads(c.arguments_json)) for c in parsed.tool_calls] == expected, text


def test_what_we_parse_re_renders_to_the_generated_text(m3_tito):
    """Every block of the recorded outputs that the local parser accepts (including values the schema does not
    type, numbers Python would write otherwise, nested untyped containers) re-renders, through the official
    template, to exactly the text the model generated, so the echoed message keeps the trajectory one segment."""
    data = _data()
    specs = ToolSpecs.from_openai(data["tools"])
    accepted = 0
    for case in data["tool_cases"]:
        text = "</mm:think>" + case["text"]
        parsed = parse_local(text, CALLS, specs, session_id="s", step_index=0)
        if not parsed.tool_calls:
            continue
        accepted += 1
        message = {"role": "assistant", "content": parsed.content, "tool_calls": [
            {"type": "function", "function": {"name": c.name, "arguments": json.loads(c.arguments_json)}}
            for c in parsed.tool_calls]}
        assert _turn(message, m3_tito, {}) == text, case
    assert accepted >= 250


class EngineParsers:
    """SGLang's answers, from the embedded engine's ``minimax-m3`` parsers (held equal to SGLang 0.5.23's recorded
    answers above), in process: what the ``sglang_api`` and ``hybrid`` backends are given."""

    async def parse_function_call(self, text: str, parser: str, tools: Any) -> FunctionCallParse:
        normal, calls = parse_function_call(text, parser, list(tools))
        return FunctionCallParse.from_json({"normal_text": normal, "calls": [c.to_json() for c in calls]})

    async def separate_reasoning(self, text: str, parser: str) -> ReasoningParse:
        return ReasoningParse.from_json(separate_reasoning(text, parser).to_json(False))


@pytest.mark.parametrize("backend", ["sglang_api", "hybrid"])
async def test_the_sglang_backends_keep_the_local_message_unless_sglang_differs_and_then_flag_it(backend):
    """Streamed or not, every recorded output: the local message where SGLang agrees (most clean outputs), else
    SGLang's decision flagged ``parser_mismatch`` (the documented differences M3-1..M3-3)."""
    data = _data()
    parser = MessageParser(ParserConfig("minimax-m3", "minimax-m3", backend, backend), client=EngineParsers())
    cases = [(c["output"], c["opened"]) for c in data["cases"]]
    cases += [(("Think." if i % 2 else "") + "</mm:think>" + c["text"], True)
              for i, c in enumerate(data["tool_cases"]) if c["kind"] == "clean"]
    agreed = 0
    for text, opened in cases:
        local = parse_local(text, CALLS, ToolSpecs.from_openai(data["tools"]), session_id="s", step_index=0,
                            reasoning_open_at_start=opened)
        final = await parser.parse_final(text, data["tools"], session_id="s", step_index=0,
                                         reasoning_open_at_start=opened)
        differs = (final.content, final.reasoning_content, final.tool_calls) != (
            local.content, local.reasoning_content, local.tool_calls)
        assert ("parser_mismatch" in final.flags) == differs, text
        agreed += not differs
        # streaming splits reasoning locally and asks SGLang about the blocks: the calls are the non-streamed ones
        stream = parser.stream(data["tools"], session_id="s", step_index=0, reasoning_open_at_start=opened)
        stream.feed(text)
        await stream.finish()
        assert stream.message.tool_calls == final.tool_calls, text
        assert ("parser_mismatch" in stream.message.flags) == (stream.message.tool_calls != local.tool_calls), text
    assert len(cases) > 500 and agreed >= len(cases) * 3 // 4
