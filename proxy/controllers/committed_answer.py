"""The answer of a committed step, rendered again from its journal record: how an Idempotency-Key restored after a
restart answers its repeat (``proxy/controllers/idempotency.py``, "Across a restart").

The bytes the first request was sent were never durable (they are rendered after the step's journal write, and a
crash in between is exactly the case this serves), so the answer is rendered again, by the renderer every live answer
uses (``proxy/controllers/response_render.py:ResponseRenderer``), from what the step recorded: the assistant
message, the finish reason, the generated ids with their chosen-token logprobs and weight versions, and the prompt's
tokens as the replay rebuilt them (the usage and ``prompt_token_ids``). The request that asks again has the same
fingerprint as the first, so it is the same request: its ``stream``, ``logprobs``, ``top_logprobs``, ``model`` and
token-id options decide the shape, as they did the first time.

What differs from the bytes the first request would have received (``docs/api.md``, "Idempotency-Key"):

- ``id`` and ``created`` are new (the first answer's were never journaled);
- ``top_logprobs`` lists are empty (the step keeps the chosen tokens' logprobs only);
- a stream is the same answer in fewer chunks: the opening chunk, one delta per part of the message (reasoning,
  content, each tool call's name then arguments) carrying every token's logprobs and ids on the first delta, the
  finish chunk, the usage chunk when asked, ``[DONE]``. Reassembled, it is the same message, finish and usage.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from proxy.api import ChatCompletionRequest, CompletionMeta, Usage, dumps
from proxy.controllers.idempotency import RecordedResponse
from proxy.controllers.response_render import ResponseRenderer
from proxy.parsing import ContentDelta, ParsedMessage, ReasoningDelta, ToolCall, ToolCallDelta
from proxy.random_ids import new_completion_id
from proxy.trajectory.session_replay import KeyedStep
from proxy.trajectory.tokens import expand_runs
from proxy.upstream.events import Token

JSON = "application/json"
SSE = "text/event-stream"


def parsed_message(message: Mapping[str, Any]) -> ParsedMessage:
    """The parsed message a step recorded (``ParsedMessage.to_openai``'s output) as the renderer takes it."""
    calls = tuple(
        ToolCall(call["id"], call["function"]["name"], call["function"]["arguments"])
        for call in message.get("tool_calls") or ()
    )
    return ParsedMessage(message.get("content") or "", message.get("reasoning_content"), calls)


def _deltas(message: ParsedMessage) -> list[Any]:
    """The message as stream deltas, in the order a live stream sends them (reasoning, content, tool calls)."""
    deltas: list[Any] = []
    if message.reasoning_content:
        deltas.append(ReasoningDelta(message.reasoning_content))
    if message.content:
        deltas.append(ContentDelta(message.content))
    for index, call in enumerate(message.tool_calls):
        deltas.append(ToolCallDelta(index, call.id, call.name, ""))
        deltas.append(ToolCallDelta(index, None, None, call.arguments_json))
    return deltas


def render_committed(
    step: KeyedStep, request: ChatCompletionRequest, model: str, tokenizer: Any, end_ids: Collection[int],
    *, token_ids_default: bool,
) -> RecordedResponse:
    """The answer of ``step`` to ``request`` (its repeat), as the bytes to send and to remember under its key."""
    meta = CompletionMeta(new_completion_id(), int(time.time()), model)
    render = ResponseRenderer(request, meta, tokenizer, end_ids, token_ids_default=token_ids_default)
    message = parsed_message(step.assistant_message)
    ids = step.generated_ids.tolist()
    logprobs: Sequence[float | None] = step.logprobs.tolist() if step.logprobs is not None else [None] * len(ids)
    versions = expand_runs(step.version_runs)
    usage = Usage(step.tokens.prompt_length, len(ids))
    prompt_ids = step.tokens.input_ids() if request.wants_token_ids(token_ids_default) else None
    if not request.stream:
        body = render.completion(
            message, truncated=step.finish_reason == "length", usage=usage, prompt_ids=prompt_ids, ids=ids,
            logprobs=logprobs, versions=versions,
        )
        return RecordedResponse(dumps(body), JSON, False, step.step_id)
    parts: list[bytes] = []
    start = 0
    # The tokens by runs of one weight version (one renderer call each, as the live reads were); they ride on the
    # first delta chunk.
    while start < len(ids):
        end = start
        while end < len(ids) and versions[end] == versions[start]:
            end += 1
        tokens = [Token(i, ids[i], logprobs[i], versions[i]) for i in range(start, end)]
        parts.append(render.token_events(tokens, versions[start], (), prompt_ids))
        start = end
    reason = message.finish_reason(step.finish_reason)
    parts.append(render.final_events(_deltas(message), reason, usage, prompt_ids))
    return RecordedResponse(b"".join(parts), SSE, True, step.step_id)


__all__ = ["parsed_message", "render_committed"]
