"""DeepSeek parsing (V3.1 ``deepseekv31``, V3.2 ``deepseekv32``, V4 ``deepseekv4``; reasoning ``deepseek-v3`` /
``deepseek-v4`` / ``deepseek-r1``) against SGLang 0.5.23's own DeepSeek parsers, recorded
(``fixtures/sglang_deepseek_0_5_23.jsonl.gz``, made by ``fixtures/generate_deepseek_fixtures.py``), and against V4's
official encoder (its renderer and its own output parser, ``encoding_dsv4.py`` in the tokenizer folder).

1. The embedded engine's DeepSeek parsers answer every recorded request exactly as SGLang did.
2. Every clean output parses locally to the message SGLang's answers give, modulo the documented choices
   (docs/parsing.md, "DeepSeek": whitespace, and DSML string values SGLang strips).
3. With SGLang's recorded answers, ``hybrid`` and ``sglang_api`` give the local message, streamed or not.
4. Streaming equals non-streaming for any cut, tricky outputs included.
5. V4's encoder renders a turn; the local parser reads it back to the message, and agrees with the encoder's own
   ``parse_message_from_completion_text``.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path
from typing import Any

import pytest

from proxy.parsing import MessageFormat, MessageParser, ParserConfig, StreamingMessageParser, ToolSpecs, parse_local
from proxy.parsing.tool_blocks import decide_block
from serving.tokenizer_files import model_tokenizer_path

from .sglang_fixtures import RecordedFamily, engine_answer, load_family

FIXTURES = Path(__file__).with_name("fixtures") / "sglang_deepseek_0_5_23.jsonl.gz"
IDS = {"session_id": "s", "step_index": 3}
REASONING = {"deepseekv31": "deepseek-v3", "deepseekv32": "deepseek-v3", "deepseekv4": "deepseek-v4"}


META, OUTPUTS, CASES = load_family(FIXTURES)
TOOLS = META["tools"]
SPECS = ToolSpecs.from_openai(TOOLS)


def config(output: dict[str, Any], backend: str = "local") -> ParserConfig:
    return ParserConfig(tool_call_type=output["parser"], reasoning_type=REASONING[output["parser"]],
                        tool_call_backend=backend, reasoning_backend=backend)  # type: ignore[arg-type]


def test_the_fixtures_cover_every_format() -> None:
    clean = [o for o in OUTPUTS if o["kind"] == "clean"]
    assert len(clean) >= 900 and {o["parser"] for o in clean} == set(REASONING)
    assert sum(bool(o["blocks"]) for o in clean) >= 600


def test_the_engine_parsers_answer_exactly_as_sglang_0_5_23() -> None:
    for case in CASES:
        got, expected = engine_answer(case, OUTPUTS, TOOLS), case["expected"]
        assert ("error" in got) if "error" in expected else got == expected, case


def _same_value(local: Any, sglang: Any) -> bool:
    """Equal, or the documented difference: SGLang strips a DSML string value."""
    return local == sglang or (isinstance(local, str) and local.strip() == sglang)


def test_clean_outputs_parse_locally_as_sglang_parses_them() -> None:
    answers = {(c["tool_call_parser"], c["text"]): c["expected"] for c in CASES if c["case"] == "fc"}
    reasoning = {c["output"]: c["expected"] for c in CASES
                 if c["case"] == "sr" and c["reasoning_parser"] == REASONING[OUTPUTS[c["output"]]["parser"]]}
    differences = 0
    for output in OUTPUTS:
        if output["kind"] != "clean":
            continue
        fmt = config(output).message_format
        message = parse_local(output["text"], fmt, SPECS, reasoning_open_at_start=output["open_at_start"], **IDS)
        assert not message.flags, output
        split = reasoning[output["output"]]
        assert (message.reasoning_content or "") == split["reasoning_text"].lstrip(), output
        rest = split["text"]
        for block in output["blocks"]:
            rest = rest.replace(block, "")
        assert message.content == rest.strip(), output
        calls = []
        for block in output["blocks"]:
            assert fmt.tool_call is not None and decide_block(block, fmt.tool_call, SPECS).accepted
            calls += answers[output["parser"], block]["calls"]
        assert [c.name for c in message.tool_calls] == [c["name"] for c in calls], output
        for mine, theirs in zip(message.tool_calls, calls, strict=True):
            local, sglang = json.loads(mine.arguments_json), json.loads(theirs["parameters"])
            assert local.keys() == sglang.keys() and all(_same_value(local[k], sglang[k]) for k in local), output
            differences += local != sglang
    assert differences > 0  # the documented difference occurs, so the comparison above is not vacuous


def _cuts(text: str, rng: random.Random) -> list[str]:
    points = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 12))))
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@pytest.mark.parametrize("backend", ["hybrid", "sglang_api"])
async def test_sglang_backends_give_the_local_message_on_clean_outputs(backend: str) -> None:
    rng = random.Random(5)
    checked = 0
    recorded = RecordedFamily(TOOLS, OUTPUTS, CASES)
    for output in OUTPUTS[::3]:  # a third keeps this to seconds; the local test above reads them all
        if output["kind"] != "clean":
            continue
        cfg = config(output, backend)
        fmt = cfg.message_format
        assert fmt.tool_call is not None
        expected = parse_local(output["text"], fmt, SPECS, reasoning_open_at_start=output["open_at_start"], **IDS)
        stripped = any(  # the documented difference: SGLang's decision is used and the step is flagged
            [json.loads(c["parameters"]) for c in recorded.fc[output["parser"], b]["calls"]]
            != [json.loads(a) for _, a in decide_block(b, fmt.tool_call, SPECS).calls] for b in output["blocks"])
        parser = MessageParser(cfg, recorded)
        final = await parser.parse_final(output["text"], TOOLS, reasoning_open_at_start=output["open_at_start"], **IDS)
        if stripped:
            assert "parser_mismatch" in final.flags
            continue
        assert final == expected, output
        stream = parser.stream(TOOLS, reasoning_open_at_start=output["open_at_start"], **IDS)
        for piece in _cuts(output["text"], rng):
            stream.feed(piece)
        await stream.finish()
        assert stream.message == final, output
        checked += 1
    assert checked >= 150


def test_streaming_equals_non_streaming_on_every_output() -> None:
    rng = random.Random(11)
    for output in OUTPUTS:
        fmt = config(output).message_format
        for open_at_start in (False, True):
            expected = parse_local(output["text"], fmt, SPECS, reasoning_open_at_start=open_at_start, **IDS)
            parser = StreamingMessageParser(fmt, SPECS, "s", 3, reasoning_open_at_start=open_at_start)
            for piece in _cuts(output["text"], rng):
                parser.feed(piece)
            parser.finish()
            assert parser.message == expected, output


V31 = MessageFormat.from_types("deepseekv31", None)
V4 = MessageFormat.from_types("deepseekv4", None)
_D = "｜DSML｜"


@pytest.mark.parametrize(
    "fmt, block, flag",
    [
        (V31, '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>nope<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
         "unknown_tool"),
        (V31, '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>calc<｜tool▁sep｜>[1]<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
         "malformed_tool_call"),
        (V31, '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>calc<｜tool▁sep｜>{"x": NaN}<｜tool▁call▁end｜>'
              '<｜tool▁calls▁end｜>', "malformed_tool_call"),
        (V31, "<｜tool▁calls▁begin｜><｜tool▁calls▁end｜>", "malformed_tool_call"),
        (V4, f'<{_D}tool_calls>\n<{_D}invoke name="calc">\n<{_D}parameter name="x" string="false">no</{_D}parameter>'
             f'\n</{_D}invoke>\n</{_D}tool_calls>', "malformed_tool_call"),
        (V4, f'<{_D}tool_calls>\n<{_D}invoke name="calc">\n<{_D}parameter name="x">1</{_D}parameter>'
             f'\n</{_D}invoke>\n</{_D}tool_calls>', "malformed_tool_call"),
        (V4, f'<{_D}tool_calls>\n<{_D}invoke name="calc">\n<{_D}parameter name="x" string="false">1</{_D}parameter>'
             f'<{_D}parameter name="x" string="false">2</{_D}parameter>\n</{_D}invoke>\n</{_D}tool_calls>',
         "malformed_tool_call"),
        (V4, f'<{_D}tool_calls>\n<{_D}invoke name="no_params"/>\n</{_D}tool_calls>', "malformed_tool_call"),
        (V4, f'<{_D}tool_calls>\n<{_D}invoke name="nope">\n\n</{_D}invoke>\n</{_D}tool_calls>', "unknown_tool"),
    ],
)
def test_rejected_blocks_stay_content_and_are_flagged(fmt: MessageFormat, block: str, flag: str) -> None:
    message = parse_local("ok" + block, fmt, SPECS, **IDS)
    assert not message.tool_calls and flag in message.flags and block in message.content


# -- V4's official encoder ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def encoder(tokenizer_root: Path) -> Any:
    path = model_tokenizer_path("deepseek-v4", tokenizer_root) / "encoding_dsv4.py"
    if not path.is_file():
        pytest.skip(f"DeepSeek-V4's official encoder is not in the tokenizer cache ({path}): run ./dev setup")
    spec = importlib.util.spec_from_file_location("encoding_dsv4", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_v4_turns_rendered_by_the_official_encoder_parse_back(encoder: Any) -> None:
    """The encoder renders an assistant turn (what the model generates after ``<｜Assistant｜><think>``); the local
    parser gives back its reasoning, content and calls, and the encoder's own output parser agrees."""
    fmt = MessageFormat.from_types("deepseekv4", "deepseek-v4")
    calls = [
        {"type": "function", "function": {"name": "get_weather", "arguments": json.dumps(
            {"city": "Paris 中文 🦜", "days": 3, "unit": "c"}, ensure_ascii=False)}},
        {"type": "function", "function": {"name": "calc", "arguments": json.dumps(
            {"x": 2.5, "exact": False, "opts": {"a": [1, None]}, "items": ["x"]})}},
        {"type": "function", "function": {"name": "no_params", "arguments": "{}"}},
    ]
    for reasoning, content, tool_calls in (("Think.", "Checking.", calls), ("multi\nline", "Done 中文", []),
                                           ("r", "", calls[:1])):
        message = {"role": "assistant", "content": content, "reasoning_content": reasoning, "tool_calls": tool_calls}
        messages = [{"role": "user", "content": "q"}, message]
        prompt = encoder.encode_messages(messages[:1], thinking_mode="thinking")
        full = encoder.encode_messages(messages, thinking_mode="thinking")
        assert full.startswith(prompt) and prompt.endswith("<｜Assistant｜><think>")
        generated = full[len(prompt) :]
        parsed = parse_local(generated.removesuffix("<｜end▁of▁sentence｜>"), fmt, SPECS, reasoning_open_at_start=True,
                             **IDS)
        assert (parsed.reasoning_content, parsed.content, parsed.flags) == (reasoning, content, frozenset())
        official = encoder.parse_message_from_completion_text(generated, thinking_mode="thinking")
        assert [(c.name, json.loads(c.arguments_json)) for c in parsed.tool_calls] == [
            (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in official["tool_calls"]]
        assert [c.name for c in parsed.tool_calls] == [c["function"]["name"] for c in tool_calls]
        assert (official["reasoning_content"], official["content"]) == (reasoning, content)
