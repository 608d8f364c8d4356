"""What one generation produced, and what its client sees of it: the step's token buffers, the streaming text decode,
the message parser, the response channel.

Theory of operation
-------------------
A :class:`StepOutput` belongs to one generation (``proxy/controllers/generation_driver.py``), whose driver calls it
as it carries out its machine's effects; it never talks to the machine, the gate or the upstream itself:

- ``AcceptTokens`` -> :meth:`StepOutput.accept`: the tokens the effect hands back (those of one upstream read) are
  recorded (ids, logprobs, top alternatives, the effect's weight version), decoded to text (:class:`TextDecoder`)
  and, for a streaming client, fed to the streaming message parser; the SSE events they make certain are staged in
  the :class:`~proxy.controllers.response_output.ResponseChannel` as one item, sent by the next flush.
- ``DiscardPartial`` -> :meth:`StepOutput.discard`: a restart from scratch forgets every generated token (and the
  routed-expert rows); a streaming client that already saw tokens cannot un-see them (``restart_seen_by_client``).
- An upstream request that finished hands its final event over (:meth:`StepOutput.upstream_finished`): the stop
  string it matched, its routed-expert rows (kept only when they continue the rows held).
- ``ParseOutput`` -> :meth:`StepOutput.parse`: the rest of the text, the parsed message (tool calls, reasoning).
- ``Respond`` / ``RespondError`` -> :meth:`StepOutput.respond` / :meth:`StepOutput.respond_error`: the last
  chunks (or the ``chat.completion`` object, or the error), flushed, then the channel closes.

Routing replay: ``rows_start`` is the first input position on the token path without a routed-expert row at the
step's start (the base checkpoint's coverage), ``rows_end`` the same after the chunks received; every upstream
request asks for rows from ``rows_end`` only, so no row is ever duplicated (docs/partial-rollout.md).

Text decoding (:class:`TextDecoder`, sans-IO; one per generation, a restart makes a new one, a continuation keeps
it): bytes come from the tokenizer's exact per-token bytes through an incremental UTF-8 decoder, so a character split
across tokens is released whole; end tokens (``<|im_end|>``, ``<|endoftext|>``) are not text (SGLang includes the
stop token in ``output_ids`` but not in ``text``), other special tokens (``<think>``, ``<tool_call>``) are; text that
could still become one of the request's stop strings is held back, and a generation that finished on a stop string
is cut where it begins (SGLang trims the matched stop from ``text``), so a stream never shows a stop string or a
piece of one.
"""

from __future__ import annotations

import codecs
import logging
from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from proxy.api import SSE_DONE, ApiError, ChatCompletionRequest, Usage, sse_error
from proxy.api.errors import ErrorCode
from proxy.controllers.response_output import ResponseChannel
from proxy.controllers.response_render import ResponseRenderer
from proxy.parsing import MessageParser, ParsedMessage
from proxy.tokenization import TitoTokenizer
from proxy.upstream.events import Finished, RoutedExperts, Token
from proxy.request_id import current_request_id
from statemachines.generation import AcceptTokens, FinishKind, RespondError

if TYPE_CHECKING:
    from proxy.parsing.parser import MessageStream

log = logging.getLogger("dressage_proxy.generation")

#: Retry-After (seconds) of a 503 answered when the pause-wait timeout expires
PAUSE_RETRY_AFTER = 10.0


@attrs.frozen
class ChoiceSlot:
    """What one choice of an ``n > 1`` answer is given. ``first_prompt_ids``: choice 0's prompt ids (None for choice
    0 itself): a choice whose prompt ids are the same does not show them again (token extension)."""

    index: int
    completion_id: str
    created: int
    first_prompt_ids: Sequence[int] | None = None


