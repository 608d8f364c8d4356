"""Responses of ``POST /v1/chat/completions``: ``chat.completion`` objects, ``chat.completion.chunk`` events, SSE.

Rendering is independent of how the answer was produced or parsed: the caller describes it with the small frozen
values of this module and gets JSON-ready dicts and bytes back. Nothing here does I/O or reads the clock (the caller
passes ``created``).

Values:

- :class:`CompletionMeta`: ``id``, ``created`` (Unix seconds), ``model``: the same on every chunk of a response.
- :class:`AssistantTurn`: a finished answer: ``content``, ``reasoning_content``, ``tool_calls`` (:class:`ToolCall`:
  ``id``, ``name``, ``arguments`` as JSON text), ``truncated`` (the token budget ran out).
  Its ``finish_reason`` is ``length`` when truncated, else ``tool_calls`` when it has tool calls, else ``stop``.
- :class:`Delta`: one streaming increment: ``content`` and/or ``reasoning_content`` text, :class:`ToolCallDelta`
  items, the :class:`TokenLogprob` entries of its tokens, and (extension) its :class:`TokenExtras`.
- :class:`Usage`: ``prompt_tokens``, ``completion_tokens`` (+ optional ``reasoning_tokens``, ``cached_tokens``).
- :class:`TokenExtras`: the token extension fields ``prompt_token_ids``, ``token_ids``, ``token_logprobs``,
  ``weight_versions`` (each optional; sequences are not copied).

Non-streaming (:func:`render_completion`)::

    {"id", "object": "chat.completion", "created", "model",
     "choices": [{"index": 0,
                  "message": {"role": "assistant", "content", "reasoning_content"?, "tool_calls"?},
                  "logprobs": null | {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]},
                  "finish_reason": "stop" | "length" | "tool_calls"}],
     "usage": {"prompt_tokens", "completion_tokens", "total_tokens",
               "completion_tokens_details"?: {"reasoning_tokens"}, "prompt_tokens_details"?: {"cached_tokens"}},
     "prompt_token_ids"?, "token_ids"?, "token_logprobs"?, "weight_versions"?}

``reasoning_content`` is present only when the turn has reasoning (a reasoning parser is active); ``tool_calls``
only when there are some; ``content`` is rendered as given (``null`` is fine for a tool-call-only answer). The
token extension fields sit at the top level of the object (as in the request-flow example of the seeds), only when
the caller passes :class:`TokenExtras` (the request set ``return_token_ids``, or the server flag is on).

Streaming (:class:`ChunkFormat`), each event a ``chat.completion.chunk`` with the same ``id``/``created``/``model``:

1. ``first()``: ``delta: {"role": "assistant", "content": ""}`` (+ top-level ``prompt_token_ids`` with extras);
2. ``delta(d)``: ``delta: {"content"?, "reasoning_content"?, "tool_calls"?}``; a tool call's first delta carries
   ``index``, ``id``, ``type: "function"``, ``function.name`` and an ``arguments`` fragment, later ones only
   ``index`` and ``function.arguments`` fragments (OpenAI's streaming format); ``logprobs`` for the delta's tokens
   when the request asked for them; with extras, top-level ``token_ids``/``token_logprobs``/``weight_versions`` of
   the delta's tokens;
3. ``finish(reason, usage)``: a chunk with ``delta: {}`` and the ``finish_reason``, then, when the request set
   ``stream_options.include_usage``, a usage chunk with ``choices: []`` (``usage_chunk(usage)`` alone).

Choices (``n > 1``): every choice is rendered on its own with its ``index`` (``render_completion(..., index=i)``,
``ChunkFormat(index=i)``); ``proxy.controllers.choices`` puts the choices of one answer together.

SSE framing: :func:`sse_event` gives ``b"data: <json>\\n\\n"``, :data:`SSE_DONE` is ``b"data: [DONE]\\n\\n"``,
:func:`sse_events` frames several events into one bytes blob (the response writer coalesces whatever is buffered
into one write: stack-notes pitfall 6), :func:`sse_error` frames an error met after the stream started (the OpenAI
SDKs raise on an event with an ``error`` member).

JSON (:func:`dumps`): compact, UTF-8, non-ASCII kept; U+0085, U+2028 and U+2029 are written as ``\\u`` escapes so
no line-splitting client can cut an event; a string that cannot be UTF-8 (a lone surrogate) falls back to ASCII
escapes. Logprobs that are not finite (``-inf`` for a token outside the sampling support) are rendered as
``-9999.0``, OpenAI's floor, because JSON has no infinities.
"""

from __future__ import annotations

import enum
import json
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from proxy.api.errors import ApiError
from proxy.upstream.wire_json import has_non_finite

