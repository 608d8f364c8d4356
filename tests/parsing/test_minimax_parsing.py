"""MiniMax-M2 reasoning (``minimax``) and tool calls (``minimax-m2``). Reasoning: SGLang 0.5.23 maps it to ``Qwen3Detector`` forced open (the generation prompt
``]~b]ai\\n<think>\\n`` already opened the block). Checked against SGLang's own parser's recorded answers
(``fixtures/sglang_minimax_0_5_23.json``, made by ``fixtures/generate_minimax_fixtures.py``), streaming against
non-streaming, and against the official template's own rendering of assistant turns. Tool calls: the same calls as
SGLang's ``MinimaxM2Detector`` on blocks written as the template writes them, streaming == non-streaming, rejected
blocks kept as content, and the template's own tool turns parsed back."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from engine.parsers import separate_reasoning
from proxy.families import get_family, load_tito_tokenizer
from proxy.parsing import MessageFormat, StreamingMessageParser, ToolSpecs, parse_local
from serving.tokenizer_files import model_tokenizer_path

FIXTURE = Path(__file__).parent / "fixtures" / "sglang_minimax_0_5_23.json"
FMT = MessageFormat.from_types(None, "minimax")
NO_TOOLS = ToolSpecs.from_openai(None)


def _cases() -> list[dict[str, str]]:
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert (data["sglang"], data["parser"]) == ("0.5.23", "minimax")
    return data["cases"]


def test_the_family_names_sglangs_parser_and_the_proxy_knows_it():
    family = get_family("minimax_m2")
    assert family.reasoning_parser == "minimax"
    assert FMT.reasoning and FMT.reasoning_forced_open  # every output starts inside the reasoning


def test_the_engine_answers_separate_reasoning_as_sglang_0_5_23_does():
    for case in _cases():
        result = separate_reasoning(case["text"], "minimax")
        assert (result.reasoning_text, result.text) == (case["reasoning_text"], case["text_out"]), case


def test_local_parse_agrees_with_sglang_modulo_the_documented_whitespace():
    """docs/parsing.md, local rule 1: leading whitespace of the reasoning is dropped (trailing kept when closed by
    ``</think>``, dropped otherwise), content is stripped; SGLang keeps all whitespace."""
    for case in _cases():
        message = parse_local(case["text"], FMT, NO_TOOLS, session_id="s", step_index=0)
        closed = "</think>" in case["text"]
        reasoning = case["reasoning_text"].lstrip() if closed else case["reasoning_text"].strip()
        assert message.reasoning_content == (reasoning or None), case
        assert message.content == case["text_out"].strip(), case


def _streamed(parser: StreamingMessageParser, text: str, rng: random.Random):
    """The message of ``text`` fed to ``parser`` in random pieces of 1-9 characters."""
    pos = 0
    while pos < len(text):
        step = rng.randint(1, 9)
        parser.feed(text[pos : pos + step])
        pos += step
    parser.finish()
    return parser.message


def test_streaming_equals_non_streaming():
    rng = random.Random(5)
    for case in _cases():
        expected = parse_local(case["text"], FMT, NO_TOOLS, session_id="s", step_index=1)
        assert _streamed(StreamingMessageParser(FMT, NO_TOOLS, "s", 1), case["text"], rng) == expected, case


def test_the_templates_own_turns_parse_back_to_the_message(tokenizer_root):
    """What the model generates for a turn (the official template's rendering after the prompt) parses back to
    its reasoning and content."""
    tito = load_tito_tokenizer("minimax_m2", model_tokenizer_path("minimax", tokenizer_root))
    for reasoning, content in (("Think first.", "Answer."), ("multi\nline", "中文 🦜"), (None, "no reasoning")):
        message = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        generated = tito.render_assistant(message)
        assert generated.endswith("[e~[")
        parsed = parse_local(generated[: -len("[e~[")], FMT, NO_TOOLS, session_id="s", step_index=0)
        assert (parsed.reasoning_content, parsed.content) == ((reasoning + "\n") if reasoning else None, content)


# -- tool calls (minimax-m2) ----------------------------------------------------------------------------------------

CALLS = MessageFormat.from_types("minimax-m2", "minimax")


def _tool_cases() -> tuple[ToolSpecs, list[dict]]:
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert data["tool_parser"] == "minimax-m2"
    return ToolSpecs.from_openai(data["tools"]), data["tool_cases"]


def test_tool_calls_agree_with_sglang_0_5_23_on_the_templates_blocks():
    """Blocks written as the official template renders calls (values fitting the schema): the same calls, names and
    arguments, and the same text before them (stripped), as SGLang 0.5.23's MinimaxM2Detector recorded."""
    specs, cases = _tool_cases()
    for case in cases:
        message = parse_local(case["text"], MessageFormat.from_types("minimax-m2", None), specs, session_id="s",
                              step_index=0)
        assert not message.flags, case
        assert [(c.name, json.loads(c.arguments_json)) for c in message.tool_calls] == [
            (c["name"], c["arguments"]) for c in case["calls"]], case
        assert message.content == case["normal_text"].strip(), case


def test_tool_call_streaming_equals_non_streaming():
    specs, cases = _tool_cases()
    rng = random.Random(11)
    texts = [case["text"] for case in cases]
    texts += ["x\n</think>\n\ny</minimax:tool_call>", 'r</think>a<minimax:tool_call>\n<invoke name="get_weather">',
              "r</think><minimax:tool_call>junk</minimax:tool_call>t"]
    for text in texts:
        for open_at_start in (False, True):
            expected = parse_local(text, CALLS, specs, session_id="s", step_index=1,
                                   reasoning_open_at_start=open_at_start)
            parser = StreamingMessageParser(CALLS, specs, "s", 1, reasoning_open_at_start=open_at_start)
            assert _streamed(parser, text, rng) == expected, text


@pytest.mark.parametrize(
    "block, flag",
    [
        ('<minimax:tool_call>\n<invoke name="nope">\n</invoke>\n</minimax:tool_call>', "unknown_tool"),
        ('<minimax:tool_call>\ntext<invoke name="ping">\n</invoke>\n</minimax:tool_call>', "malformed_tool_call"),
        ('<minimax:tool_call>\n<invoke name="ping">\n<parameter name="a">1</invoke>\n</minimax:tool_call>',
         "malformed_tool_call"),
        ("<minimax:tool_call>\n</minimax:tool_call>", "malformed_tool_call"),
    ],
)
def test_rejected_blocks_stay_content_and_are_flagged(block, flag):
    specs, _ = _tool_cases()
    no_reasoning = MessageFormat.from_types("minimax-m2", None)  # "minimax" would read "ok..." as reasoning
    message = parse_local("ok" + block, no_reasoning, specs, session_id="s", step_index=0)
    assert not message.tool_calls and flag in message.flags and block in message.content


def test_the_templates_own_tool_turns_parse_back_to_the_calls(tokenizer_root):
    """The model's generation for a tool-calling turn (the official template's rendering) parses back to the
    message: reasoning, content and the calls with their arguments (typed by the tools' schemas)."""
    specs, _ = _tool_cases()
    tito = load_tito_tokenizer("minimax_m2", model_tokenizer_path("minimax", tokenizer_root))
    calls = [
        {"type": "function", "function": {"name": "get_weather", "arguments": {
            "city": "Paris 中文", "days": 3, "exact": False, "opts": {"a": [1, None]}, "items": ["x"], "x": 2.5}}},
        {"type": "function", "function": {"name": "ping", "arguments": {}}},
    ]
    message = {"role": "assistant", "content": "Checking.", "reasoning_content": "two calls", "tool_calls": calls}
    generated = tito.render_assistant(message)
    parsed = parse_local(generated[: -len("[e~[")], CALLS, specs, session_id="s", step_index=0)
    assert (parsed.reasoning_content, parsed.content, parsed.flags) == ("two calls\n", "Checking.", frozenset())
    assert [(c.name, json.loads(c.arguments_json)) for c in parsed.tool_calls] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in calls]


def test_the_engine_answers_parse_function_call_as_sglang_0_5_23_does():
    """The embedded engine's ``minimax-m2`` (what the ``sglang_api`` and ``hybrid`` backends ask) gives SGLang's
    recorded normal text and calls, byte for byte."""
    from engine.parsers import parse_function_call

    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    for case in data["tool_cases"]:
        normal, calls = parse_function_call(case["text"], "minimax-m2", data["tools"])
        assert normal == case["normal_text"], case
        assert [(c.name, json.loads(c.parameters)) for c in calls] == [
            (c["name"], c["arguments"]) for c in case["calls"]], case
