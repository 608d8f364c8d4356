"""Run a translated request through the generation controller and read its answer as chat-completions objects.

A protocol front end (``proxy/frontends/``) builds a :class:`~proxy.api.ChatCompletionRequest` from its own body
(the internal conversation model: messages, tools, sampling), then:

- non-streaming: ``await run.completion()``: the ``chat.completion`` dict (raises the ``ApiError`` to answer);
- streaming: ``await run.first_chunk()`` (raises the ``ApiError`` to answer with its status, nothing sent yet),
  then ``run.chunks(first)``: every ``chat.completion.chunk`` dict in order, then an error dict
  (``{"error": {...}}``, :meth:`ApiError.to_json`) if the stream ended in one; ``[DONE]`` is not yielded.

The chunks are read back from the chat stream's own SSE bytes, so a front end sees exactly what a chat client would
(the same deltas, the same usage chunk when the request asked for ``include_usage``). Closing the ``chunks``
iterator before its end (the client left) tells the generation, as the chat route's body does; the exchange's end
does too (``proxy/request_end.py``), for a body that never started.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import attrs
import trio

from proxy.api import ChatCompletionRequest
from proxy.controllers.choices import ChoiceSet
from proxy.controllers.generation_driver import Generation
from proxy.request_end import on_request_end

_DONE = b"[DONE]"


@attrs.define
class ChatRun:
    """One started generation (or ``n`` of them) of a translated request."""

    generation: Generation | ChoiceSet
    stream: bool

    @classmethod
    async def start(
        cls, controller: Any, chat: ChatCompletionRequest, nursery: trio.Nursery, scope: MutableMapping[str, Any],
    ) -> ChatRun:
        """Prepare and start the step (raises ``ApiError`` for a refusal); ``scope`` is the ASGI scope of the
        exchange, whose end tells the generation its client is gone (a no-op after a delivered answer)."""
        generation: Generation | ChoiceSet
        if chat.n > 1:
            generation = await ChoiceSet.start(controller, chat, nursery)
        else:
            generation = await controller.start(chat, nursery)
        on_request_end(scope, generation.client_gone)
        return cls(generation, chat.stream)

    async def completion(self) -> dict[str, Any]:
        """Non-streaming: the ``chat.completion`` object."""
        return await self.generation.result()

    async def first_chunk(self) -> bytes:
        """Streaming: the first SSE bytes (the stream is open), or raises the ``ApiError`` to answer instead."""
        return await self.generation.first_output()

    async def chunks(self, first: bytes) -> AsyncIterator[dict[str, Any]]:
        """Every chunk dict of the stream (and a final error dict if it ended in one), parsed back from its SSE."""
        body = self.generation.sse_body(first)
        try:
            pending = b""
            async for blob in body:
                pending += blob
                *events, pending = pending.split(b"\n\n")
                for event in events:
                    data = _sse_data(event)
                    if data is None or data == _DONE:
                        continue
                    yield json.loads(data)
        finally:
            await body.aclose()  # before its end: the generation hears its client left


def _sse_data(event: bytes) -> bytes | None:
    """The ``data:`` payload of one SSE event (the chat stream writes exactly one ``data:`` line per event)."""
    for line in event.split(b"\n"):
        if line.startswith(b"data: "):
            return line[6:]
    return None


__all__ = ["ChatRun"]