@attrs.define(eq=False)
class StepOutput:
    """One generation's tokens, text, parsed message and response channel (see the module docstring)."""

    request: ChatCompletionRequest
    tokenizer: TitoTokenizer
    parser: MessageParser
    end_ids: frozenset[int]
    render: ResponseRenderer
    #: one choice of an ``n > 1`` answer; None for an ``n = 1`` request
    choice: ChoiceSlot | None
    #: for log lines
    name: str
    channel: ResponseChannel = attrs.field(factory=ResponseChannel)
    # The prepared context, and what the answer shows of it (token extension; None: another choice shows it).
    # An array('i'): sent upstream as it is (no Python int per token; turned into a list only where it is shown).
    prompt_ids: array = attrs.field(factory=lambda: array("i"))
    shown_prompt_ids: array | None = None
    # The step's generated tokens (kept across continuations; cleared by a restart). Same lengths.
    ids: list[int] = attrs.field(factory=list)
    logprobs: list[float | None] = attrs.field(factory=list)
    # Each token's top alternatives (shown to the client when it asked for top_logprobs; never recorded).
    tops: list[tuple[tuple[int, float], ...]] = attrs.field(factory=list)
    versions: list[str | None] = attrs.field(factory=list)
    routed: list[RoutedExperts] = attrs.field(factory=list)
    rows_start: int = 0
    rows_end: int = 0
    message: ParsedMessage | None = None
    #: how the step finished upstream (set by the parse)
    finish: FinishKind | None = None
    #: the client saw tokens of a try that a restart from scratch discarded
    restart_seen_by_client: bool = False
    #: why prepare or a commit was refused (the machine's RespondError names the code; this keeps the details)
    refusal: ApiError | None = None
    #: --pause-wait-timeout, said in a ``paused_timeout`` answer
    pause_wait_timeout: float = 0.0
    _matched_stop: Any = None
    _tail: list[Any] = attrs.field(factory=list)
    _decoder: TextDecoder = attrs.field(init=False)
    _stream: MessageStream | None = attrs.field(default=None, init=False)  # streaming clients only

    def __attrs_post_init__(self) -> None:
        self._new_text_state()

    @property
    def matched_stop(self) -> Any:
        """What the finished generation stopped on (SGLang's ``matched``: a stop string, a token id, or None); the
        Anthropic front end's ``stop_sequence`` (``proxy/frontends/messages_output.py``)."""
        return self._matched_stop

    def prepared(self, prompt_ids: array, rows_start: int) -> None:
        """The step's context is known (``rows_start``: the routed-expert rows its path already holds)."""
        self.prompt_ids = prompt_ids
        self.shown_prompt_ids = self._prompt_ids_to_show()
        self.rows_start = self.rows_end = rows_start

    # -- tokens ----------------------------------------------------------------------------------------------------

    def accept(self, effect: AcceptTokens) -> None:
        """Record the tokens ``effect`` hands back as step tokens ``effect.index``.., stamped with its version;
        stage the SSE events they make certain."""
        if effect.index != len(self.ids):
            raise RuntimeError(f"{effect} but {len(self.ids)} tokens are held")
        tokens: Sequence[Token] = effect.tokens  # type: ignore[assignment]  # the driver fed upstream Tokens
        feed = self._decoder.feed
        pieces = []
        for token in tokens:
            self.ids.append(token.token_id)
            self.logprobs.append(token.logprob)
            self.tops.append(token.top_logprobs)
            pieces.append(feed(token.token_id))
        self.versions.extend([effect.weight_version] * effect.count)
        if self._stream is None:
            return
        text = "".join(pieces)
        deltas = self._stream.feed(text) if text else []
        events = self.render.token_events(tokens, effect.weight_version, deltas, self.shown_prompt_ids)
        if events:
            self.channel.emit(events)

    def discard(self) -> None:
        """DiscardPartial: the step restarts from scratch; forget every generated token."""
        self.ids.clear()
        self.logprobs.clear()
        self.tops.clear()
        self.versions.clear()
        self.routed.clear()
        self.rows_end = self.rows_start
        self.render.reset()
        if self.render.opened:
            # The client already saw tokens that a restart cannot take back.
            self.restart_seen_by_client = True
        self._new_text_state()

    def upstream_finished(self, finished: Finished, input_length: int, accepted: int) -> None:
        """A request ended by itself (``accepted`` of its tokens were recorded): the stop string it matched, and its
        routed-expert rows, which cover its input positions from its ``start_len`` to the last token it delivered
        (exclusive). Rows contiguous with those held are kept; anything else is a protocol surprise, logged and
        dropped (the export then says which positions have no row)."""
        self._matched_stop = getattr(finished.finish_reason, "matched", None)
        chunk = finished.routed_experts
        if chunk is None:
            return
        end = chunk.start_len + chunk.num_rows
        expected = input_length + accepted - 1
        if chunk.start_len != self.rows_end or end != expected:
            log.warning(
                "generation %s: routed experts rows [%d, %d) do not continue the %d held (expected end %d); dropped",
                self.name, chunk.start_len, end, self.rows_end, expected,
            )
            return
        self.routed.append(chunk)
        self.rows_end = end

    # -- parse and answer ------------------------------------------------------------------------------------------

    async def parse(self, finish: FinishKind) -> ParsedMessage:
        """The rest of the text and the parsed message (raises the parser backend's ``UpstreamError``)."""
        self.finish = finish
        tail = self._decoder.finish(self._matched_stop)
        if self._stream is not None:
            deltas = self._stream.feed(tail) if tail else []
            deltas += await self._stream.finish()
            self._tail = deltas
            message = self._stream.message
        else:
            request = self.request
            message = await self.parser.parse_final(
                self._decoder.text, request.parse_tools, session_id=request.session_id, step_index=self.step_index,
                reasoning_open_at_start=self._reasoning_open, choice_index=self.choice_index,
            )
        if self.request.tool_choice_unmet(call.name for call in message.tool_calls):
            # Answered as parsed, like SGLang (its "Required tool call missing" warning): the constraint was not
            # applied upstream (a gateway that drops structural_tag) or the output was cut short.
            log.warning("generation %s: tool_choice %s not met by the output", self.name, self.request.tool_choice)
        return message

    def usage(self) -> Usage:
        return Usage(len(self.prompt_ids), len(self.ids))

    async def respond(self) -> None:
        """The committed step's answer: the last chunks and ``[DONE]`` (its ``Usage`` for one choice of several), or
        the ``chat.completion`` object; flushed; the channel closes."""
        message, finish = self.message, self.finish
        assert message is not None and finish is not None
        usage = self.usage()
        if self._stream is not None:
            reason = message.finish_reason(finish.value)
            self.channel.emit(self.render.final_events(self._tail, reason, usage, self.shown_prompt_ids))
            if self.choice is not None:
                self.channel.emit(usage)  # this choice is complete; the answer's usage chunk adds up the choices
        else:
            self.channel.emit(self.render.completion(
                message, truncated=finish is FinishKind.LENGTH, usage=usage, prompt_ids=self.shown_prompt_ids,
                ids=self.ids, logprobs=self.logprobs, versions=self.versions, tops=self.tops,
            ))
        await self.channel.flush()
        self.channel.close()

    async def respond_error(self, error: ApiError) -> None:
        """The error answer: the ``ApiError`` itself before the stream opened (and always for one choice of several,
        whose answer decides), else an SSE error event and ``[DONE]``; flushed; the channel closes."""
        opened = self.render.opened and self.choice is None
        self.channel.emit(sse_error(error) + SSE_DONE if opened else error)
        await self.channel.flush()
        self.channel.close()

    def error_for(self, effect: RespondError) -> ApiError:
        """The machine's RespondError as the API's error (a refusal keeps its details): status and type from the one
        table (``proxy/api/errors.py``), whatever status the machine's effect carries."""
        refusal = self.refusal
        if refusal is not None and (str(refusal.code) == effect.code or effect.code == ErrorCode.SESSION_FINALIZED):
            # The commit's own refusals are the machine's CommitRejected, which answers session_finalized.
            return refusal
        if effect.code == ErrorCode.PAUSED_TIMEOUT:
            return ApiError.paused_timeout(self.pause_wait_timeout, PAUSE_RETRY_AFTER)
        if effect.status >= 500 and effect.code == ErrorCode.INTERNAL_ERROR:
            log.error("request %s: generation %s answered 500", current_request_id(), self.name)
        try:
            return ApiError.of(effect.code, effect.message or effect.code.replace("_", " "))
        except ValueError:  # a code the table does not know: a bug, answered as one
            log.error("request %s: the machine answered the unknown code %r", current_request_id(), effect.code)
            return ApiError.internal_error()

    # -- what the step is ------------------------------------------------------------------------------------------

    @property
    def step_index(self) -> int:
        """Tool-call ids derive from (session, step index, call index); the step index is the answer's position in
        the conversation, so a retry of the same request gets the same ids (an idempotent retry stays one node)."""
        return len(self.request.messages)

    @property
    def choice_index(self) -> int:
        """The choice this generation answers (0 but for the other choices of an ``n > 1`` request)."""
        return 0 if self.choice is None else self.choice.index

    def _prompt_ids_to_show(self) -> array | None:
        """The prompt ids the answer shows (token extension): every choice's prompt is the first choice's (the same
        messages), shown once; another choice shows its own only if they differ (a checkpoint appeared on the
        prompt's path between the preparations, so the context was built differently)."""
        choice = self.choice
        first = choice.first_prompt_ids if choice is not None else None
        if first is None or (first if isinstance(first, array) else array("i", first)) != self.prompt_ids:
            return self.prompt_ids
        return None

    @property
    def _reasoning_open(self) -> bool:
        """The prompt ends inside a think block (Qwen3.5 with thinking on puts ``<think>\\n`` in the prompt; MiniMax-M3
        with ``thinking_mode=enabled`` ``<mm:think>``): the parser's reasoning type names the tag."""
        prefix = self.tokenizer.thinking_prefix(self.request.chat_template_kwargs)
        return self.parser.message_format.think.prompt_opens(prefix)

    def _new_text_state(self) -> None:
        request = self.request
        self._decoder = TextDecoder(self.tokenizer, end_ids=self.end_ids, stop=request.stop)
        if request.stream:
            self._stream = self.parser.stream(
                request.parse_tools, session_id=request.session_id, step_index=self.step_index,
                reasoning_open_at_start=self._reasoning_open, choice_index=self.choice_index,
            )


