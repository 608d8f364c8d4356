"""MiniMax-M2 reasoning (``minimax``): SGLang 0.5.23 maps it to ``Qwen3Detector`` forced open (the generation prompt
``]~b]ai\\n<think>\\n`` already opened the block). Checked against SGLang's own parser's recorded answers
(``fixtures/sglang_minimax_0_5_23.json``, made by ``fixtures/generate_minimax_fixtures.py``), streaming against
non-streaming, and against the official template's own rendering of assistant turns."""

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


def test_streaming_equals_non_streaming():
    rng = random.Random(5)
    for case in _cases():
        text = case["text"]
        expected = parse_local(text, FMT, NO_TOOLS, session_id="s", step_index=1)
        parser = StreamingMessageParser(FMT, NO_TOOLS, "s", 1)
        pos = 0
        while pos < len(text):
            step = rng.randint(1, 7)
            parser.feed(text[pos : pos + step])
            pos += step
        parser.finish()
        assert parser.message == expected, case


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
