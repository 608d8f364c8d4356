"""Non-streaming reasoning separation for ``/separate_reasoning`` (sglang-protocol.md §5.2).

``Qwen3Detector`` semantics: markers ``<think>`` / ``</think>``. Without ``<think>`` in the text the whole text is
normal unless the parser forces reasoning (``qwen3-thinking``, ``deepseek-r1``). Inside reasoning, a
``<tool_call>`` before ``</think>`` closes the reasoning implicitly (the Qwen3.5 quirk). An unterminated block is
all reasoning.
"""

from __future__ import annotations

import attrs

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"

#: Parser name -> whether reasoning is forced (the text starts inside a think block).
REASONING_PARSERS = {"qwen3": False, "qwen3-thinking": True, "deepseek-r1": True}


@attrs.frozen
class ReasoningResult:
    reasoning_text: str
    text: str

    def to_json(self, return_blocks: bool) -> dict[str, object]:
        body: dict[str, object] = {"reasoning_text": self.reasoning_text, "text": self.text}
        if return_blocks:
            reasoning_blocks = [self.reasoning_text] if self.reasoning_text else []
            text_blocks = [self.text] if self.text else []
            body["reasoning_blocks"] = reasoning_blocks
            body["text_blocks"] = text_blocks
            body["blocks"] = [{"type": "reasoning", "text": t} for t in reasoning_blocks] + [
                {"type": "text", "text": t} for t in text_blocks
            ]
        return body


def separate_reasoning(text: str, parser: str) -> ReasoningResult:
    """Split ``text`` into reasoning and normal text. Unknown parser: ``ValueError``."""
    if parser not in REASONING_PARSERS:
        raise ValueError(f"Unsupported reasoning parser: {parser!r}; supported: {', '.join(REASONING_PARSERS)}")
    in_reasoning = REASONING_PARSERS[parser] or THINK_START in text
    if not in_reasoning:
        return ReasoningResult("", text)
    processed = text.replace(THINK_START, "").strip()
    end = processed.find(THINK_END)
    tool = processed.find(TOOL_CALL_START)
    if tool != -1 and (end == -1 or tool < end):
        return ReasoningResult(processed[:tool].strip(), processed[tool:].strip())
    if end == -1:
        return ReasoningResult(processed, "")
    return ReasoningResult(processed[:end], processed[end + len(THINK_END) :].strip())
