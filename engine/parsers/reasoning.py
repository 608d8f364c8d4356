"""Non-streaming reasoning separation for ``/separate_reasoning``, as SGLang 0.5.23 does it (sglang-protocol.md
§5.2; ``parser/reasoning_parser.py`` of that release: ``BaseReasoningFormatDetector.detect_and_parse``,
``Qwen3Detector``, ``DeepSeekR1Detector``, ``ReasoningParser``).

Written from the behaviour of those classes, and checked case by case against what they return
(``tests/parsing/fixtures/sglang_0_5_23.jsonl.gz``, ``tests/engine/test_parser_fixtures.py``).

* Reasoning is open when the parser forces it (``qwen3-thinking``, ``deepseek-r1``) or ``<think>`` occurs
  **anywhere** in the text; otherwise the whole text is normal text.
* Then only **leading** ``<think>`` markers are removed (as many as there are in a row); a ``<think>`` after any
  other character, whitespace included, stays in the text.
* If ``</think>`` follows, the reasoning is what precedes the first one and the normal text what follows it.
* Otherwise (``qwen3`` family only) a ``<tool_call>`` anywhere ends the reasoning and starts the normal text
  (the Qwen3.5 quirk); with no ``<tool_call>`` either, everything is reasoning.
* Nothing is stripped: whitespace around the markers stays in the reasoning and the normal text.

The parser name is looked up lower-cased (``Qwen3`` works); an unknown name makes SGLang raise (a 500).
"""

from __future__ import annotations

import attrs

from .function_call import ParserCrash, check_encodable

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"


@attrs.frozen
class _Detector:
    forced: bool
    """The text starts inside reasoning (``force_reasoning``)."""
    tool_start: str | None
    """The marker that ends unterminated reasoning (``tool_start_token``)."""
    start: str = THINK_START
    end: str = THINK_END
    drops_leading_end: bool = False
    """``MiniMaxM3Detector``: outside forced reasoning, a text that starts (after whitespace) with the end marker
    loses its leading whitespace and that marker first."""


_QWEN3 = _Detector(forced=False, tool_start=TOOL_CALL_START)

#: Parser name -> detector (``ReasoningParser.DetectorMap``; the Qwen3 and DeepSeek-R1 detectors only).
REASONING_PARSERS: dict[str, _Detector] = {
    "qwen3": _QWEN3,
    "qwen3-thinking": attrs.evolve(_QWEN3, forced=True),
    "deepseek-r1": _Detector(forced=True, tool_start=None),
    # Glm45Detector: the same markers and <tool_call> close as Qwen3 (its extra excluded tokens only matter when
    # streaming)
    "glm45": _QWEN3,
    # MiniMax-M2: SGLang maps "minimax" to Qwen3Detector and forces reasoning open (the prompt ends "<think>\n")
    "minimax": attrs.evolve(_QWEN3, forced=True),
    # DeepSeek-V3.1 / V3.2: _DeepSeekV3Detector is Qwen3Detector (its "explicit_thinking" default only matters in the
    # chat route, not here); DeepSeek-V4: the same markers, not forced, no tool-call end
    "deepseek-v3": _QWEN3,
    "deepseek-v4": _Detector(forced=False, tool_start=None),
    # MiniMax-M3 (MiniMaxM3Detector): <mm:think>...</mm:think>, no tool-call close; not forced here (the endpoint
    # sees no chat_template_kwargs, which alone force it for thinking_mode=enabled)
    "minimax-m3": _Detector(forced=False, tool_start=None, start="<mm:think>", end="</mm:think>",
                            drops_leading_end=True),
}


@attrs.frozen
class ReasoningResult:
    reasoning_text: str
    text: str

    def to_json(self, return_blocks: bool) -> dict[str, object]:
        body: dict[str, object] = {"reasoning_text": self.reasoning_text, "text": self.text}
        if return_blocks:
            # ``parse_non_stream_blocks``: the reasoning block when there is reasoning, then always a text block.
            reasoning_blocks = [self.reasoning_text] if self.reasoning_text else []
            body["reasoning_blocks"] = reasoning_blocks
            body["text_blocks"] = [self.text]
            body["blocks"] = [{"type": "reasoning", "text": t} for t in reasoning_blocks] + [
                {"type": "text", "text": self.text}]
        return body


def separate_reasoning(text: str, parser: str) -> ReasoningResult:
    """Split ``text`` into reasoning and normal text. An unknown parser, or a text with lone surrogates (SGLang's
    orjson cannot write them back), raises :class:`ParserCrash`."""
    detector = REASONING_PARSERS.get(parser.lower())
    if detector is None:
        raise ParserCrash(f"Unsupported model type: {parser}")
    check_encodable(text)
    start, end_marker = detector.start, detector.end
    if detector.drops_leading_end and not detector.forced and text.lstrip().startswith(end_marker):
        text = text.lstrip()[len(end_marker) :]
    if not (detector.forced or start in text):
        return ReasoningResult("", text)
    body = text
    while body.startswith(start):
        body = body[len(start) :]
    end = body.find(end_marker)
    if end != -1:
        return ReasoningResult(body[:end], body[end + len(end_marker) :])
    tool = body.find(detector.tool_start) if detector.tool_start else -1
    if tool != -1:
        return ReasoningResult(body[:tool], body[tool:])
    return ReasoningResult(body, "")
