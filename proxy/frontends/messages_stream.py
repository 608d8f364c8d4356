"""``POST /v1/messages`` with ``stream: true``: the chat stream's chunks rewritten as Anthropic's typed SSE.

:class:`MessageStreamWriter` is pure: ``start()`` gives the opening events, ``feed(chunk)`` the events of one
``chat.completion.chunk`` dict, ``finish(matched_stop)`` the closing ones, each a list of ``(event type, data)``.
:func:`sse_body` drives it over ``ChatRun.chunks`` and frames each event as ``event: <type>\\ndata: <json>\\n\\n``.

The events, as Anthropic's API sends them and the SDK's ``messages.stream()`` accumulates them
(``anthropic.lib.streaming._messages.accumulate_event``)::

    message_start {message: {id, type, role, model, content: [], stop_reason: null, stop_sequence: null,
                             usage: {input_tokens, output_tokens: 0, ...}}}
    ping
    content_block_start {index, content_block: {type: "thinking", thinking: "", signature: ""}}
    content_block_delta {index, delta: {type: "thinking_delta", thinking}} ...
    content_block_delta {index, delta: {type: "signature_delta", signature}}   (once the thinking is whole)
    content_block_stop {index}
    content_block_start {index, content_block: {type: "text", text: ""}}  ... text_delta ... content_block_stop
    content_block_start {index, content_block: {type: "tool_use", id, name, input: {}}}
    content_block_delta {index, delta: {type: "input_json_delta", partial_json}} ... content_block_stop
    message_delta {delta: {stop_reason, stop_sequence}, usage: {input_tokens, output_tokens, ...}}
    message_stop

A block opens when the kind of delta changes (reasoning, content, or a new tool call) and closes when the next one
opens or the stream ends, so the blocks' texts concatenate to exactly the recorded message, as in the
non-streaming ``Message`` (``messages_output.py``). An error the chat stream ends in becomes an ``event: error``
(``messages_errors.py``) and the stream ends there, without ``message_stop``, as Anthropic's does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import attrs

from proxy.api import dumps
from proxy.frontends.messages_errors import sse_error_event
from proxy.frontends.messages_output import stop_reason, thinking_signature, usage_json

Event = tuple[str, dict[str, Any]]


@attrs.define
class MessageStreamWriter:
    """The Anthropic events of one streamed answer (module docstring)."""

    message_id: str
    model: str
    input_tokens: int
    stop_sequences: Sequence[str] | None = None
    #: false under ``thinking.display: "omitted"``: thinking blocks carry no thinking_delta, only their signature
    show_thinking: bool = True
    _index: int = -1
    #: the open block: "thinking", "text", ("tool", chat call index), or None
    _open: Any = None
    _thinking: list[str] = attrs.field(factory=list)
    _finish_reason: str | None = None
    _usage: dict[str, Any] | None = None

    def start(self) -> list[Event]:
        usage = usage_json({"prompt_tokens": self.input_tokens})
        message = {
            "id": self.message_id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": usage,
        }
        return [("message_start", {"type": "message_start", "message": message}), ("ping", {"type": "ping"})]

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                events += self._text_delta("thinking", delta["reasoning_content"])
            if delta.get("content"):
                events += self._text_delta("text", delta["content"])
            for call in delta.get("tool_calls") or ():
                events += self._tool_delta(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return events

    def finish(self, matched_stop: Any) -> list[Event]:
        events = self._close()
        reason, sequence = stop_reason(self._finish_reason, matched_stop, self.stop_sequences)
        usage = usage_json(self._usage or {"prompt_tokens": self.input_tokens})
        events.append(("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage,
        }))
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    # -- blocks -----------------------------------------------------------------------------------------------------

    def _text_delta(self, kind: str, text: str) -> list[Event]:
        events: list[Event] = []
        if self._open != kind:
            events += self._close()
            block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else \
                {"type": "text", "text": ""}
            events.append(self._open_block(kind, block))
        if kind == "thinking":
            self._thinking.append(text)
            if not self.show_thinking:
                return events
            delta = {"type": "thinking_delta", "thinking": text}
        else:
            delta = {"type": "text_delta", "text": text}
        events.append(("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta}))
        return events

    def _tool_delta(self, call: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        key = ("tool", call.get("index", 0))
        function = call.get("function") or {}
        if call.get("id") is not None or self._open != key:
            events += self._close()
            block = {"type": "tool_use", "id": call.get("id") or "", "name": function.get("name") or "", "input": {}}
            events.append(self._open_block(key, block))
        fragment = function.get("arguments") or ""
        if fragment:
            delta = {"type": "input_json_delta", "partial_json": fragment}
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta})
            )
        return events

    def _open_block(self, kind: Any, block: dict[str, Any]) -> Event:
        self._index += 1
        self._open = kind
        return ("content_block_start", {"type": "content_block_start", "index": self._index, "content_block": block})

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        events: list[Event] = []
        if self._open == "thinking":
            signature = thinking_signature("".join(self._thinking))
            self._thinking = []
            delta = {"type": "signature_delta", "signature": signature}
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta})
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": self._index}))
        self._open = None
        return events


def frame(events: Sequence[Event]) -> bytes:
    """Events as SSE bytes (``event:`` and ``data:`` lines, a blank line after each)."""
    return b"".join(b"event: " + kind.encode() + b"\ndata: " + dumps(data) + b"\n\n" for kind, data in events)


async def sse_body(
    writer: MessageStreamWriter, chunks: AsyncIterator[dict[str, Any]], matched_stop: Callable[[], Any]
) -> AsyncIterator[bytes]:
    """The SSE body: the opening events, one blob per chat chunk that made events, the closing events (or the error
    event the chat stream ended in). ``matched_stop()`` is read once the stream is whole."""
    yield frame(writer.start())
    try:
        async for chunk in chunks:
            if "error" in chunk and "choices" not in chunk:
                yield sse_error_event(chunk)
                return
            events = writer.feed(chunk)
            if events:
                yield frame(events)
        yield frame(writer.finish(matched_stop()))
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()  # before its end (the client left): the generation hears of it


__all__ = ["MessageStreamWriter", "frame", "sse_body"]
