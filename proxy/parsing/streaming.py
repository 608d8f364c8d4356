"""The streaming parser: text deltas in, typed message deltas out, as the tokens arrive.

Theory of operation
-------------------
Sans-IO and synchronous: ``feed(text)`` returns the deltas that text makes certain; ``finish()`` flushes the
rest and returns the last ones; ``message`` is then the :class:`ParsedMessage` the deltas add up to, which is
exactly what :func:`~proxy.parsing.local.parse_local` gives for the whole text (the tests check this for every
way of cutting the text). It has two layers:

* a **scanner** (``_scan``) that routes the raw text into reasoning text, content text and ``<tool_call>``
  blocks, in phases START -> REASONING -> CONTENT <-> BLOCK. It holds back text only while it may still turn
  out to be markup: in START, leading whitespace and any prefix of ``<think>``; in REASONING, any suffix that
  is a proper prefix of ``</think>`` or ``<tool_call>``; in CONTENT, any suffix that is a proper prefix of
  ``<tool_call>``; in BLOCK, the whole block until ``</tool_call>`` (its meaning is known only when it closes).
  So markup never leaks into ``content`` however the text is cut.
* an **emitter** (``_emit``) that turns those pieces into deltas and applies the whitespace rules of the
  non-streaming parser: leading whitespace of reasoning and of content is dropped; trailing whitespace is held
  until more text follows (it is dropped at the end, and dropped at the end of reasoning unless ``</think>``
  closed it). A closed block is decided (:func:`~proxy.parsing.tool_blocks.decide_block`): accepted calls go
  out as :class:`ToolCallDelta` (a first delta with id and name, then the whole arguments string: a call is
  valid only once its block is complete, and a sent call cannot be taken back); a rejected block goes out as
  content, verbatim.

Deferred blocks. With an SGLang backend the calls are decided by SGLang after the output is complete
(``defer_blocks=True``): then the first closed block and everything after it wait in ``_queue``. The owner calls
``end_input()``, asks SGLang about ``undecided_blocks`` and passes the answers to ``resolve()``, which emits the
queue in order. Reasoning and the content before the first block still stream as generated; Qwen models put
their calls at the end of the message, so in practice nothing else waits.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Sequence

import attrs

from proxy.parsing.formats import (
    TOOL_CALL_END,
    TOOL_CALL_START,
    MessageFormat,
    ThinkMarkers,
    ToolSpecs,
)
from proxy.parsing.local import ReasoningEnd
from proxy.parsing.parsed import (
    ContentDelta,
    MessageDelta,
    ParsedMessage,
    ParseFlag,
    ReasoningDelta,
    ToolCall,
    ToolCallDelta,
)
from proxy.parsing.tool_blocks import MALFORMED, BlockDecision, decide_block
from proxy.parsing.tool_call_ids import tool_call_id


class _Phase(enum.Enum):
    START = "start"
    """Before the first non-whitespace text: is there a ``<think>``?"""
    REASONING = "reasoning"
    """Inside reasoning, until ``</think>``, ``<tool_call>`` or the end."""
    CONTENT = "content"
    """Answer text, until ``<tool_call>`` (when tool calls are parsed)."""
    BLOCK = "block"
    """Inside a ``<tool_call>`` block, until ``</tool_call>``."""


@attrs.frozen
class _ReasoningText:
    text: str


@attrs.frozen
class _ReasoningClosed:
    how: ReasoningEnd


@attrs.frozen
class _ContentText:
    text: str


@attrs.frozen
class _Block:
    raw: str
    closed: bool


_Piece = _ReasoningText | _ReasoningClosed | _ContentText | _Block


def held_suffix_length(text: str, markers: Iterable[str]) -> int:
    """The length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:size]):
                longest = size
                break
    return longest