class TextDecoder:
    """Generated token ids -> the answer's text, incrementally, exactly as SGLang's final ``text`` would read (see
    the module docstring). ``feed(token_id)`` returns the text that is now certain; ``finish(matched_stop)`` the
    rest; ``text`` is everything released so far (after ``finish``: the whole answer)."""

    def __init__(self, tokenizer: Any, *, end_ids: Iterable[int], stop: Sequence[str] | None = None) -> None:
        self._token_bytes = tokenizer.token_bytes
        self._end_ids = frozenset(end_ids)
        self._stop = tuple(s for s in stop or () if s)
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        # Decoded but not released: it could still be (the start of) a stop string.
        self._held = ""
        # A complete stop string was seen: everything from it on stays held (generation ends there).
        self._stopped = False
        self._released: list[str] = []

    @property
    def text(self) -> str:
        """Everything released so far."""
        return "".join(self._released)

    def feed(self, token_id: int) -> str:
        """One generated token; returns the text it makes certain (often ``""`` or several characters)."""
        if token_id in self._end_ids:
            return ""
        piece = self._utf8.decode(self._token_bytes(token_id))
        return self._release(piece)

    def finish(self, matched_stop: Any = None) -> str:
        """The end of the generation; ``matched_stop`` is SGLang's ``FinishStop.matched`` when it stopped on a stop
        string (cut there), anything else releases what was held."""
        tail = self._held + self._utf8.decode(b"", final=True)
        self._held = ""
        if isinstance(matched_stop, str) and matched_stop:
            cut = tail.find(matched_stop)
            if cut >= 0:
                tail = tail[:cut]
        elif self._stopped:
            # Stopped on a stop string that SGLang did not report (length hit on the same token): cut anyway.
            cut = _first_stop(tail, self._stop)
            if cut is not None:
                tail = tail[:cut]
        if tail:
            self._released.append(tail)
        return tail

    def _release(self, piece: str) -> str:
        if not self._stop:
            if piece:
                self._released.append(piece)
            return piece
        pending = self._held + piece
        if self._stopped:
            self._held = pending
            return ""
        cut = _first_stop(pending, self._stop)
        if cut is not None:
            self._stopped = True
            out, self._held = pending[:cut], pending[cut:]
        else:
            keep = _longest_stop_prefix_suffix(pending, self._stop)
            out, self._held = pending[: len(pending) - keep], pending[len(pending) - keep :]
        if out:
            self._released.append(out)
        return out


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    """Where the earliest complete stop string starts in ``text``."""
    found = [index for index in (text.find(stop) for stop in stops) if index >= 0]
    return min(found) if found else None


def _longest_stop_prefix_suffix(text: str, stops: Sequence[str]) -> int:
    """The length of the longest suffix of ``text`` that is a proper prefix of some stop string."""
    best = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:size]):
                best = size
                break
    return best


__all__ = ["PAUSE_RETRY_AFTER", "StepOutput", "TextDecoder"]
