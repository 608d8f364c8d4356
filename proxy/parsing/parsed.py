"""The parsers' results: a parsed assistant message, its tool calls, its flags, and the streaming deltas.

Every value is frozen. Invariants every parser upholds (whatever the backend):

* a :class:`ToolCall` has a non-empty ``name`` that is one of the offered tools, and ``arguments_json`` is strict
  JSON (no ``NaN``) encoding an object;
* markup that did not become a call (malformed, unknown tool, cut off) stays in ``content``, verbatim, and the
  message carries a flag saying why;
* streamed deltas concatenate to the message: ``"".join(content deltas) == content``, likewise for reasoning,
  and the tool-call deltas of index ``i`` build ``tool_calls[i]``.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs


class ParseFlag(enum.StrEnum):
    """Why a step's parse is not clean. The values are the strings recorded with the step."""

    MALFORMED_TOOL_CALL = "malformed_tool_call"
    """A ``<tool_call>`` block that does not parse (bad JSON, missing or empty name, arguments not an object, no
    function element, still open at the end of the output), or a stray ``</tool_call>``; the text is content."""
    UNKNOWN_TOOL = "unknown_tool"
    """A well-formed call to a tool the request did not offer; the block is content, no call is emitted."""
    PARSER_FALLBACK = "parser_fallback"
    """``hybrid``: SGLang could not be reached or failed, the local parser decided instead."""
    PARSER_MISMATCH = "parser_mismatch"
    """SGLang's decision (which it won) differs from the local parser's: worth a look, not an error."""


@attrs.frozen
class ToolCall:
    """One call, in OpenAI's terms. ``id`` is deterministic (:func:`~proxy.parsing.tool_call_ids.tool_call_id`)."""

    id: str
    name: str
    arguments_json: str

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments_json}}


@attrs.frozen
class ParsedMessage:
    """An assistant message parsed from the model's output text."""

    content: str
    """The answer text, stripped at both ends; ``""`` when there is none."""
    reasoning_content: str | None
    """The reasoning text (leading whitespace stripped), None when there was none or no reasoning type is set."""
    tool_calls: tuple[ToolCall, ...] = ()
    flags: frozenset[str] = frozenset()

    def finish_reason(self, upstream_reason: str) -> str:
        """The OpenAI ``finish_reason``: ``tool_calls`` when calls were made and generation stopped normally
        (as SGLang does), otherwise ``upstream_reason`` (``stop``, ``length``, ...)."""
        return "tool_calls" if self.tool_calls and upstream_reason == "stop" else upstream_reason

    def to_openai(self) -> dict[str, Any]:
        """The ``choices[0].message`` object. ``content`` is null when the message is only tool calls."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if self.tool_calls and not self.content else self.content,
        }
        if self.reasoning_content is not None:
            message["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        return message


@attrs.frozen
class ReasoningDelta:
    """More reasoning text."""

    text: str

    def to_openai(self) -> dict[str, Any]:
        return {"reasoning_content": self.text}


@attrs.frozen
class ContentDelta:
    """More answer text."""

    text: str

    def to_openai(self) -> dict[str, Any]:
        return {"content": self.text}


@attrs.frozen
class ToolCallDelta:
    """A piece of tool call ``index``, in OpenAI's streaming format: the first delta of a call carries ``id`` and
    ``name`` (and ``arguments_fragment == ""``), the later ones only ``arguments_fragment``."""

    index: int
    id: str | None
    name: str | None
    arguments_fragment: str

    def to_openai(self) -> dict[str, Any]:
        call: dict[str, Any] = {"index": self.index}
        if self.id is not None:
            call["id"] = self.id
            call["type"] = "function"
        function: dict[str, Any] = {"arguments": self.arguments_fragment}
        if self.name is not None:
            function = {"name": self.name, **function}
        call["function"] = function
        return {"tool_calls": [call]}


MessageDelta = ReasoningDelta | ContentDelta | ToolCallDelta


def merge_deltas(deltas: list[MessageDelta]) -> tuple[str, str, tuple[tuple[str | None, str | None, str], ...]]:
    """``(content, reasoning, calls)`` rebuilt from deltas the way an OpenAI client does: texts concatenated,
    each call's first ``id``/``name`` and its concatenated arguments. For tests and for the request path's checks."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, list[Any]] = {}
    for delta in deltas:
        if isinstance(delta, ContentDelta):
            content.append(delta.text)
        elif isinstance(delta, ReasoningDelta):
            reasoning.append(delta.text)
        else:
            call = calls.setdefault(delta.index, [None, None, ""])
            call[0] = call[0] if call[0] is not None else delta.id
            call[1] = call[1] if call[1] is not None else delta.name
            call[2] += delta.arguments_fragment
    return "".join(content), "".join(reasoning), tuple(tuple(calls[i]) for i in sorted(calls))  # type: ignore[misc]
