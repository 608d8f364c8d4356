"""The message parser the request path uses: local / SGLang / hybrid backends over the pure parsers.

One object per proxy (``MessageParser``), built from the parser flags; per request either
``await parse_final(text, tools, ...)`` after a non-streaming generation, or ``stream(tools, ...)`` for a streaming
one (``feed()`` each text delta, ``await finish()`` at the end, then ``.message``).

Backends (``--tool-call-parse-backend``, ``--reasoning-parse-backend``; both default to ``sglang_api``):

* ``local``: the pure parsers of this package, no I/O.
* ``sglang_api``: SGLang decides (``/separate_reasoning``, ``/parse_function_call``); its failures
  (``UpstreamError``, including a timeout after ``backend_timeout`` seconds) propagate to the caller.
* ``hybrid``: SGLang first; on any ``UpstreamError`` the local parser decides and the step is flagged
  ``parser_fallback``.

What SGLang decides, and what stays local, is the same in both paths so that a streamed message and a
non-streamed one agree:

* Where tool-call markup is (the cutting into text and ``<tool_call>`` blocks) is always local. Each closed
  block is sent to ``/parse_function_call`` on its own (concurrently), so every call SGLang returns belongs to a
  known block: a block SGLang finds calls in becomes those calls; a block it finds none in stays content
  (flagged ``malformed_tool_call``, or ``unknown_tool`` when the local parser knows that is why). SGLang's calls
  must meet the invariants of :mod:`proxy.parsing.parsed` (a name among the offered tools, arguments a JSON
  object), otherwise the block stays content and is flagged. When SGLang and the local parser disagree on the
  calls, SGLang wins and the step is flagged ``parser_mismatch``; SGLang's ``normal_text`` and ``tool_index`` are
  not used. Blocks still open at the end of the output, and every block of a request without tools, are decided
  locally (never a call) without asking SGLang.
* Reasoning: ``parse_final`` lets the reasoning backend split the whole text (``<think>`` is prepended when the
  prompt left reasoning open, since ``/separate_reasoning`` cannot know; whitespace before a leading ``<think>``
  is left out). SGLang 0.5.23 keeps the whitespace around the markers, so the two splits are compared without
  it: when they agree the local split is the result; when they differ SGLang's is, with the local whitespace
  rules, and the step is flagged ``parser_mismatch``. A text with neither ``<think>`` nor ``</think>``, not open
  at the start, is not sent: SGLang's detector (reasoning not forced) answers it as all normal text, whatever
  the text (one round trip less per step). A stream must route each delta to reasoning or content as it
  arrives, before SGLang could be asked, so **streaming always splits reasoning locally**; for well-formed
  outputs the two agree (tested against SGLang 0.5.23's recorded answers).
* So ``parser_mismatch`` is flagged exactly when SGLang's decision gives another message (content, reasoning or
  calls) than the local parser would; the documented differences in how the two write the same message never
  flag a step (docs/parsing.md, "Local and SGLang 0.5.23").
* Streaming with an SGLang tool-call backend: deltas are routed locally, and the blocks are decided by the
  backend at ``finish()``; the first block and everything after it is emitted then (see ``streaming.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

import attrs
import trio

from proxy.parsing.formats import QWEN_THINK, MessageFormat, ThinkMarkers, ToolSpecs
from proxy.parsing.local import (
    BlockSegment,
    ReasoningSplit,
    assemble,
    segment_tool_blocks,
    split_reasoning,
)
from proxy.parsing.parsed import MessageDelta, ParsedMessage, ParseFlag
from proxy.parsing.streaming import StreamingMessageParser
from proxy.parsing.tool_blocks import BlockDecision, arguments_object, decide_block
from proxy.upstream.errors import UpstreamError, UpstreamTimeout
from proxy.upstream.events import FunctionCallParse, ReasoningParse

Backend = Literal["local", "sglang_api", "hybrid"]
BACKENDS: tuple[Backend, ...] = ("local", "sglang_api", "hybrid")
DEFAULT_BACKEND: Backend = "sglang_api"


class ParserClient(Protocol):
    """The two SGLang calls the parsers need (``proxy.upstream.client.SGLangClient`` has them)."""

    async def parse_function_call(
        self, text: str, parser: str, tools: Iterable[Mapping[str, Any]]
    ) -> FunctionCallParse: ...

    async def separate_reasoning(self, text: str, parser: str) -> ReasoningParse: ...


def _check_backend(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    if value not in BACKENDS:
        raise ValueError(f"{attribute.name} must be one of {', '.join(BACKENDS)}, got {value!r}")


@attrs.frozen
class ParserConfig:
    """The parser flags. ``tool_call_type`` / ``reasoning_type`` are SGLang parser names (``formats.py``);
    None turns that parser off (no tool calls are parsed / no reasoning is split)."""

    tool_call_type: str | None = "qwen25"
    reasoning_type: str | None = "qwen3"
    tool_call_backend: Backend = attrs.field(default=DEFAULT_BACKEND, validator=_check_backend)
    reasoning_backend: Backend = attrs.field(default=DEFAULT_BACKEND, validator=_check_backend)
    backend_timeout: float = 10.0
    """Seconds one SGLang parser call may take before it counts as failed."""

    @property
    def message_format(self) -> MessageFormat:
        return MessageFormat.from_types(self.tool_call_type, self.reasoning_type)

    def __attrs_post_init__(self) -> None:
        self.message_format  # validates the type names  # noqa: B018
        if not (self.backend_timeout > 0 and math.isfinite(self.backend_timeout)):
            raise ValueError("backend_timeout must be a positive number of seconds")

    @property
    def uses_sglang(self) -> bool:
        return (self.tool_call_type is not None and self.tool_call_backend != "local") or (
            self.reasoning_type is not None and self.reasoning_backend != "local"
        )


@attrs.frozen
class ParserStatistics:
    """``MessageParser.statistics()``."""

    messages_parsed: int
    backend_calls: int
    backend_failures: int
    fallbacks: int
    mismatches: int
    #: the mismatches by decision (they add up to ``mismatches``): tool-call blocks, reasoning splits
    tool_call_mismatches: int = 0
    reasoning_mismatches: int = 0


@attrs.define(eq=False)
class MessageParser:
    """Parses model outputs into assistant messages with the configured formats and backends."""

    config: ParserConfig
    client: ParserClient | None = None
    _fmt: MessageFormat = attrs.field(init=False)
    _messages_parsed: int = attrs.field(init=False, default=0)
    _backend_calls: int = attrs.field(init=False, default=0)
    _backend_failures: int = attrs.field(init=False, default=0)
    _fallbacks: int = attrs.field(init=False, default=0)
    _tool_call_mismatches: int = attrs.field(init=False, default=0)
    _reasoning_mismatches: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        self._fmt = self.config.message_format
        if self.config.uses_sglang and self.client is None:
            raise ValueError("the sglang_api and hybrid parser backends need an SGLang client")

    @property
    def message_format(self) -> MessageFormat:
        """The formats it reads (``think``: the reasoning markers the prompt may leave open)."""
        return self._fmt

    def statistics(self) -> ParserStatistics:
        return ParserStatistics(
            messages_parsed=self._messages_parsed,
            backend_calls=self._backend_calls,
            backend_failures=self._backend_failures,
            fallbacks=self._fallbacks,
            mismatches=self._tool_call_mismatches + self._reasoning_mismatches,
            tool_call_mismatches=self._tool_call_mismatches,
            reasoning_mismatches=self._reasoning_mismatches,
        )

    async def parse_final(
        self,
        text: str,
        tools: Iterable[Any] | ToolSpecs | None,
        *,
        session_id: str,
        step_index: int,
        reasoning_open_at_start: bool = False,
        choice_index: int = 0,
    ) -> ParsedMessage:
        """The message in a finished output ``text``. ``tools`` is the request's ``tools`` list; ``choice_index`` is
        the answer's choice (``n > 1``), part of its tool-call ids.

        Never raises for any text; with an ``sglang_api`` backend, SGLang's failures raise ``UpstreamError``.
        """
        specs = tools if isinstance(tools, ToolSpecs) else ToolSpecs.from_openai(tools)
        flags: set[str] = set()
        split = await self._split_reasoning(text, reasoning_open_at_start, flags)
        if self._fmt.tool_call is None:
            message = ParsedMessage(content=split.rest.strip(), reasoning_content=split.reasoning or None)
        else:
            segments = segment_tool_blocks(split.rest, self._fmt.tool_call.markers)
            raws = [s.raw for s in segments if isinstance(s, BlockSegment) and s.closed]
            decisions = await self.decide_blocks(raws, specs, flags)
            message = assemble(
                split.reasoning, segments, decisions, session_id=session_id, step_index=step_index, flags=flags,
                choice_index=choice_index, block_end=self._fmt.tool_call.markers[1],
            )
        return self._count(message)

    def stream(
        self,
        tools: Iterable[Any] | ToolSpecs | None,
        *,
        session_id: str,
        step_index: int,
        reasoning_open_at_start: bool = False,
        choice_index: int = 0,
    ) -> MessageStream:
        """A streaming parse of one output; see :class:`MessageStream`."""
        specs = tools if isinstance(tools, ToolSpecs) else ToolSpecs.from_openai(tools)
        core = StreamingMessageParser(
            self._fmt,
            specs,
            session_id,
            step_index,
            reasoning_open_at_start=reasoning_open_at_start,
            defer_blocks=self._fmt.tool_call is not None and self.config.tool_call_backend != "local",
            choice_index=choice_index,
        )
        return MessageStream(self, core)

    # -- backends -------------------------------------------------------------------------------------------------

    async def decide_blocks(self, raws: Sequence[str], tools: ToolSpecs, flags: set[str]) -> list[BlockDecision]:
        """One decision per closed block, by the tool-call backend; adds ``parser_fallback`` to ``flags``."""
        fmt = self._fmt.tool_call
        assert fmt is not None
        local = [decide_block(raw, fmt, tools) for raw in raws]
        if self.config.tool_call_backend == "local" or not raws or not tools:
            return local
        try:
            replies = await self._ask_sglang_blocks(raws, tools)
        except UpstreamError:
            if self.config.tool_call_backend == "sglang_api":
                raise
            self._fallbacks += 1
            flags.add(ParseFlag.PARSER_FALLBACK)
            return local
        decisions = [_reconcile(mine, reply, tools) for mine, reply in zip(local, replies, strict=True)]
        self._tool_call_mismatches += sum(ParseFlag.PARSER_MISMATCH in d.flags for d in decisions)
        return decisions

    async def _ask_sglang_blocks(self, raws: Sequence[str], tools: ToolSpecs) -> list[FunctionCallParse]:
        client = self.client
        assert client is not None and self.config.tool_call_type is not None
        parser = self.config.tool_call_type
        replies: list[FunctionCallParse | None] = [None] * len(raws)
        failures: list[UpstreamError] = []

        async def ask(index: int, raw: str) -> None:
            try:
                replies[index] = await client.parse_function_call(raw, parser, tools.openai_tools)
            except UpstreamError as exc:
                failures.append(exc)

        self._backend_calls += len(raws)
        with trio.move_on_after(self.config.backend_timeout) as scope:
            async with trio.open_nursery() as nursery:
                for index, raw in enumerate(raws):
                    nursery.start_soon(ask, index, raw)
        if scope.cancelled_caught:
            failures.append(_timeout("/parse_function_call", self.config.backend_timeout))
        if failures:
            self._backend_failures += 1
            raise failures[0]
        return [reply for reply in replies if reply is not None]

    async def _split_reasoning(self, text: str, open_at_start: bool, flags: set[str]) -> ReasoningSplit:
        fmt = self._fmt
        if not fmt.reasoning:
            return ReasoningSplit(None, text)
        opened = fmt.opens_in_reasoning(open_at_start)
        think = fmt.think
        local = split_reasoning(text, open_at_start=opened, think=think)
        if self.config.reasoning_backend == "local" or not (opened or think.start in text or think.end in text):
            # Without a marker and not open at the start, SGLang's answer is fixed (sglang-protocol.md §5.2: no
            # forced reasoning, so everything is normal text): no round trip for what cannot differ.
            return local
        client = self.client
        assert client is not None and self.config.reasoning_type is not None
        sent = reasoning_request(text, opened, think)
        self._backend_calls += 1
        try:
            with trio.move_on_after(self.config.backend_timeout) as scope:
                reply = await client.separate_reasoning(sent, self.config.reasoning_type)
            if scope.cancelled_caught:
                raise _timeout("/separate_reasoning", self.config.backend_timeout)
        except UpstreamError:
            self._backend_failures += 1
            if self.config.reasoning_backend == "sglang_api":
                raise
            self._fallbacks += 1
            flags.add(ParseFlag.PARSER_FALLBACK)
            return local
        theirs = sglang_reasoning_split(reply, closed=think.end in sent)
        if (theirs.reasoning or "", theirs.rest.strip()) == (local.reasoning or "", local.rest.strip()):
            return local  # the same split, up to whitespace at the ends (documented difference 1)
        self._reasoning_mismatches += 1
        flags.add(ParseFlag.PARSER_MISMATCH)
        return theirs

    def _count(self, message: ParsedMessage) -> ParsedMessage:
        self._messages_parsed += 1
        return message


@attrs.define(eq=False)
class MessageStream:
    """One streaming parse: ``feed(text)`` per generated text delta (sync), ``await finish()`` once at the end
    (asks the tool-call backend about the blocks, if it is not ``local``), then ``message``."""

    _parser: MessageParser
    _core: StreamingMessageParser

    def feed(self, text: str) -> list[MessageDelta]:
        return self._core.feed(text)

    async def finish(self) -> list[MessageDelta]:
        out = self._core.end_input()
        flags: set[str] = set()
        raws = self._core.undecided_blocks
        decisions = await self._parser.decide_blocks(raws, self._core.tools, flags) if raws else []
        out += self._core.resolve(decisions, flags)
        self._parser._count(self._core.message)
        return out

    @property
    def message(self) -> ParsedMessage:
        return self._core.message


def reasoning_request(text: str, opened: bool, think: ThinkMarkers = QWEN_THINK) -> str:
    """The text sent to ``/separate_reasoning``: the output, with ``<think>`` in front when the prompt left reasoning
    open (SGLang cannot know), and without the whitespace before a leading ``<think>`` (the local parser consumes
    both; SGLang only removes a ``<think>`` that starts the text). ``think``: the reasoning type's markers."""
    stripped = text.lstrip()
    if stripped.startswith(think.start):
        return stripped
    return think.start + text if opened else text


