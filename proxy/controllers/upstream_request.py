"""A generation's upstream requests, one at a time: started, read to their end, cut by the abort policy.

Theory of operation
-------------------
:class:`UpstreamRequest` belongs to one generation (``proxy/controllers/generation_driver.py``); its driver calls
:meth:`UpstreamRequest.run` for every ``StartUpstream`` (the first request of a step, a continuation with the kept
tokens appended to its input, or a restart from scratch) and :meth:`UpstreamRequest.cut` for every
``AbortUpstream``. ``run`` draws a fresh rid, reports it (the machine's ``UpstreamStarted``, which may cut the request
at once: a pause came first), and reads the request in its own cancel scope, handing the tokens of every read to the
driver; it returns how the request ended (:class:`RequestEnd`), which the driver feeds as exactly one machine event.
Cancellation is never caught inside: the scope says whether our own cut fired.

The abort policy (``cut``): the request's scope is cancelled at once (the stream closes: SGLang and the embedded
engine abort a disconnected request) and its rid is aborted on the workers in the background, a pause's only once
the pause is acknowledged (posting hundreds of aborts at once delayed the acknowledgement itself). One exception, a
pause's cut of a request already sent, when worker URLs are known, and either routing replay with partial rollout
(SGLang sends routed experts only in a request's final chunk) or a non-streaming upstream request (its tokens come
only in its answer): the rid is aborted first and the request read to its abort finish, bounded by the gate's
``--pause-abort-timeout`` (``force_cut``: see :meth:`UpstreamRequest.cancel`).

:func:`read_request` sends ``/generate`` and hands every token to a callback. It streams, except when the caller
asks otherwise: a non-streaming client's request goes upstream non-streaming when worker URLs are known, because a
closed stream is SGLang's only reliable abort signal without them, while with them ``/abort_request`` answers the
request with its partial tokens (sglang-protocol.md §2.2); streaming upstream costs the engine about twice the CPU
per request (cumulative chunks, ``bench/overhead.py``). Either way the caller sees the same token callbacks; it
returns how the request ended instead of raising, so the driver turns every ending into exactly one machine event
(:func:`ending_event`).

Upstream failures become ``UpstreamFailed`` through the one error mapping
(``proxy/api/error_mapping.py:upstream_error``), which picks the code and the client's message and logs the
detail; the statuses are ``proxy/api/errors.py``'s table (``ERROR_TABLE``), never decided here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs
import trio

from proxy.api import ChatCompletionRequest
from proxy.api.error_mapping import upstream_error, upstream_failure, upstream_status
from proxy.api.errors import ApiError, ErrorCode
from proxy.config import ProxyConfig
from proxy.controllers.gate import GateController
from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import UpstreamError
from proxy.upstream.events import FinishAbort, Finished, FinishLength, FinishStop, Token
from proxy.upstream.request_ids import new_rid
from statemachines.generation import FinishKind, StartUpstream, UpstreamAborted, UpstreamFailed, UpstreamFinished

log = logging.getLogger("dressage_proxy.upstream")

#: how long a background abort of an upstream rid may take
ABORT_TIMEOUT = 10.0


@attrs.frozen
class ReadOutcome:
    """How one upstream request ended (at most one of the two is set; neither: it ended without a final event)."""

    finished: Finished | None = None
    failure: UpstreamError | None = None


@attrs.frozen
class RequestEnd:
    """How one upstream request ended, for its driver: read to its end (``outcome``), or ``cut`` by our own cancel
    before it finished, after ``accepted`` of its tokens were accepted by the machine."""

    outcome: ReadOutcome
    cut: bool
    accepted: int

    def event(self) -> UpstreamFinished | UpstreamAborted | UpstreamFailed:
        """The one machine event: a request our cut ended acknowledges the abort with the tokens accepted."""
        return UpstreamAborted(self.accepted) if self.cut else ending_event(self.outcome, self.accepted)


@attrs.define(eq=False)
class UpstreamRequest:
    """One generation's upstream requests, one at a time (see the module docstring)."""

    upstream: SGLangClient
    config: ProxyConfig
    #: the pause's acknowledgement is awaited before a pause's rids are aborted on the workers
    gate: GateController
    #: where the background aborts run (the app's)
    nursery: trio.Nursery
    request: ChatCompletionRequest
    choice_index: int
    #: the tokenizer's: the token ids an answer may hold
    vocab_size: int
    #: for log lines
    name: str
    #: the current (or last) request's rid
    rid: str | None = None
    #: tokens of the current request the machine accepted (the driver counts its ``AcceptTokens`` here)
    accepted: int = 0
    _scope: trio.CancelScope | None = None
    # The current request was handed to its reader (before that, a pause's cut has no answer to read).
    _sent: bool = False

    async def run(
        self, start: StartUpstream, input_ids: Sequence[int], routed_start: int | None, *,
        started: Callable[[str], None], on_tokens: Callable[[str, Sequence[Token]], Awaitable[None]],
    ) -> RequestEnd:
        """Read the request ``start`` asks for to its end. ``started(rid)`` is called with its fresh rid before it
        goes out (it may cut it at once), ``on_tokens(rid, tokens)`` with the tokens of every read."""
        config, request = self.config, self.request
        params = request.to_sampling_params(
            start.max_new_tokens, temperature_override=config.rollout_temperature, choice_index=self.choice_index,
        )
        rid = self.rid = new_rid()
        self.accepted = 0
        outcome = ReadOutcome()
        finished: list[Finished] = []
        with trio.CancelScope() as scope:
            self._scope, self._sent = scope, False
            try:
                started(rid)
                self._sent = True
                outcome = await read_request(
                    self.upstream, input_ids, params, rid=rid, routing_key=request.session_id,
                    on_tokens=lambda tokens: on_tokens(rid, tokens), on_finished=finished.append,
                    return_routed_experts=config.use_rollout_routing_replay, routed_experts_start_len=routed_start,
                    stream=self.streams, vocab_size=self.vocab_size,
                    top_logprobs_num=request.top_logprobs if request.logprobs else 0,
                )
            finally:
                self._scope = None
        if finished:
            # Ended by itself, even if our cut came while the stream was being read to its end.
            return RequestEnd(ReadOutcome(finished=finished[0]), cut=False, accepted=self.accepted)
        return RequestEnd(outcome, cut=scope.cancelled_caught, accepted=self.accepted)

    def cut(self, rid: str | None, for_pause: bool) -> None:
        """``AbortUpstream``: cancel the current request's scope; abort the rid on the workers in the background
        (a pause's once the pause is acknowledged), or, for a pause's cut under the exception of the module
        docstring, abort the rid first and read the request to its abort finish (its last tokens are accepted: they
        were generated before the abort, under the old weights; the continuation then asks for rows from
        ``len(input_ids) - 1`` only, sglang-protocol.md §8.4)."""
        scope = self._scope
        current = scope is not None and (rid is None or rid == self.rid)
        sent_for_pause = for_pause and self._sent
        if current and rid is not None and sent_for_pause and self._drains_pause_aborts:
            self.nursery.start_soon(self._abort_then_cut, rid, scope)
            return
        if current:
            scope.cancel()
        if rid is not None:
            self.nursery.start_soon(self._abort_rid, rid, sent_for_pause)

    def cancel(self) -> bool:
        """Cancel the open request's scope now, even one read to its abort finish (the client left; the pause's
        bound passed): its reader returns. False when no request is open."""
        if self._scope is None:
            return False
        self._scope.cancel()
        return True

    @property
    def streams(self) -> bool:
        """Stream upstream for streaming clients, and whenever an abort can only be a closed stream: a
        non-streaming request cut by closing it would lose every token it generated."""
        return self.request.stream or not self._aborts_by_rid

    @property
    def _aborts_by_rid(self) -> bool:
        """Worker URLs are known, so ``/abort_request`` can end a request with its partial tokens."""
        return bool(getattr(self.upstream, "worker_urls", ()))

    @property
    def _drains_pause_aborts(self) -> bool:
        """A pause ends the request by aborting its rid and reading its answer, rather than cutting it: needed for
        a non-streaming upstream request (its tokens arrive only in the answer) and for routing replay with partial
        rollout (the rows arrive only in the final chunk)."""
        config = self.config
        return self._aborts_by_rid and (
            not self.streams or (config.use_rollout_routing_replay and config.partial_rollout)
        )

    async def _abort_then_cut(self, rid: str, scope: trio.CancelScope) -> None:
        """Abort ``rid`` on the workers and let its reader read the abort finish; cut the stream if the abort cannot
        be sent; the wait for the finish is bounded by the gate (``force_cut`` after ``--pause-abort-timeout``)."""
        if not await self._post_abort(rid):
            scope.cancel()

    async def _abort_rid(self, rid: str, after_pause_ack: bool) -> None:
        """Abort ``rid`` on the workers (frees SGLang's compute; the stream is already cut). A pause's aborts are sent
        once the pause is acknowledged: with hundreds of streams in flight, posting them at once delayed the
        acknowledgement itself (bench/pause.py: 1.75-4x the engine's own pause, against about 1x without them)."""
        if after_pause_ack:
            with trio.move_on_after(ABORT_TIMEOUT):
                await self.gate.wait_pause_settled()
        await self._post_abort(rid)

    async def _post_abort(self, rid: str) -> bool:
        """``/abort_request`` for ``rid`` on the workers, bounded; whether it was delivered."""
        with trio.move_on_after(ABORT_TIMEOUT):
            try:
                return await self.upstream.abort(rid)
            except UpstreamError as exc:
                log.debug("generation %s: abort of %s failed: %s", self.name, rid, exc)
        return False


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


__all__ = [
    "ABORT_TIMEOUT", "ReadOutcome", "RequestEnd", "UpstreamRequest", "ending_event", "failure_event", "read_request",
]
