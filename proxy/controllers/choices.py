"""One request with ``n > 1``: ``n`` generations of the same step (best-of-N), answered as one ``chat.completion``.

Theory of operation
-------------------
:meth:`ChoiceSet.start` starts the choices one after another in the caller's task (the HTTP handler). Each is an
ordinary :class:`~proxy.controllers.generation_driver.Generation` (prepare, gate, upstream, parse, commit: pausable and
committed on its own) given its :class:`ChoiceSlot`: its index and the answer's shared ``id`` and ``created``. So each
choice becomes an assistant child of the same prompt in the session's trie: a sibling, or, when its output equals
another choice's, that same node refreshed. A refusal while starting (the session's step limit, which counts every
choice, or context safety) releases the choices already started and is the answer: all or nothing.

Non-streaming (:meth:`ChoiceSet.result`, in the handler's task): wait for every choice's ``chat.completion`` and put
them together: ``choices[i]`` is choice ``i``'s (with its ``index``), ``id``/``created``/``model`` shared, ``usage``
the prompt once plus every choice's completion tokens (as SGLang's ``UsageProcessor`` and OpenAI count it).

Streaming (:meth:`first_output`, :meth:`sse_body`): a merger task in the app's nursery (never the response body's
task: stack-notes pitfall 3) runs one pump per choice, each forwarding its choice's SSE bytes into one bounded channel
(:class:`~proxy.controllers.response_output.ResponseChannel`); the body only drains that channel, everything buffered
in one write per wake-up (pitfall 6). Every chunk carries its choice's ``index``. The stream opens (200) with the
first token of any choice, and it opens with every choice's opening chunk (the role), in index order, as OpenAI's
streams do: the SDKs' stream accumulators place a choice by the order its index first appears. A choice's stream
ends with its finish chunk; once every choice finished, one usage chunk (``stream_options.include_usage``: the same
sums) and one ``[DONE]`` end the answer.

Failures: OpenAI answers all or nothing, and so does this. The first choice that fails is the answer (before the
stream opened: its HTTP status and code; after: one SSE error event, then ``[DONE]``), and every other choice is
cancelled at once (``client_gone``: nothing of it is committed, unless its commit was already under way). Choices
that committed before stay recorded: they are real samples of the step.

A client that leaves (the handler cancelled, the body closed, or the end of the exchange: ``on_request_end``) cancels
every choice (:meth:`client_gone`, sync and idempotent). A pause aborts and resumes each choice like any generation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import attrs
import trio

from proxy.api import SSE_DONE, ApiError, ChatCompletionRequest, ChunkFormat, TokenExtras, Usage
from proxy.api.render import sse_error, sse_event, sse_events
from proxy.controllers.generation import GenerationController
from proxy.controllers.generation_driver import Generation
from proxy.controllers.response_output import ResponseChannel
from proxy.controllers.step_output import ChoiceSlot
from proxy.random_ids import new_completion_id

log = logging.getLogger("dressage_proxy.choices")

#: the token extension fields of a choice (at the top level of a one-choice answer, inside each choice here)
TOKEN_FIELDS = tuple(attrs.fields_dict(TokenExtras))


@attrs.define(eq=False)
class ChoiceSet:
    """The ``n`` generations answering one request. Public: :meth:`start`, :meth:`result` (non-streaming),
    :meth:`first_output` + :meth:`sse_body` (streaming), :meth:`client_gone`."""

    request: ChatCompletionRequest
    generations: list[Generation]
    _output: ResponseChannel = attrs.field(factory=ResponseChannel, init=False)
    _usages: list[Usage | None] = attrs.field(init=False)
    _error: ApiError | None = attrs.field(default=None, init=False)
    # The merged stream sent bytes (a failure is then an SSE event, no longer an HTTP status).
    _opened: bool = attrs.field(default=False, init=False)
    # The opening chunks were handed to the channel (with the first bytes of any choice).
    _announced: bool = attrs.field(default=False, init=False)
    _gone: bool = attrs.field(default=False, init=False)
    _merge_scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    _pumps: trio.Nursery | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self._usages = [None] * len(self.generations)

    @classmethod
    async def start(
        cls, controller: GenerationController, request: ChatCompletionRequest, nursery: trio.Nursery
    ) -> ChoiceSet:
        """Start the ``request.n`` choices (and, streaming, the merger) in ``nursery``; raises the first refusal
        (``ApiError``) or cancellation after releasing the choices already started."""
        completion_id, created = new_completion_id(), int(time.time())
        generations: list[Generation] = []
        try:
            for index in range(request.n):
                first = generations[0].output.prompt_ids if generations else None
                slot = ChoiceSlot(index, completion_id, created, first)
                generations.append(await controller.start(request, nursery, choice=slot))
        except BaseException:
            for generation in generations:
                generation.client_gone()
            raise
        choices = cls(request, generations)
        if request.stream:
            nursery.start_soon(choices._merge, name=f"choices {completion_id}")
        return choices

    def client_gone(self) -> None:
        """The client went away: cancel every choice. Sync and idempotent (a no-op after a delivered answer)."""
        if self._gone:
            return
        self._gone = True
        self._output.abandon()
        for generation in self.generations:
            generation.client_gone()
        if self._merge_scope is not None:
            self._merge_scope.cancel()

    def _cancel_choices(self) -> None:
        for generation in self.generations:
            generation.client_gone()

    # -- non-streaming -----------------------------------------------------------------------------------------

    async def result(self) -> dict[str, Any]:
        """The ``chat.completion`` with every choice, or raises the first choice's ``ApiError``."""
        completions: list[dict[str, Any] | None] = [None] * len(self.generations)
        failure: ApiError | None = None

        async def wait(index: int, generation: Generation, waiters: trio.Nursery) -> None:
            nonlocal failure
            try:
                completions[index] = await generation.result()
            except ApiError as error:
                if failure is None:
                    failure = error
                # The others are cancelled: their result() calls client_gone when cancelled.
                waiters.cancel_scope.cancel()

        async with trio.open_nursery() as waiters:
            for index, generation in enumerate(self.generations):
                waiters.start_soon(wait, index, generation, waiters)
        if failure is not None:
            self._cancel_choices()
            raise failure
        return merge_completions([c for c in completions if c is not None])

    # -- streaming ---------------------------------------------------------------------------------------------

    async def first_output(self) -> bytes:
        """The first SSE bytes of the merged stream (answer 200), or raises the ``ApiError`` to answer instead."""
        item = await self._output.receive_first(self.client_gone)
        if isinstance(item, ApiError):
            raise item
        return item

    def sse_body(self, first: bytes) -> AsyncIterator[bytes]:
        """The merged stream's body (no cancel scope or nursery across a ``yield``; closing it early cancels every
        choice)."""
        return self._output.body(first, self.client_gone)

    async def _merge(self) -> None:
        """The streaming merger: a task in the app's nursery that never raises into it."""
        try:
            with trio.CancelScope() as scope:
                self._merge_scope = scope
                if self._gone:
                    scope.cancel()
                async with trio.open_nursery() as pumps:
                    self._pumps = pumps
                    for index, generation in enumerate(self.generations):
                        pumps.start_soon(self._pump, index, generation)
            self._pumps = None
            if self._gone:
                return
            if self._error is not None:
                await self._output.send(sse_error(self._error) + SSE_DONE if self._opened else self._error)
            else:
                await self._output.send(self._ending())
        except Exception:  # noqa: BLE001 - a bug here: fail closed, keep the proxy up
            log.exception("choices %s: merger failed", self.generations[0].completion_id)
            self._cancel_choices()
            error = ApiError.internal_error("the choices could not be put together")
            with trio.move_on_after(1):
                await self._output.send(sse_error(error) + SSE_DONE if self._opened else error)
        finally:
            self._output.close()

    async def _pump(self, index: int, generation: Generation) -> None:
        """Forward one choice's SSE bytes into the merged stream, until its end."""
        while True:
            item = await generation.next_output()
            if self._gone:
                return
            if isinstance(item, bytes):
                if not self._announced:
                    # The first bytes of any choice: open with every choice's role chunk, in index order (sent as
                    # one item, before anything another pump sends).
                    self._announced = True
                    item = sse_events([generation.opening_chunk() for generation in self.generations]) + item
                await self._output.send(item)
                self._opened = True
            elif isinstance(item, Usage):
                self._usages[index] = item
            elif isinstance(item, ApiError):
                self._fail(item)
                return
            else:  # None: its end
                if self._usages[index] is None:
                    self._fail(ApiError.internal_error("a choice ended without an answer"))
                return

    def _fail(self, error: ApiError) -> None:
        """The first failure ends the answer: the other choices are cancelled, the pumps stopped."""
        if self._error is not None:
            return
        self._error = error
        self._cancel_choices()
        if self._pumps is not None:
            self._pumps.cancel_scope.cancel()

    def _ending(self) -> bytes:
        """The end of a merged stream: the usage chunk (when asked) and ``[DONE]``."""
        if not self.request.include_usage:
            return SSE_DONE
        usages = [usage for usage in self._usages if usage is not None]
        usage = Usage(usages[0].prompt_tokens, sum(u.completion_tokens for u in usages))
        meta = self.generations[0].output.render.meta  # every choice's is the answer's
        return sse_event(ChunkFormat(meta, include_usage=True).usage_chunk(usage)) + SSE_DONE


def merge_completions(completions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One ``chat.completion`` from the one-choice completions of each choice (in index order).

    The shared fields come from choice 0; ``usage`` counts the prompt once (every choice has the same prompt) and
    adds up the completions. Token extension fields move into their choice, but for ``prompt_token_ids``, which stays
    at the top level once (a choice whose prompt ids differ carries its own: see ``ChoiceSlot``).
    """
    first = completions[0]
    merged: dict[str, Any] = {key: first[key] for key in ("id", "object", "created", "model")}
    choices = []
    for index, completion in enumerate(completions):
        choice = dict(completion["choices"][0])
        for key in TOKEN_FIELDS:
            if key in completion and not (index == 0 and key == "prompt_token_ids"):
                choice[key] = completion[key]
        choices.append(choice)
    merged["choices"] = choices
    usage = Usage(
        first["usage"]["prompt_tokens"], sum(completion["usage"]["completion_tokens"] for completion in completions)
    )
    merged["usage"] = usage.to_json()
    if "prompt_token_ids" in first:
        merged["prompt_token_ids"] = first["prompt_token_ids"]
    return merged


__all__ = ["TOKEN_FIELDS", "ChoiceSet", "merge_completions"]