@attrs.define(eq=False)
class StreamingMessageParser:
    """Parse one output incrementally. Use ``feed()`` for each text delta, then ``finish()`` (or, with
    ``defer_blocks``, ``end_input()`` + ``resolve()``), then read ``message``."""

    fmt: MessageFormat
    tools: ToolSpecs
    session_id: str
    step_index: int
    reasoning_open_at_start: bool = False
    defer_blocks: bool = False
    """Leave closed blocks undecided until ``resolve()`` (SGLang decides them)."""
    choice_index: int = 0
    """The answer's choice (``n > 1``): part of the tool-call ids."""

    # scanner
    _phase: _Phase = attrs.field(init=False, default=_Phase.START)
    _buf: str = attrs.field(init=False, default="")  # held back: a possible marker prefix (the block is below)
    _block_parts: list[str] = attrs.field(init=False, factory=list)  # the open block, in pieces
    _block_tail: str = attrs.field(init=False, default="")  # its last len(closing tag) - 1 characters
    _input_ended: bool = attrs.field(init=False, default=False)
    # emitter
    _queue: deque[_Piece] = attrs.field(init=False, factory=deque)  # behind the first undecided block
    _reasoning: list[str] = attrs.field(init=False, factory=list)
    _reasoning_ws: str = attrs.field(init=False, default="")  # trailing whitespace held back
    _content: list[str] = attrs.field(init=False, factory=list)
    _content_ws: str = attrs.field(init=False, default="")
    _text_piece: list[str] = attrs.field(init=False, factory=list)  # content text since the last block
    _calls: list[ToolCall] = attrs.field(init=False, factory=list)
    _flags: set[str] = attrs.field(init=False, factory=set)
    _message: ParsedMessage | None = attrs.field(init=False, default=None)
    # the format's block tags, its reasoning markers (<think>/</think> in the comments) and what ends reasoning
    # (also Qwen's <tool_call> where the type says so, as SGLang's detector does): fixed per output, read per token
    _tags: tuple[str, str, ThinkMarkers, tuple[str, ...]] = attrs.field(init=False)

    @_tags.default
    def _format_tags(self) -> tuple[str, str, ThinkMarkers, tuple[str, ...]]:
        fmt = self.fmt
        open_tag, close_tag = (TOOL_CALL_START, TOOL_CALL_END) if fmt.tool_call is None else fmt.tool_call.markers
        think = fmt.think
        return open_tag, close_tag, think, (think.end, TOOL_CALL_START) if think.tool_call_ends else (think.end,)

    # -- public ---------------------------------------------------------------------------------------------------

    def feed(self, text: str) -> list[MessageDelta]:
        """Route more output text; the deltas it makes certain (possibly none)."""
        if self._input_ended:
            raise RuntimeError("feed() after the end of the input")
        out: list[MessageDelta] = []
        if text:
            self._scan(text, final=False, out=out)
        return out

    def end_input(self) -> list[MessageDelta]:
        """The output is complete: flush the held-back text. Undecided blocks stay queued."""
        if self._input_ended:
            raise RuntimeError("end_input() called twice")
        self._input_ended = True
        out: list[MessageDelta] = []
        self._scan("", final=True, out=out)
        return out

    @property
    def undecided_blocks(self) -> tuple[str, ...]:
        """The closed blocks waiting for ``resolve()``, verbatim, in order."""
        return tuple(p.raw for p in self._queue if isinstance(p, _Block) and p.closed)

    def resolve(self, decisions: Sequence[BlockDecision], flags: Iterable[str] = ()) -> list[MessageDelta]:
        """After ``end_input()``: one decision per undecided block; emits everything left and completes
        ``message``. ``flags`` are added to the message (e.g. ``parser_fallback``)."""
        if not self._input_ended or self._message is not None:
            raise RuntimeError("resolve() must follow end_input(), once")
        if len(decisions) != len(self.undecided_blocks):
            raise ValueError(f"{len(self.undecided_blocks)} undecided blocks, {len(decisions)} decisions")
        out: list[MessageDelta] = []
        remaining = iter(decisions)
        queue, self._queue = self._queue, deque()
        for piece in queue:
            decision = next(remaining) if isinstance(piece, _Block) and piece.closed else None
            self._emit(piece, out, decision)
        self._end_text_piece()
        self._flags.update(flags)
        self._message = ParsedMessage(
            content="".join(self._content),
            reasoning_content="".join(self._reasoning) or None,
            tool_calls=tuple(self._calls),
            flags=frozenset(self._flags),
        )
        return out

    def finish(self) -> list[MessageDelta]:
        """End the input and decide every block locally; the last deltas."""
        out = self.end_input()
        out += self.resolve([self._decide_locally(raw, closed=True) for raw in self.undecided_blocks])
        return out

    @property
    def message(self) -> ParsedMessage:
        """The parsed message; available once ``finish()`` / ``resolve()`` has run."""
        if self._message is None:
            raise RuntimeError("the message is complete only after finish() or resolve()")
        return self._message

    # -- scanner --------------------------------------------------------------------------------------------------

    def _scan(self, text: str, *, final: bool, out: list[MessageDelta]) -> None:
        buf = self._buf + text
        open_tag, close_tag, think, reasoning_ends = self._tags
        while True:
            phase = self._phase
            if phase is _Phase.START:
                if not self.fmt.reasoning:
                    self._phase = _Phase.CONTENT
                    continue
                buf = buf.lstrip()  # dropped in every case: leading whitespace of reasoning or of content
                if buf.startswith(think.start):
                    buf = buf[len(think.start) :]
                    self._phase = _Phase.REASONING
                    continue
                opens = self.fmt.opens_in_reasoning(self.reasoning_open_at_start)
                drops_end = think.leading_end_dropped and not opens
                if not final and (think.start.startswith(buf) or (drops_end and len(buf) < len(think.end) and think.end.startswith(buf))):
                    break  # empty, or a proper prefix of <think> (or of a droppable leading </think>): wait
                if drops_end and buf.startswith(think.end):
                    buf = buf[len(think.end) :]  # an empty reasoning (MiniMax-M3's non-thinking turn)
                self._phase = _Phase.REASONING if opens else _Phase.CONTENT
            elif phase is _Phase.REASONING:
                end = buf.find(think.end)
                tool = buf.find(TOOL_CALL_START) if think.tool_call_ends else -1
                if tool != -1 and (end == -1 or tool < end):
                    self._route(_ReasoningText(buf[:tool]), out)
                    self._route(_ReasoningClosed(ReasoningEnd.TOOL_CALL), out)
                    buf = buf[tool:]
                    self._phase = _Phase.CONTENT
                elif end != -1:
                    self._route(_ReasoningText(buf[:end]), out)
                    self._route(_ReasoningClosed(ReasoningEnd.THINK_END), out)
                    buf = buf[end + len(think.end) :]
                    self._phase = _Phase.CONTENT
                elif final:
                    self._route(_ReasoningText(buf), out)
                    self._route(_ReasoningClosed(ReasoningEnd.END_OF_TEXT), out)
                    buf = ""
                    self._phase = _Phase.CONTENT
                else:
                    cut = len(buf) - held_suffix_length(buf, reasoning_ends)
                    self._route(_ReasoningText(buf[:cut]), out)
                    buf = buf[cut:]
                    break
            elif phase is _Phase.CONTENT:
                start = -1 if self.fmt.tool_call is None else buf.find(open_tag)
                if start != -1:
                    self._route(_ContentText(buf[:start]), out)
                    buf = buf[start + len(open_tag) :]
                    self._block_parts = [open_tag]
                    self._block_tail = open_tag[-(len(close_tag) - 1) :]
                    self._phase = _Phase.BLOCK
                    continue
                cut = len(buf)
                if not final and self.fmt.tool_call is not None:
                    cut -= held_suffix_length(buf, (open_tag,))
                self._route(_ContentText(buf[:cut]), out)
                buf = buf[cut:]
                break
            else:  # BLOCK: the new text is in buf; the block so far in _block_parts
                window = self._block_tail + buf
                end = window.find(close_tag)
                if end == -1:
                    self._block_parts.append(buf)
                    self._block_tail = window[-(len(close_tag) - 1) :]
                    buf = ""
                    if final:
                        self._route(_Block("".join(self._block_parts), closed=False), out)
                        self._block_parts = []
                    break
                cut = end + len(close_tag) - len(self._block_tail)
                self._block_parts.append(buf[:cut])
                self._route(_Block("".join(self._block_parts), closed=True), out)
                self._block_parts = []
                buf = buf[cut:]
                self._phase = _Phase.CONTENT
        self._buf = buf

    def _route(self, piece: _Piece, out: list[MessageDelta]) -> None:
        if isinstance(piece, (_ReasoningText, _ContentText)) and not piece.text:
            return
        if self._queue or (self.defer_blocks and isinstance(piece, _Block) and piece.closed):
            self._queue.append(piece)
        else:
            self._emit(piece, out, None)

    # -- emitter --------------------------------------------------------------------------------------------------

    def _emit(self, piece: _Piece, out: list[MessageDelta], decision: BlockDecision | None) -> None:
        if isinstance(piece, _ReasoningText):
            self._reasoning_ws = self._text(piece.text, self._reasoning_ws, self._reasoning, ReasoningDelta, out)
        elif isinstance(piece, _ReasoningClosed):
            if piece.how is ReasoningEnd.THINK_END and self._reasoning_ws:
                self._reasoning.append(self._reasoning_ws)
                out.append(ReasoningDelta(self._reasoning_ws))
            self._reasoning_ws = ""
        elif isinstance(piece, _ContentText):
            self._text_piece.append(piece.text)
            self._content_ws = self._text(piece.text, self._content_ws, self._content, ContentDelta, out)
        else:
            self._end_text_piece()
            if decision is None:
                decision = self._decide_locally(piece.raw, closed=piece.closed)
            self._flags.update(decision.flags)
            if not decision.accepted:
                self._content_ws = self._text(piece.raw, self._content_ws, self._content, ContentDelta, out)
            for name, arguments_json in decision.calls:
                index = len(self._calls)
                call = ToolCall(
                    tool_call_id(self.session_id, self.step_index, index, self.choice_index), name, arguments_json
                )
                self._calls.append(call)
                out.append(ToolCallDelta(index, call.id, name, ""))
                out.append(ToolCallDelta(index, None, None, arguments_json))

    def _decide_locally(self, raw: str, *, closed: bool) -> BlockDecision:
        fmt = self.fmt.tool_call
        return decide_block(raw, fmt, self.tools) if closed and fmt is not None else MALFORMED

    @staticmethod
    def _text(text: str, held_ws: str, emitted: list[str], kind: type, out: list[MessageDelta]) -> str:
        """Emit ``held_ws + text`` minus leading whitespace (if nothing was emitted yet) and minus trailing
        whitespace, which is returned to be held."""
        text = held_ws + text
        if not emitted:
            text = text.lstrip()
        body = text.rstrip()
        if body:
            emitted.append(body)
            out.append(kind(body))
        return text[len(body) :]

    def _end_text_piece(self) -> None:
        """A text piece between blocks ended: a ``</tool_call>`` in it is a stray closing tag."""
        if self.fmt.tool_call is not None and self.fmt.tool_call.markers[1] in "".join(self._text_piece):
            self._flags.add(ParseFlag.MALFORMED_TOOL_CALL)
        self._text_piece = []