if TYPE_CHECKING:
    from proxy.api.chat_request import ChatCompletionRequest

#: what a non-finite logprob is rendered as (OpenAI's floor value)
LOGPROB_FLOOR = -9999.0
SSE_DONE = b"data: [DONE]\n\n"
_LINE_BREAKS_OUTSIDE_JSON = ("\u0085", "\u2028", "\u2029")


class FinishReason(enum.StrEnum):
    """``choices[0].finish_reason``."""

    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"


def _non_negative(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{attribute.name} must be a non-negative integer, not {value!r}")


def _non_empty_str(_instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{attribute.name} must be a non-empty string, not {value!r}")


def _utf8(token: str) -> tuple[int, ...]:
    return tuple(token.encode("utf-8", "surrogatepass"))


def _logprob(value: float) -> float:
    return value if math.isfinite(value) else LOGPROB_FLOOR


# -- values ------------------------------------------------------------------------------------------------------------


@attrs.frozen
class CompletionMeta:
    """What every object of one response shares."""

    id: str = attrs.field(validator=_non_empty_str)
    created: int = attrs.field(validator=_non_negative)
    model: str = attrs.field(validator=attrs.validators.instance_of(str))


@attrs.frozen
class ToolCall:
    """One parsed tool call. An empty name is refused here: such a call must stay content (field notes 14)."""

    id: str = attrs.field(validator=_non_empty_str)
    name: str = attrs.field(validator=_non_empty_str)
    #: the arguments as JSON text (OpenAI's wire format)
    arguments: str = attrs.field(validator=attrs.validators.instance_of(str))

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@attrs.frozen
class TopLogprob:
    """One alternative at a position; ``token_bytes`` defaults to the token's UTF-8 bytes."""

    token: str
    logprob: float
    token_bytes: tuple[int, ...] | None = attrs.field()

    @token_bytes.default
    def _token_bytes(self) -> tuple[int, ...]:
        return _utf8(self.token)

    def to_json(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "logprob": _logprob(self.logprob),
            "bytes": list(self.token_bytes) if self.token_bytes is not None else None,
        }


@attrs.frozen
class TokenLogprob:
    """The logprob of one generated token, with its top alternatives when the request asked for ``top_logprobs``.

    ``token_bytes`` defaults to the token text's UTF-8 bytes; pass the real bytes for a token that is only part of
    a character (its text is then ``"\\ufffd"``-like and its UTF-8 would be wrong).
    """

    token: str
    logprob: float
    token_bytes: tuple[int, ...] | None = attrs.field()
    top_logprobs: tuple[TopLogprob, ...] = ()

    @token_bytes.default
    def _token_bytes(self) -> tuple[int, ...]:
        return _utf8(self.token)

    def to_json(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "logprob": _logprob(self.logprob),
            "bytes": list(self.token_bytes) if self.token_bytes is not None else None,
            "top_logprobs": [top.to_json() for top in self.top_logprobs],
        }


@attrs.frozen
class Usage:
    """Token counts of one response."""

    prompt_tokens: int = attrs.field(validator=_non_negative)
    completion_tokens: int = attrs.field(validator=_non_negative)
    reasoning_tokens: int | None = attrs.field(default=None, validator=_non_negative)
    cached_tokens: int | None = attrs.field(default=None, validator=_non_negative)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage


def _id_list(ids: Sequence[int]) -> Sequence[int]:
    """Ids as JSON can write them: the session's prompt ids are an ``array('i')`` (kept so on the request path;
    a list only when shown)."""
    return ids.tolist() if isinstance(ids, array) else ids


@attrs.frozen
class TokenExtras:
    """The token-level extension fields (spec 3.1); ``None`` fields are left out. Sequences are not copied."""

    prompt_token_ids: Sequence[int] | None = None
    token_ids: Sequence[int] | None = None
    token_logprobs: Sequence[float] | None = None
    weight_versions: Sequence[str | None] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.prompt_token_ids is not None:
            out["prompt_token_ids"] = _id_list(self.prompt_token_ids)
        if self.token_ids is not None:
            out["token_ids"] = self.token_ids
        if self.token_logprobs is not None:
            logprobs = self.token_logprobs
            out["token_logprobs"] = logprobs if all(map(math.isfinite, logprobs)) else [_logprob(x) for x in logprobs]
        if self.weight_versions is not None:
            out["weight_versions"] = self.weight_versions
        return out


@attrs.frozen
class AssistantTurn:
    """A finished assistant answer, however it was parsed."""

    content: str | None
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    #: the generation stopped because the token budget ran out
    truncated: bool = False

    @property
    def finish_reason(self) -> FinishReason:
        if self.truncated:
            return FinishReason.LENGTH
        return FinishReason.TOOL_CALLS if self.tool_calls else FinishReason.STOP

    def message_json(self) -> dict[str, Any]:
        """``choices[0].message``."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content is not None:
            message["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            message["tool_calls"] = [call.to_json() for call in self.tool_calls]
        return message

    def as_deltas(self) -> tuple[Delta, ...]:
        """The turn as streaming deltas (reasoning, content, then one delta per whole tool call), for a response
        that is streamed only once the answer is complete."""
        deltas = []
        if self.reasoning_content:
            deltas.append(Delta(reasoning_content=self.reasoning_content))
        if self.content:
            deltas.append(Delta(content=self.content))
        deltas.extend(Delta(tool_calls=(ToolCallDelta.whole(i, call),)) for i, call in enumerate(self.tool_calls))
        return tuple(deltas)


@attrs.frozen
class ToolCallDelta:
    """One piece of a streamed tool call: the first piece of call ``index`` has ``id`` and ``name``."""

    index: int = attrs.field(validator=_non_negative)
    id: str | None = None
    name: str | None = None
    #: a fragment of the arguments' JSON text
    arguments: str = ""

    @classmethod
    def whole(cls, index: int, call: ToolCall) -> ToolCallDelta:
        """A complete tool call as one delta."""
        return cls(index, call.id, call.name, call.arguments)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index}
        if self.id is not None:
            out["id"] = self.id
            out["type"] = "function"
        function: dict[str, Any] = {}
        if self.name is not None:
            function["name"] = self.name
        function["arguments"] = self.arguments
        out["function"] = function
        return out


@attrs.frozen
class Delta:
    """One streaming increment of the answer."""

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCallDelta, ...] = ()
    #: the logprobs of the tokens this delta carries (rendered only when the request asked for logprobs)
    logprobs: tuple[TokenLogprob, ...] = ()
    #: the token extension fields of this delta's tokens (rendered only when the response carries extras)
    extras: TokenExtras | None = None

    def delta_json(self) -> dict[str, Any]:
        """``choices[0].delta``."""
        delta: dict[str, Any] = {}
        if self.reasoning_content is not None:
            delta["reasoning_content"] = self.reasoning_content
        if self.content is not None:
            delta["content"] = self.content
        if self.tool_calls:
            delta["tool_calls"] = [call.to_json() for call in self.tool_calls]
        return delta


# -- non-streaming -----------------------------------------------------------------------------------------------------


def report_json(report: Any) -> Any:
    """An attrs report (statistics, a debug view) as a JSON-ready dict. Enums by name: the machines' enum values
    are one-line descriptions, their names the stable identifiers the API documents (``RUNNING``, ``ACTIVE``)."""
    return attrs.asdict(report, value_serializer=lambda _i, _a, v: v.name if isinstance(v, enum.Enum) else v)


def render_completion(
    meta: CompletionMeta,
    turn: AssistantTurn,
    usage: Usage,
    *,
    logprobs: Sequence[TokenLogprob] | None = None,
    extras: TokenExtras | None = None,
    index: int = 0,
) -> dict[str, Any]:
    """The ``chat.completion`` object with one choice (``index``); ``logprobs`` only when the request asked for them
    (else ``null``)."""
    completion: dict[str, Any] = {
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [
            {
                "index": index,
                "message": turn.message_json(),
                "logprobs": _logprobs_json(logprobs),
                "finish_reason": turn.finish_reason.value,
            }
        ],
        "usage": usage.to_json(),
    }
    if extras is not None:
        completion.update(extras.to_json())
    return completion


def _logprobs_json(logprobs: Sequence[TokenLogprob] | None) -> dict[str, Any] | None:
    if logprobs is None:
        return None
    return {"content": [entry.to_json() for entry in logprobs], "refusal": None}


# -- streaming ---------------------------------------------------------------------------------------------------------


@attrs.frozen
class ChunkFormat:
    """How one streamed response renders its chunks (fixed by the request): build it once, call it per event."""

    meta: CompletionMeta
    #: ``stream_options.include_usage``: end with a usage chunk (``choices: []``)
    include_usage: bool = False
    #: the request asked for ``logprobs``
    logprobs: bool = False
    #: the response carries the token extension fields
    token_extras: bool = False
    #: the choice these chunks belong to (``n > 1``: one format per choice)
    index: int = 0

    @classmethod
    def for_request(
        cls, request: ChatCompletionRequest, meta: CompletionMeta, *, token_ids_default: bool = False
    ) -> ChunkFormat:
        """The format a request asks for; ``token_ids_default`` is the server flag for the token extension."""
        return cls(meta, request.include_usage, request.logprobs, request.wants_token_ids(token_ids_default))

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.meta.id,
            "object": "chat.completion.chunk",
            "created": self.meta.created,
            "model": self.meta.model,
            "choices": choices,
        }

    def first(self, *, prompt_token_ids: Sequence[int] | None = None) -> dict[str, Any]:
        """The opening chunk: the assistant role (and the prompt ids, with extras)."""
        role = {"role": "assistant", "content": ""}
        chunk = self._chunk([{"index": self.index, "delta": role, "logprobs": None, "finish_reason": None}])
        if self.token_extras and prompt_token_ids is not None:
            chunk["prompt_token_ids"] = _id_list(prompt_token_ids)
        return chunk

    def delta(self, delta: Delta) -> dict[str, Any]:
        """One content, reasoning or tool-call increment."""
        logprobs = _logprobs_json(delta.logprobs) if self.logprobs and delta.logprobs else None
        chunk = self._chunk(
            [{"index": self.index, "delta": delta.delta_json(), "logprobs": logprobs, "finish_reason": None}]
        )
        if self.token_extras and delta.extras is not None:
            chunk.update(delta.extras.to_json())
        return chunk

    def finish(self, finish_reason: FinishReason | str, usage: Usage | None = None) -> list[dict[str, Any]]:
        """The closing chunk with ``finish_reason``, then the usage chunk when the request asked for usage."""
        reason = FinishReason(finish_reason).value
        chunks = [self._chunk([{"index": self.index, "delta": {}, "logprobs": None, "finish_reason": reason}])]
        if self.include_usage and usage is not None:
            chunks.append(self.usage_chunk(usage))
        return chunks

    def usage_chunk(self, usage: Usage) -> dict[str, Any]:
        """The usage chunk (``choices: []``) that ends a stream whose request set ``stream_options.include_usage``."""
        return {**self._chunk([]), "usage": usage.to_json()}


# -- JSON and SSE ------------------------------------------------------------------------------------------------------


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON (see the module docstring for the escaping rules). orjson writes it (issue 21: every body
    out, ~5-10x the stdlib's speed); what orjson refuses (a lone surrogate, an int beyond 64 bits, a non-string key,
    a non-finite float, which orjson would write as ``null``) is written by the stdlib as before."""
    return _dumps(value, finite=False)


def _dumps(value: Any, *, finite: bool) -> bytes:
    """:func:`dumps`; ``finite``: the caller knows ``value`` holds no NaN or infinity, so the walk that looks for one
    (most of the cost of a small chunk: every chunk holds a ``null``) is skipped."""
    try:
        data = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return _stdlib_dumps(value)
    if not finite and b"null" in data and has_non_finite(value):
        return _stdlib_dumps(value)
    if b"\xc2\x85" in data or b"\xe2\x80" in data:
        for char in _LINE_BREAKS_OUTSIDE_JSON:
            data = data.replace(char.encode("utf-8"), f"\\u{ord(char):04x}".encode("ascii"))
    return data


def _stdlib_dumps(value: Any) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char in _LINE_BREAKS_OUTSIDE_JSON:
        if char in text:
            text = text.replace(char, f"\\u{ord(char):04x}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: JSON's \\u escapes can carry it, UTF-8 cannot.
        return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def sse_event(event: Mapping[str, Any]) -> bytes:
    """One SSE event: ``data: <json>`` and a blank line. Its events are this module's chunks and errors, whose only
    floats are logprobs, floored when not finite (:data:`LOGPROB_FLOOR`): written without the non-finite walk, the
    same bytes as :func:`dumps` (``tests/api/test_render.py`` holds them to it with NaN and infinite
    logprobs), 3-4x cheaper per chunk (docs/benchmarks.md)."""
    return b"data: " + _dumps(event, finite=True) + b"\n\n"


def sse_events(events: Iterable[Mapping[str, Any] | bytes]) -> bytes:
    """Several events framed into one blob (already-framed ``bytes``, such as :data:`SSE_DONE`, pass as they are)."""
    return b"".join(event if isinstance(event, bytes) else sse_event(event) for event in events)


def sse_error(error: ApiError) -> bytes:
    """An error met after the stream started, as an SSE event (then send :data:`SSE_DONE` and close)."""
    return sse_event(error.to_json())


__all__ = [
    "LOGPROB_FLOOR", "SSE_DONE", "AssistantTurn", "ChunkFormat", "CompletionMeta", "Delta", "FinishReason",
    "TokenExtras", "TokenLogprob", "ToolCall", "ToolCallDelta", "TopLogprob", "Usage", "dumps", "render_completion",
    "sse_error", "sse_event", "sse_events",
]
