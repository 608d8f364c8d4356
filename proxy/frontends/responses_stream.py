"""The chat answer as a Responses API answer: chat-completion chunks in, typed Responses events out, and the final
``Response`` object (both modes: the route always reads the chat answer as a stream, so a non-streaming client gets
exactly the object a streaming one accumulates).

One :class:`ResponseEvents` per answer. Events carry ``sequence_number`` from 0, in this order (OpenAI's):
``response.created``, ``response.in_progress``; per output item ``response.output_item.added``, for a reasoning or
message item ``response.content_part.added``, its deltas (``response.reasoning_text.delta``,
``response.output_text.delta``, ``response.function_call_arguments.delta``), their ``.done``,
``response.content_part.done``, ``response.output_item.done``; with ``reasoning.summary`` set, the reasoning item
also streams its text as its summary (``response.reasoning_summary_part.added``,
``response.reasoning_summary_text.delta`` / ``.done``, ``response.reasoning_summary_part.done``); then ``response.completed`` (or
``response.incomplete`` when the answer hit ``max_output_tokens``). A stream that ends in an error gets an
``error`` event and ``response.failed``.

Output items, in the order the model produced them: ``reasoning`` (its text in ``content`` as ``reasoning_text``;
also in ``summary`` when the request set ``reasoning.summary``; and as ``encrypted_content`` when it included
``reasoning.encrypted_content``), ``message`` (one ``output_text``), ``function_call`` per tool call (``call_id`` is
the chat tool call id the trajectory records). Only one item is open at a time: the proxy's parser emits the
reasoning, then the content, then the calls one after another.

Logprobs (``include: ["message.output_text.logprobs"]``): each ``output_text.delta`` carries the logprobs the chat
stream attached to its text; the text part's ``logprobs`` collects them. Tokens the chat stream attached to
reasoning or tool-call deltas are not text and are not listed (the exported trajectory has every token's logprob).
"""

from __future__ import annotations

from typing import Any

from proxy.frontends.responses_items import encrypt_reasoning, item_id
from proxy.random_ids import random_hex

#: chat ``finish_reason`` values that make a Response ``incomplete``, with OpenAI's reason
INCOMPLETE = {"length": "max_output_tokens"}


def new_id(prefix: str) -> str:
    return f"{prefix}_{random_hex()}"


