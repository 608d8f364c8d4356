"""The local parser, non-streaming: the reference meaning of a model output.

Pure and synchronous. ``parse_local`` is the whole local parse; its pieces are reused by the backend-aware parser
(``parser.py``), which may let SGLang decide the reasoning split and the blocks instead. The streaming parser
(``streaming.py``) is a separate, incremental implementation that must produce exactly the same message; the
tests hold it to that.

The meaning, step by step:

1. Reasoning (when a reasoning type is set). Reasoning is open if the prompt left it open
   (``reasoning_open_at_start``) or the output starts, after optional whitespace, with ``<think>`` (a leading
   ``<think>`` is consumed in both cases). It ends at the first ``</think>``, or at the first ``<tool_call>``
   (the Qwen3.5 quirk; the ``<tool_call>`` then belongs to the answer), or at the end of the text. Leading
   whitespace of the reasoning is dropped; trailing whitespace is dropped too unless the reasoning was closed by
   ``</think>``. A ``<think>`` anywhere else is ordinary text. SGLang 0.5.23 differs on purpose in three ways
   (docs/parsing.md, "Local and SGLang 0.5.23"): it keeps all whitespace, it opens reasoning at a ``<think>``
   anywhere (removing only leading ones), and a ``<tool_call>`` ends its reasoning only when no ``</think>``
   follows.
2. Tool calls (when a tool-call type is set): the rest is cut into text and blocks; a block runs from
   ``<tool_call>`` to the first ``</tool_call>``, or to the end of the text (then it is "open"). Each block is
   decided by :func:`~proxy.parsing.tool_blocks.decide_block` (or by SGLang, see ``parser.py``).
3. Content is the text pieces and the rejected blocks, in order, joined and stripped at both ends. For a
   well-formed output this is SGLang's ``normal_text`` (the text before the first call) without its surrounding
   whitespace; unlike SGLang we keep text that follows a call, and keep rejected markup, instead of dropping them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

import attrs

from proxy.parsing.formats import (
    QWEN_THINK,
    TOOL_CALL_END,
    TOOL_CALL_START,
    MessageFormat,
    ThinkMarkers,
    ToolSpecs,
)
from proxy.parsing.parsed import ParsedMessage, ParseFlag, ToolCall
from proxy.parsing.tool_blocks import MALFORMED, BlockDecision, decide_block
from proxy.parsing.tool_call_ids import tool_call_id


class ReasoningEnd(enum.Enum):
    """What closed the reasoning."""

    THINK_END = "think_end"
    """``</think>``: trailing whitespace of the reasoning is kept."""
    TOOL_CALL = "tool_call"
    """``<tool_call>`` before any ``</think>`` (the Qwen3.5 quirk): trailing whitespace is dropped."""
    END_OF_TEXT = "end_of_text"
    """The output ended inside the reasoning: trailing whitespace is dropped."""


@attrs.frozen
class ReasoningSplit:
    reasoning: str | None
    """The reasoning text, or None when the output has no reasoning block."""
    rest: str
    """The text after the reasoning (unstripped), where content and tool calls are."""


def split_reasoning(text: str, *, open_at_start: bool, think: ThinkMarkers = QWEN_THINK) -> ReasoningSplit:
    """Step 1 of the module docstring (call it only when a reasoning type is set). ``think``: the reasoning type's
    markers (``<think>``/``</think>`` in the docstring; MiniMax-M3's ``<mm:think>`` also drops a leading
    ``</mm:think>`` outside reasoning and is not ended by ``<tool_call>``)."""
    stripped = text.lstrip()
    body = text
    opened = open_at_start
    if stripped.startswith(think.start):
        opened = True
        body = stripped[len(think.start) :]
    elif not opened and think.leading_end_dropped and stripped.startswith(think.end):
        return ReasoningSplit(None, stripped[len(think.end) :])
    if not opened:
        return ReasoningSplit(None, text)
    body = body.lstrip()
    end = body.find(think.end)
    tool = body.find(TOOL_CALL_START) if think.tool_call_ends else -1
    if tool != -1 and (end == -1 or tool < end):
        return ReasoningSplit(body[:tool].rstrip(), body[tool:])
    if end == -1:
        return ReasoningSplit(body.rstrip(), "")
    return ReasoningSplit(body[:end], body[end + len(think.end) :])


@attrs.frozen
class TextSegment:
    """Text outside tool-call blocks."""

    text: str


@attrs.frozen
class BlockSegment:
    """A ``<tool_call>`` block, verbatim; ``closed`` is False when the text ended inside it."""

    raw: str
    closed: bool


Segment = TextSegment | BlockSegment


def segment_tool_blocks(rest: str, markers: tuple[str, str] = (TOOL_CALL_START, TOOL_CALL_END)) -> tuple[Segment, ...]:
    """Step 2: text pieces and blocks, in order; joining every ``text`` / ``raw`` gives back ``rest``. ``markers``:
    the format's block tags (``ToolCallFormat.markers``)."""
    open_tag, close_tag = markers
    segments: list[Segment] = []
    pos = 0
    while (start := rest.find(open_tag, pos)) != -1:
        if start > pos:
            segments.append(TextSegment(rest[pos:start]))
        end = rest.find(close_tag, start + len(open_tag))
        if end == -1:
            segments.append(BlockSegment(rest[start:], closed=False))
            return tuple(segments)
        pos = end + len(close_tag)
        segments.append(BlockSegment(rest[start:pos], closed=True))
    if pos < len(rest):
        segments.append(TextSegment(rest[pos:]))
    return tuple(segments)