def sglang_reasoning_split(reply: ReasoningParse, *, closed: bool) -> ReasoningSplit:
    """SGLang's split with the local parser's whitespace: SGLang 0.5.23 keeps the whitespace around the markers; the
    reasoning loses its leading whitespace, and its trailing whitespace too unless ``</think>`` closed it
    (``closed``: the text sent had ``</think>``, so that is where SGLang ended the reasoning)."""
    reasoning = reply.reasoning_text.lstrip() if closed else reply.reasoning_text.strip()
    return ReasoningSplit(reasoning or None, reply.text)


def _timeout(path: str, seconds: float) -> UpstreamTimeout:
    return UpstreamTimeout(f"{path} took longer than {seconds:g} s", phase="read")


def _reconcile(local: BlockDecision, reply: FunctionCallParse, tools: ToolSpecs) -> BlockDecision:
    """SGLang's answer for one block, held to the invariants; ``parser_mismatch`` when it differs from ours."""
    calls = tuple((c.name, c.parameters) for c in reply.calls)
    if not calls:
        flags = local.flags or {ParseFlag.MALFORMED_TOOL_CALL}
        decision = BlockDecision(calls=(), flags=frozenset(flags))
    elif any(not name.strip() or arguments_object(args) is None for name, args in calls):
        decision = BlockDecision.reject(ParseFlag.MALFORMED_TOOL_CALL)  # field notes 14, 15
    elif any(name not in tools for name, _ in calls):
        decision = BlockDecision.reject(ParseFlag.UNKNOWN_TOOL)
    else:
        decision = BlockDecision.accept(calls)
    if decision.calls != local.calls:
        decision = attrs.evolve(decision, flags=decision.flags | {ParseFlag.PARSER_MISMATCH})
    return decision