class ResponseEvents:
    """Translates one chat answer; ``response`` is the Response object as it stands (final after :meth:`finish`)."""

    def __init__(
        self, response_id: str, echo: dict[str, Any], *, model: str, created_at: int, logprobs: bool = False,
        reasoning_summary: bool = False, encrypted_reasoning: bool = False, namespaces: dict[str, str] | None = None,
    ) -> None:
        self.response: dict[str, Any] = {
            "id": response_id, "object": "response", "created_at": created_at, "status": "in_progress",
            "error": None, "incomplete_details": None, "model": model, "output": [], "usage": None, **echo,
        }
        self._logprobs = logprobs
        self._summary = reasoning_summary
        self._encrypted = encrypted_reasoning
        self._namespaces = namespaces or {}
        self._sequence = 0
        self._open: dict[str, Any] | None = None  # the item being streamed
        self._calls: dict[int, dict[str, Any]] = {}  # chat tool-call index -> its function_call item
        self._finish_reason: str | None = None
        # Item ids carry the response's tag (``responses_items.item_id``): an echo tells its turns apart by it.
        self._tag = response_id.partition("_")[2] or response_id

    # -- events -------------------------------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _snapshot(self) -> dict[str, Any]:
        return {**self.response, "output": [dict(item) for item in self.response["output"]]}

    def opening(self) -> list[dict[str, Any]]:
        return [
            self._event("response.created", response=self._snapshot()),
            self._event("response.in_progress", response=self._snapshot()),
        ]

    def on_chunk(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The events of one ``chat.completion.chunk`` (its usage chunk included)."""
        events: list[dict[str, Any]] = []
        if chunk.get("model"):
            self.response["model"] = chunk["model"]
        usage = chunk.get("usage")
        if usage:
            self.response["usage"] = _usage(usage)
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            logprobs = (choice.get("logprobs") or {}).get("content") or []
            if delta.get("reasoning_content"):
                events += self._reasoning(delta["reasoning_content"])
            if delta.get("content"):
                events += self._text(delta["content"], logprobs)
            for call in delta.get("tool_calls") or ():
                events += self._call(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return events

    def finish(self) -> list[dict[str, Any]]:
        """Close the open item; ``response.completed`` (or ``response.incomplete``)."""
        events = self._close()
        reason = INCOMPLETE.get(self._finish_reason or "")
        if reason is not None:
            self.response["status"] = "incomplete"
            self.response["incomplete_details"] = {"reason": reason}
            for item in self.response["output"]:
                item["status"] = "incomplete"
            events.append(self._event("response.incomplete", response=self._snapshot()))
        else:
            self.response["status"] = "completed"
            events.append(self._event("response.completed", response=self._snapshot()))
        return events

    def failed(self, error: dict[str, Any]) -> list[dict[str, Any]]:
        """The stream ended in ``error`` (the chat error object): ``error`` then ``response.failed``."""
        self.response["status"] = "failed"
        self.response["error"] = {"code": "server_error", "message": str(error.get("message", "upstream error"))}
        return [
            self._event("error", code=error.get("code"), message=error.get("message", ""), param=error.get("param")),
            self._event("response.failed", response=self._snapshot()),
        ]

    # -- items --------------------------------------------------------------------------------------------------

    def _item_id(self, prefix: str) -> str:
        return item_id(prefix, self._tag, len(self.response["output"]))

    def _begin(self, item: dict[str, Any], part: dict[str, Any] | None) -> list[dict[str, Any]]:
        events = self._close()
        self._open = item
        index = len(self.response["output"])
        self.response["output"].append(item)
        # As OpenAI: the added item has no content yet; its part comes with ``content_part.added``.
        added = {**item, "content": []} if "content" in item else dict(item)
        events.append(self._event("response.output_item.added", output_index=index, item=added))
        if part is not None:
            events.append(self._event(
                "response.content_part.added", item_id=item["id"], output_index=index, content_index=0,
                part=dict(part),
            ))
        return events

    def _close(self) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = self.response["output"].index(item)
        where = {"item_id": item["id"], "output_index": index}
        events = []
        if item["type"] == "reasoning":
            text = item["content"][0]["text"]
            events.append(self._event("response.reasoning_text.done", **where, content_index=0, text=text))
            events.append(self._event("response.content_part.done", **where, content_index=0,
                                      part=dict(item["content"][0])))
            if self._summary:
                part = {"type": "summary_text", "text": text}
                events.append(self._event("response.reasoning_summary_text.done", **where, summary_index=0,
                                          text=text))
                events.append(self._event("response.reasoning_summary_part.done", **where, summary_index=0,
                                          part=dict(part)))
                item["summary"] = [part]
            if self._encrypted:
                item["encrypted_content"] = encrypt_reasoning(text)
        elif item["type"] == "message":
            part = item["content"][0]
            events.append(self._event("response.output_text.done", **where, content_index=0, text=part["text"],
                                      logprobs=list(part.get("logprobs") or [])))
            events.append(self._event("response.content_part.done", **where, content_index=0, part=dict(part)))
        else:
            events.append(self._event("response.function_call_arguments.done", **where, name=item["name"],
                                      arguments=item["arguments"]))
        item["status"] = "completed"
        events.append(self._event("response.output_item.done", output_index=index, item=_copy(item)))
        return events

    def _reasoning(self, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        opening = self._open is None or self._open["type"] != "reasoning"
        if opening:
            part = {"type": "reasoning_text", "text": ""}
            events += self._begin({"id": self._item_id("rs"), "type": "reasoning", "summary": [], "content": [part],
                                   "status": "in_progress"}, part)
        item = self._open
        assert item is not None
        where = {"item_id": item["id"], "output_index": len(self.response["output"]) - 1}
        if opening and self._summary:  # the summary is the reasoning itself, streamed along (Codex CLI shows it)
            events.append(self._event("response.reasoning_summary_part.added", **where, summary_index=0,
                                      part={"type": "summary_text", "text": ""}))
        item["content"][0]["text"] += text
        events.append(self._event("response.reasoning_text.delta", **where, content_index=0, delta=text))
        if self._summary:
            events.append(self._event("response.reasoning_summary_text.delta", **where, summary_index=0, delta=text))
        return events

    def _text(self, text: str, logprobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._open is None or self._open["type"] != "message":
            part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
            if self._logprobs:
                part["logprobs"] = []
            events += self._begin({"id": self._item_id("msg"), "type": "message", "role": "assistant", "content": [part],
                                   "status": "in_progress"}, part)
        item = self._open
        assert item is not None
        part = item["content"][0]
        part["text"] += text
        if self._logprobs:
            part["logprobs"].extend(logprobs)
        events.append(self._event("response.output_text.delta", item_id=item["id"],
                                  output_index=len(self.response["output"]) - 1, content_index=0, delta=text,
                                  logprobs=list(logprobs) if self._logprobs else []))
        return events

    def _call(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        index = call.get("index", 0)
        function = call.get("function") or {}
        item = self._calls.get(index)
        if item is None:
            item = {"id": self._item_id("fc"), "type": "function_call", "call_id": call.get("id") or new_id("call"),
                    "name": function.get("name") or "", "arguments": "", "status": "in_progress"}
            if item["name"] in self._namespaces:
                item["namespace"] = self._namespaces[item["name"]]
            self._calls[index] = item
            events += self._begin(item, None)
        arguments = function.get("arguments") or ""
        if arguments:
            item["arguments"] += arguments
            events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                      output_index=self.response["output"].index(item), delta=arguments))
        return events


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    out = dict(item)
    if "content" in out:
        out["content"] = [dict(part) for part in out["content"]]
    return out


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.get("total_tokens", prompt + completion),
    }


__all__ = ["ResponseEvents", "new_id"]
