"""One upstream request read to its end, and how its ending becomes a GenerationMachine event.

:func:`read_request` sends ``/generate`` and hands every token to a callback. It streams, except when the caller
asks otherwise: a non-streaming client's request goes upstream non-streaming when worker URLs are known, because a
closed stream is SGLang's only reliable abort signal without them, while with them ``/abort_request`` answers the
request with its partial tokens (sglang-protocol.md §2.2); streaming upstream costs the engine about twice the CPU
per request (cumulative chunks, ``bench/overhead.py``). Either way the caller sees the same token callbacks; it returns how the request ended instead of raising, so the generation controller turns every
ending into exactly one machine event (:func:`ending_event`). Cancellation (a pause's abort, a client gone) is never
caught here: the caller's cancel scope around the call says whether it fired.

Upstream failures become ``UpstreamFailed`` through the one error mapping
(``proxy/api/error_mapping.py:upstream_error``), which picks the code and the client's message and logs the
detail; the statuses are ``proxy/api/errors.py``'s table (``ERROR_TABLE``), never decided here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs

from proxy.api.error_mapping import upstream_error, upstream_failure, upstream_status
from proxy.api.errors import ApiError, ErrorCode
from proxy.upstream.errors import UpstreamError
from proxy.upstream.events import FinishAbort, Finished, FinishLength, FinishStop, Token
from statemachines.generation import FinishKind, UpstreamAborted, UpstreamFailed, UpstreamFinished


@attrs.frozen
class ReadOutcome:
    """How one upstream request ended (at most one of the two is set; neither: it ended without a final event)."""

    finished: Finished | None = None
    failure: UpstreamError | None = None


async def read_request(
    upstream: Any,
    input_ids: Sequence[int],
    sampling_params: Mapping[str, Any],
    *,
    rid: str,
    routing_key: str,
    on_tokens: Callable[[Sequence[Token]], Awaitable[None]],
    on_finished: Callable[[Finished], None] | None = None,
    return_routed_experts: bool = False,
    routed_experts_start_len: int | None = None,
    stream: bool = True,
    vocab_size: int | None = None,
    top_logprobs_num: int = 0,
) -> ReadOutcome:
    """Stream one ``/generate`` request; ``on_tokens`` is awaited with the tokens of every read, in order, and
    ``on_finished`` called with the final event as soon as it arrives (before the stream is read to its end, during
    which a cancellation may still come: the caller then knows the request had finished anyway). ``vocab_size``
    (the tokenizer's) bounds the token ids the answer may hold: an id outside it is a protocol error.

    Returns the final event or the ``UpstreamError`` (tokens received before it were handed out already). Leaving
    early (a cancellation) closes the stream at once, which SGLang (and the embedded engine) treat as an abort.
    """
    finished: Finished | None = None
    # The client's top_logprobs: SGLang's top-level top_logprobs_num (its OpenAI server's mapping).
    extra = {"top_logprobs_num": top_logprobs_num} if top_logprobs_num else None
    if not stream:
        return await _read_whole(
            upstream, input_ids, sampling_params, rid=rid, routing_key=routing_key, on_tokens=on_tokens,
            on_finished=on_finished, return_routed_experts=return_routed_experts,
            routed_experts_start_len=routed_experts_start_len, vocab_size=vocab_size, extra_body=extra,
        )
    try:
        async with upstream.generate_stream(
            input_ids, sampling_params, rid=rid, routing_key=routing_key,
            return_routed_experts=return_routed_experts,
            routed_experts_start_len=routed_experts_start_len if return_routed_experts else None,
            vocab_size=vocab_size, extra_body=extra,
        ) as events:
            while batch := await events.receive_batch():
                # The tokens of one read go together (one machine step); the final event comes after them.
                tokens = [event for event in batch if isinstance(event, Token)]
                if tokens:
                    await on_tokens(tokens)
                for event in batch:
                    if isinstance(event, Finished):
                        finished = event
                        if on_finished is not None:
                            on_finished(event)
    except UpstreamError as exc:
        if finished is not None:
            # Failed while draining after the final event: the result is complete.
            return ReadOutcome(finished=finished)
        return ReadOutcome(failure=exc)
    return ReadOutcome(finished=finished)


async def _read_whole(
    upstream: Any,
    input_ids: Sequence[int],
    sampling_params: Mapping[str, Any],
    *,
    rid: str,
    routing_key: str,
    on_tokens: Callable[[Sequence[Token]], Awaitable[None]],
    on_finished: Callable[[Finished], None] | None,
    return_routed_experts: bool,
    routed_experts_start_len: int | None,
    vocab_size: int | None,
    extra_body: Mapping[str, Any] | None = None,
) -> ReadOutcome:
    """A non-streaming ``/generate``: its tokens are handed out in order once the answer arrives (an abort of the
    rid makes SGLang answer at once with the tokens generated so far), as one read, then the final event."""
    try:
        finished = await upstream.generate(
            input_ids, sampling_params, rid=rid, routing_key=routing_key,
            return_routed_experts=return_routed_experts,
            routed_experts_start_len=routed_experts_start_len if return_routed_experts else None,
            vocab_size=vocab_size, extra_body=extra_body,
        )
    except UpstreamError as exc:
        return ReadOutcome(failure=exc)
    tops = finished.output_top_logprobs or ((),) * len(finished.output_ids)
    tokens = [
        Token(index, token_id, logprob, version, top)
        for index, (token_id, logprob, version, top) in enumerate(
            zip(finished.output_ids, finished.output_logprobs, finished.weight_versions, tops, strict=True)
        )
    ]
    if tokens:
        await on_tokens(tokens)
    if on_finished is not None:
        on_finished(finished)
    return ReadOutcome(finished=finished)


def failure_event(error: UpstreamError) -> UpstreamFailed:
    """An upstream (or parser-backend) failure as the machine's ``UpstreamFailed``: code, status and message are the
    one mapping's (``proxy/api/error_mapping.py``), which logs the detail with the request id."""
    return _as_event(upstream_error(error))


def _as_event(answer: ApiError) -> UpstreamFailed:
    return UpstreamFailed(answer.status, str(answer.code), answer.message)


def ending_event(outcome: ReadOutcome, tokens: int) -> UpstreamFinished | UpstreamAborted | UpstreamFailed:
    """The machine event for a request that ended by itself after ``tokens`` accepted tokens (a request our own
    cancel scope cut is ``UpstreamAborted(tokens)``, decided by the caller)."""
    if outcome.failure is not None:
        return failure_event(outcome.failure)
    finished = outcome.finished
    if finished is None:
        return _as_event(upstream_failure(
            ErrorCode.UPSTREAM_ERROR, "the upstream SGLang stream ended without a final event",
            "the stream ended without a final event",
        ))
    reason = finished.finish_reason
    if isinstance(reason, FinishStop):
        return UpstreamFinished(FinishKind.STOP, tokens)
    if isinstance(reason, FinishLength):
        return UpstreamFinished(FinishKind.LENGTH, tokens)
    assert isinstance(reason, FinishAbort)
    if reason.is_error:
        status = reason.status_code or 500
        code, message = upstream_status(status, f"an error abort {status}", reason.message, any_4xx_refuses=True)
        detail = f"SGLang aborted the request ({status}): {reason.message or 'no message'}"
        return _as_event(upstream_failure(code, message, detail))
    return UpstreamAborted(tokens)


__all__ = ["ReadOutcome", "ending_event", "failure_event", "read_request"]