def assemble(
    reasoning: str | None,
    segments: Sequence[Segment],
    decisions: Sequence[BlockDecision],
    *,
    session_id: str,
    step_index: int,
    flags: Iterable[str] = (),
    choice_index: int = 0,
    block_end: str = TOOL_CALL_END,
) -> ParsedMessage:
    """Step 3: the message from the segments and one decision per closed block (in order); ``block_end``: the
    format's closing tag."""
    all_flags = set(flags)
    content: list[str] = []
    calls: list[ToolCall] = []
    closed_decisions = iter(decisions)
    for segment in segments:
        if isinstance(segment, TextSegment):
            content.append(segment.text)
            if block_end in segment.text:
                all_flags.add(ParseFlag.MALFORMED_TOOL_CALL)  # a stray closing tag
            continue
        decision = next(closed_decisions) if segment.closed else MALFORMED  # an open block is never a call
        all_flags.update(decision.flags)
        if not decision.accepted:
            content.append(segment.raw)
        for name, arguments_json in decision.calls:
            calls.append(
                ToolCall(tool_call_id(session_id, step_index, len(calls), choice_index), name, arguments_json)
            )
    return ParsedMessage(
        content="".join(content).strip(),
        reasoning_content=reasoning or None,
        tool_calls=tuple(calls),
        flags=frozenset(all_flags),
    )


def parse_local(
    text: str,
    fmt: MessageFormat,
    tools: ToolSpecs,
    *,
    session_id: str,
    step_index: int,
    reasoning_open_at_start: bool = False,
    choice_index: int = 0,
) -> ParsedMessage:
    """The whole local parse of a finished output. Never raises."""
    split = (
        split_reasoning(text, open_at_start=fmt.opens_in_reasoning(reasoning_open_at_start), think=fmt.think)
        if fmt.reasoning
        else ReasoningSplit(None, text)
    )
    if fmt.tool_call is None:
        return ParsedMessage(content=split.rest.strip(), reasoning_content=split.reasoning or None)
    segments = segment_tool_blocks(split.rest, fmt.tool_call.markers)
    decisions = [
        decide_block(s.raw, fmt.tool_call, tools) for s in segments if isinstance(s, BlockSegment) and s.closed
    ]
    return assemble(
        split.reasoning, segments, decisions, session_id=session_id, step_index=step_index, choice_index=choice_index,
        block_end=fmt.tool_call.markers[1],
    )
