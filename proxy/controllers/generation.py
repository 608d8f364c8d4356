"""The generation controller: one chat-completions request from prepare to response, driven by its GenerationMachine.

Theory of operation (``docs/request-path.md`` has the diagrams and the decisions)
--------------------------------------------------------------------------------
``GenerationController.start(request, nursery)`` prepares the step in the caller's task (the HTTP handler): the
session registry walks the trie and tokenizes (long full encodes in a worker thread), then context safety decides
the token budget. A refusal there raises ``ApiError`` before any byte is sent. Otherwise the machine is told
``Prepared``, asks the gate at once, and the request's **driver task** starts in ``nursery`` (the app's nursery, never
the response body's task). The driver carries out the machine's effects in order: it runs each upstream request (the
"reader": ``upstream_reader.read_request``) in its own cancel scope, parses, commits (shielded), and puts what the
client must see into a small bounded memory channel. The HTTP handler only waits on that channel: a non-streaming
handler for the one final item; a streaming response body drains everything buffered and writes it in one go
(stack-notes pitfalls 3 and 6).

How the machine is driven (its docstring is the contract): every event goes through ``send_fail_closed``; the
effects are carried out in order by :meth:`Generation._apply`, synchronously where they touch only memory or the
gate (so the gate's counts and its member sets never disagree), and queued to the driver where they need I/O
(``StartUpstream``, ``ParseOutput``, ``Commit``, ``DropFromSession``, ``Respond``, ``RespondError``).
``AbortUpstream`` cancels the current request's scope at once (and aborts the rid on the workers in the background).
Events from other tasks (the gate's ``AbortRequested`` and ``Resumed``, the handler's ``ClientDisconnected``) are
fed synchronously where they happen; their I/O effects land in the same queue. Nothing here branches on the
machine's state. The controller's own facts decide only two things: once the machine has answered
(``Respond``/``RespondError`` issued) or the client is gone, the driver feeds nothing more except a commit's answer;
and a request whose scope our ``AbortUpstream`` cut ended as ``UpstreamAborted`` (the pause's acknowledgement).

A client that goes away (quart-trio cancels the handler, or closes the body generator) becomes
``ClientDisconnected``: the machine releases what the generation holds (the upstream request is cancelled, the gate
slot or wait given back, the session's reservation dropped) and nothing is committed. A commit already requested
still lands (it is shielded; the machine ignores a disconnect while COMMITTING).

A request with ``n > 1`` is answered by ``n`` generations, one per choice (``proxy/controllers/choices.py`` starts
them and puts their answers together): each is all of the above on its own, given its ``ChoiceSlot`` (its index, the
answer's shared id and time). Its index enters its tool-call ids, its sampling seed and its rendering; its stream
starts with its first delta (the answer sends every choice's opening chunk) and ends with its finish chunk followed by
its ``Usage`` (the answer's usage chunk and ``[DONE]`` are rendered once, by the choices), and an error is always
handed over as the ``ApiError`` (the choices decide how the client sees it).

Streaming: the response opens (status 200, the role chunk) with the first generated token, so every failure before
it is a plain HTTP error with its status; a failure after it is an SSE error event, then ``[DONE]``. Tokens flow
through :class:`~proxy.controllers.text_decoder.TextDecoder` and the streaming message parser; the accepted tokens of
one upstream read become one output item holding all the SSE events they produced. Without partial rollout, a
generation interrupted by a pause restarts from scratch after resume; if its client already received tokens, those
cannot be taken back: the stream ends with a ``generation_restarted`` SSE error (the client retries; nothing was
committed).

Pauses (``docs/partial-rollout.md`` has the protocol): the gate's ``abort_requested()`` feeds ``AbortRequested``;
its ``AbortUpstream`` cancels the request's scope at once and aborts the rid on the workers in the background, so the
acknowledgement (``UpstreamAborted``, fed when the reader returns) needs no round trip. One exception: with routing
replay and partial rollout, when worker URLs are known, the rid is aborted first and the request read to its abort
finish (SGLang sends routed experts only in a request's final chunk), bounded by the gate's
``--pause-abort-timeout`` (then the gate's ``force_cut`` cancels the request's scope). The gate is told
how many tokens the generation keeps (``tokens_kept`` of the pause's answer). Routing replay asks every request for
the rows not held yet (``_rows_end``: the base checkpoint's coverage, then each chunk's end), so no row is ever
duplicated. Without partial rollout every from-scratch request is first checked against the session's version stamp
(``trajectory_version_changed``, fed as the machine's ``UpstreamFailed`` with status 400: the path that releases the
gate slot and the session's reservation), and the commit carries the step's (epoch, version) stamp.
"""

from __future__ import annotations

import collections
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from proxy.api import SSE_DONE, ApiError, ChatCompletionRequest, CompletionMeta, Usage, sse_error
from proxy.api.error_mapping import api_error_for
from proxy.api.errors import ErrorCode
from proxy.controllers.context_budget import StepBudget, plan_step_budget
from proxy.controllers.context_window import ContextWindow
from proxy.controllers.gate import GateController
from proxy.controllers.response_output import ResponseChannel
from proxy.controllers.response_render import ResponseRenderer
from proxy.controllers.session_registry import PreparedStep
from proxy.controllers.text_decoder import TextDecoder
from proxy.controllers.upstream_reader import ReadOutcome, ending_event, failure_event, read_request
from proxy.parsing import ParsedMessage
from proxy.request_id import current_request_id
from proxy.tokenization.results import TitoError
from proxy.trajectory.session_errors import (
    GenerationFinishedError,
    SessionError,
    SessionFinalizedError,
    TrajectoryVersionChangedError,
)
from proxy.trajectory.tokens import routed_rows_end
from proxy.trajectory.version_stamp import VersionStamp
from proxy.upstream.errors import UpstreamError
from proxy.upstream.events import Finished, Token
from proxy.upstream.request_ids import new_rid
from statemachines import rollout_gate as gate_sm
from statemachines.generation import (
    AbortRequested,
    AbortUpstream,
    AcceptTokens,
    AcknowledgeAbortToGate,
    AskGate,
    CancelGateWait,
    ClientDisconnected,
    Commit,
    CommitAccepted,
    CommitRejected,
    DiscardPartial,
    DropFromSession,
    DropTokens,
    FinishKind,
    GateAdmitted,
    GateWait,
    GenerationMachine,
    GenerationStatistics,
    InternalError,
    ParseDone,
    ParseOutput,
    PauseWaitTimedOut,
    Prepared,
    PrepareFailed,
    ReleaseGate,
    ReportFault,
    Respond,
    RespondError,
    Resumed,
    StartUpstream,
    TokensReceived,
    UpstreamAborted,
    UpstreamFailed,
    UpstreamStarted,
    waits_for_client,
)

if TYPE_CHECKING:
    from proxy.controllers.choices import ChoiceSlot

log = logging.getLogger("dressage_proxy.generation")

#: Retry-After (seconds) of a 503 answered when the pause-wait timeout expires
PAUSE_RETRY_AFTER = 10.0
#: how long a background abort of an upstream rid may take
ABORT_TIMEOUT = 10.0
#: how long the first request without a model name waits for the upstream's /v1/models
MODEL_NAME_TIMEOUT = 2.0
#: the end-of-generation special tokens that are not text (SGLang's ``text`` leaves them out)
END_TOKENS = ("<|im_end|>", "<|endoftext|>")


class _Stop:
    """The driver's last work item after its client went away."""


_STOP = _Stop()


@attrs.frozen
class GenerationControllerStatistics:
    """Counters of the request path (reporting only)."""

    active: int
    started: int
    responded: int
    failed: int
    cancelled: int
    refused: int
    dropped_tokens: int


@attrs.define(eq=False)
class GenerationController:
    """Starts one :class:`Generation` per chat-completions request (one controller per proxy process)."""

    config: Any  # proxy.config.ProxyConfig
    sessions: Any  # proxy.controllers.session_registry.SessionRegistry
    upstream: Any  # proxy.upstream.client.SGLangClient
    parser: Any  # proxy.parsing.MessageParser
    tokenizer: Any  # proxy.tokenization.TitoTokenizer
    gate: GateController
    #: the model's context window (the services'; tests that build a controller by hand get one over ``upstream``)
    context_window: ContextWindow | None = None
    _end_ids: frozenset[int] = attrs.field(init=False)
    _model_name: str | None = attrs.field(default=None, init=False)
    _active: set[Generation] = attrs.field(factory=set, init=False)
    _counts: collections.Counter = attrs.field(factory=collections.Counter, init=False)

    def __attrs_post_init__(self) -> None:
        ids = set()
        for text in END_TOKENS:
            encoded = self.tokenizer.encode_text(text)
            if len(encoded) == 1:
                ids.add(encoded[0])
        ids.add(self.tokenizer.end_of_turn_id)
        self._end_ids = frozenset(ids)
        if self.context_window is None:
            self.context_window = ContextWindow(self.upstream, self.config.context_window, self.config.tokenizer_path)

    @classmethod
    def from_services(cls, services: Any) -> GenerationController:
        """The controller over the proxy's services (``proxy.services.ProxyServices``)."""
        return cls(
            services.config, services.sessions, services.upstream, services.parser, services.tokenizer,
            services.gate, services.context_window,
        )

    async def start(
        self, request: ChatCompletionRequest, nursery: trio.Nursery, *, choice: ChoiceSlot | None = None
    ) -> Generation:
        """Prepare the step, decide its budget, ask the gate, start its driver in ``nursery``; ``choice``: the
        generation is one choice of an ``n > 1`` answer (``proxy.controllers.choices``).

        Raises ``ApiError`` (nothing recorded, nothing sent upstream) when the session layer or context safety
        refuses the request. A cancellation (the client left) propagates after the machine was told.
        """
        model = request.model or await self._served_model_name()
        generation = Generation(self, request, model, nursery, choice)
        self._counts["started"] += 1
        await generation.prepare()
        self._active.add(generation)
        nursery.start_soon(generation.drive, name=f"generation {generation.completion_id}")
        return generation

    def statistics(self) -> GenerationControllerStatistics:
        counts = self._counts
        return GenerationControllerStatistics(
            active=len(self._active), started=counts["started"], responded=counts["responded"],
            failed=counts["failed"], cancelled=counts["cancelled"], refused=counts["refused"],
            dropped_tokens=counts["dropped_tokens"],
        )

    async def _served_model_name(self) -> str:
        """The upstream's first model id (asked once; ``"default"`` while the upstream cannot say)."""
        if self._model_name is None:
            with trio.move_on_after(MODEL_NAME_TIMEOUT):
                try:
                    cards = await self.upstream.models()
                except UpstreamError:
                    cards = ()
                if cards:
                    self._model_name = cards[0].id
        return self._model_name or "default"


@attrs.define(eq=False)
class Generation:
    """One request's generation: its machine, token buffers, parser, driver task and output channel.

    Public: :meth:`result` (non-streaming), :meth:`first_output` + :meth:`sse_body` (streaming),
    :meth:`client_gone`; for the gate (:class:`~proxy.controllers.gate.GateMember`): :meth:`abort_requested`,
    :meth:`resumed`.
    """

    controller: GenerationController
    request: ChatCompletionRequest
    model: str
    _nursery: trio.Nursery
    #: one choice of an ``n > 1`` answer; None for an ``n = 1`` request
    choice: ChoiceSlot | None = None
    machine: GenerationMachine = attrs.field(init=False)
    completion_id: str = attrs.field(init=False)
    created: int = attrs.field(init=False)
    prepared: PreparedStep | None = attrs.field(default=None, init=False)
    budget: StepBudget | None = attrs.field(default=None, init=False)
    prompt_ids: list[int] = attrs.field(factory=list, init=False)
    # What the answer shows of them (the token extension; None: another choice of the answer shows them).
    _shown_prompt_ids: list[int] | None = attrs.field(default=None, init=False)
    # The step's generated tokens (kept across continuations; cleared by a restart). Same lengths.
    ids: list[int] = attrs.field(factory=list, init=False)
    logprobs: list[float | None] = attrs.field(factory=list, init=False)
    # Each token's top alternatives (shown to the client when it asked for top_logprobs; never recorded).
    tops: list[tuple[tuple[int, float], ...]] = attrs.field(factory=list, init=False)
    versions: list[str | None] = attrs.field(factory=list, init=False)
    routed: list[Any] = attrs.field(factory=list, init=False)
    message: ParsedMessage | None = attrs.field(default=None, init=False)
    _finish: FinishKind | None = attrs.field(default=None, init=False)
    _matched_stop: Any = attrs.field(default=None, init=False)
    _decoder: TextDecoder = attrs.field(init=False)
    _stream: Any = attrs.field(default=None, init=False)  # MessageStream, streaming clients only
    _render: ResponseRenderer = attrs.field(init=False)
    _tail: list[Any] = attrs.field(factory=list, init=False)
    # The current upstream request.
    _rid: str | None = attrs.field(default=None, init=False)
    _request_scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    _request_accepted: int = attrs.field(default=0, init=False)
    # The tokens of the read being fed to the machine (AcceptTokens records them).
    _incoming: Sequence[Token] | None = attrs.field(default=None, init=False)
    # The epoch and announced version of the current request's admission (the step's stamp without partial rollout).
    _epoch: int | None = attrs.field(default=None, init=False)
    _admitted_version: str | None = attrs.field(default=None, init=False)
    # Routing replay: the first input position on the token path without a routed-expert row, at the step's start
    # (the base checkpoint's coverage) and now (after the chunks received). See docs/partial-rollout.md.
    _rows_start: int = attrs.field(default=0, init=False)
    _rows_end: int = attrs.field(default=0, init=False)
    # True while the gate's abort_requested() is being carried out: the AbortUpstream it causes is a pause's.
    _pause_abort: bool = attrs.field(default=False, init=False)
    # Why a commit was refused other than by finalize (the machine's CommitRejected answers session_finalized).
    _commit_refusal: ApiError | None = attrs.field(default=None, init=False)
    _parse_scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    # The driver's flush while it has no work (cancelled when work is queued; see _flush_while_idle).
    _idle_flush: trio.CancelScope | None = attrs.field(default=None, init=False)
    # Work for the driver (unbounded: the machine bounds it) and the output to the response (bounded).
    _work_send: Any = attrs.field(init=False)
    _work_recv: Any = attrs.field(init=False)
    _output: ResponseChannel = attrs.field(factory=ResponseChannel, init=False)
    # The controller's own facts (never the machine's state).
    _final_issued: bool = attrs.field(default=False, init=False)
    _delivered: bool = attrs.field(default=False, init=False)
    _client_gone: bool = attrs.field(default=False, init=False)
    _restart_seen_by_client: bool = attrs.field(default=False, init=False)
    _wait_began: float | None = attrs.field(default=None, init=False)
    _refusal: ApiError | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        config = self.controller.config
        self.machine = GenerationMachine.new(partial_rollout=config.partial_rollout)
        if self.choice is None:
            self.completion_id = f"chatcmpl-{uuid.uuid4().hex}"
            self.created = int(time.time())
        else:
            self.completion_id, self.created = self.choice.completion_id, self.choice.created
        self._work_send, self._work_recv = trio.open_memory_channel(math.inf)
        controller = self.controller
        self._render = ResponseRenderer(
            self.request, CompletionMeta(self.completion_id, self.created, self.model), controller.tokenizer,
            controller._end_ids, token_ids_default=config.return_token_ids, choice_index=self._choice_index,
            multiplexed=self.choice is not None,
        )
        self._new_text_state()

    # -- the public face: what the route awaits ------------------------------------------------------------------

    @property
    def streaming(self) -> bool:
        return self.request.stream

    async def result(self) -> dict[str, Any]:
        """Non-streaming: the ``chat.completion`` object, or raises the ``ApiError`` to answer."""
        item = await self._output.receive_first(self.client_gone)
        if isinstance(item, ApiError):
            raise item
        return item

    async def first_output(self) -> bytes:
        """Streaming: the first SSE bytes (the stream is open: answer 200), or raises the ``ApiError`` to answer
        instead (nothing was sent yet)."""
        item = await self._output.receive_first(self.client_gone)
        if isinstance(item, ApiError):
            raise item
        return item

    async def next_output(self) -> Any:
        """One choice of several: its next output item (SSE bytes, its ``Usage`` after its last chunk, the
        ``ApiError`` it ends with, or a non-streaming ``chat.completion`` dict), None at its end. A cancellation
        calls :meth:`client_gone`."""
        return await self._output.receive_next(self.client_gone)

    def opening_chunk(self) -> dict[str, Any]:
        """One choice of several: its opening chunk (the role, and the prompt ids it shows), which the answer sends
        for every choice, in index order, when the stream opens (its own stream starts with its first delta)."""
        return self._render.opening_chunk(self._shown_prompt_ids)

    def sse_body(self, first: bytes) -> AsyncIterator[bytes]:
        """The streaming response body: ``first``, then whatever the driver buffered, one write per wake-up. It holds
        no cancel scope or nursery across a ``yield``; closed or cancelled before the end, it calls
        :meth:`client_gone`."""
        return self._output.body(first, self.client_gone)

    def client_gone(self) -> None:
        """The client went away: ``ClientDisconnected`` (releases everything; nothing is committed). Sync and
        idempotent: safe from a cancelled handler or a closing body generator."""
        if self._client_gone:
            return
        self._client_gone = True
        if not self._delivered:
            self.controller._counts["cancelled"] += 1
        if self._request_scope is not None:
            # A request still read to its abort finish (a graceful pause abort) is given up at once.
            self._request_scope.cancel()
        # Wakes a driver blocked on a full output channel and drops what was buffered.
        self._output.abandon()
        self._apply(self._send(ClientDisconnected()))
        if self._parse_scope is not None:
            self._parse_scope.cancel()
        self._queue(_STOP)

    def statistics(self) -> GenerationStatistics:
        return self.machine.statistics()

    # -- the gate's calls (GateMember) ---------------------------------------------------------------------------

    def abort_requested(self) -> None:
        self._pause_abort = True
        try:
            self._apply(self._send(AbortRequested()))
        finally:
            self._pause_abort = False

    def resumed(self, epoch: int, weight_version: str | None) -> None:
        self._wait_began = None
        self._apply(self._send(Resumed(epoch, weight_version)))

    def cut_report(self) -> dict[str, object]:
        return {"id": self.completion_id, "session_id": self.request.session_id, "tokens_before": len(self.ids)}

    def force_cut(self) -> None:
        """The pause's bound passed without the upstream confirming this generation's abort: cancel its request's
        scope, so its reader returns and acknowledges with the tokens it delivered (the rules of any abort). With no
        request open while the gate counts it in flight, its driver is not where it must be (a bug): fail closed,
        which releases the gate slot at once."""
        if self._request_scope is not None:
            self._request_scope.cancel()
        else:
            self._apply(self._send(InternalError("in flight at the pause's bound with no upstream request open")))

    # -- prepare (in the handler's task) -------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Prepare + tokenize + budget as one unit: ``Prepared`` (and the gate's answer), or raise the refusal."""
        request, controller = self.request, self.controller
        # Before anything is held: a client that leaves during this wait leaves nothing behind.
        assert controller.context_window is not None
        window = await controller.context_window.tokens()
        try:
            prepared = await controller.sessions.prepare(
                # The tools the template renders (none for tool_choice none, the named one for a named choice):
                # what the model sees is the session's context.
                request.session_id, request.messages, tools=request.template_tools,
                chat_template_kwargs=request.chat_template_kwargs, response_mask=request.response_mask,
                instance_id=request.instance_id, turn_id=request.turn_id,
            )
        except (SessionError, TitoError) as exc:
            self._refuse(api_error_for(exc))
        except trio.Cancelled:
            # The client left during prepare; the registry rolled itself back.
            self._apply(self._send(ClientDisconnected()))
            raise
        except Exception as exc:
            # A bug below: fail closed (the app answers 500); the registry rolled itself back.
            self._apply(self._send(InternalError(f"prepare failed: {type(exc).__name__}: {exc}")))
            raise
        self.prepared = prepared
        self.prompt_ids = prepared.input_ids()
        self._shown_prompt_ids = self._prompt_ids_to_show()
        if controller.config.use_rollout_routing_replay:
            # Rows already held along the path (the base checkpoint's steps): this step asks only for the rest.
            self._rows_start = self._rows_end = routed_rows_end(prepared.tokens.base)
        config = controller.config
        try:
            self.budget = plan_step_budget(
                len(self.prompt_ids), request.max_tokens, context_window=window,
                dynamic=config.dynamic_max_tokens,
            )
        except ApiError as refusal:
            await controller.sessions.drop(prepared.handle)
            self._refuse(refusal)
        self._apply(self._send(Prepared(len(self.prompt_ids), self.budget.max_new_tokens)))

    def _refuse(self, refusal: ApiError) -> None:
        """The prepare unit failed: tell the machine, raise what it says to answer (with the refusal's details)."""
        self._refusal = refusal
        self.controller._counts["refused"] += 1
        for effect in self._send(PrepareFailed(refusal.status, str(refusal.code), refusal.message)):
            if isinstance(effect, RespondError):
                raise self._api_error(effect)
        raise refusal

    # -- the machine -----------------------------------------------------------------------------------------

    def _send(self, event: object) -> list:
        return self.machine.send_fail_closed(event)

    def _apply(self, effects: list) -> None:
        """Carry out effects in order: memory and gate effects now, I/O effects queued to the driver."""
        gate = self.controller.gate
        for effect in effects:
            if isinstance(effect, AskGate):
                answer = gate.want_to_start(self)
                if isinstance(answer, gate_sm.Admit):
                    self._apply(self._send(GateAdmitted(answer.epoch, answer.weight_version)))
                else:
                    self._wait_began = trio.current_time()
                    self._apply(self._send(GateWait(answer.epoch)))
            elif isinstance(effect, AcceptTokens):
                self._accept(effect)
            elif isinstance(effect, DropTokens):
                self.controller._counts["dropped_tokens"] += effect.count
            elif isinstance(effect, AbortUpstream):
                self._cut(effect.rid)
            elif isinstance(effect, ReleaseGate):
                gate.finished(self)
            elif isinstance(effect, AcknowledgeAbortToGate):
                self._wait_began = trio.current_time()
                gate.abort_acknowledged(self, len(self.ids))
            elif isinstance(effect, CancelGateWait):
                self._wait_began = None
                gate.cancel_wait(self)
            elif isinstance(effect, DiscardPartial):
                self._discard()
            elif isinstance(effect, ReportFault):
                log.error(
                    "request %s: generation %s: controller fault: %s", current_request_id(), self.completion_id,
                    effect.reason,
                )
            elif isinstance(effect, (Respond, RespondError)):
                self._final_issued = True
                self._queue(effect)
            else:  # StartUpstream, ParseOutput, Commit, DropFromSession
                self._queue(effect)

    def _queue(self, item: object) -> None:
        try:
            self._work_send.send_nowait(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the driver has ended; nothing is left to do
        if self._idle_flush is not None:
            # Work comes first: what is staged is sent by the next flush (the reader's, or the answer's).
            self._idle_flush.cancel()

    def _may_feed(self) -> bool:
        """After the machine answered or the client left, the driver feeds nothing more (but a commit's answer)."""
        return not (self._final_issued or self._client_gone)

    # -- the driver task ---------------------------------------------------------------------------------------

    async def drive(self) -> None:
        """Carry out queued effects until the response is delivered (or the client is gone). Runs in the app's
        nursery and never raises into it: a bug becomes ``InternalError`` (fail closed, 500)."""
        try:
            while not self._delivered:
                item = await self._next_work()
                if item is _STOP:
                    break
                answered_before = self._final_issued
                try:
                    await self._do(item)
                except Exception as exc:  # noqa: BLE001 - a bug in this controller: fail closed, keep the proxy up
                    log.exception("generation %s: error while carrying out %s", self.completion_id, item)
                    self._apply(self._send(InternalError(f"{type(exc).__name__}: {exc}")))
                    if answered_before:
                        break
        except Exception:  # noqa: BLE001 - the loop itself failed; never raise into the app nursery
            log.exception("generation %s: driver failed", self.completion_id)
        finally:
            self._output.close()
            self.controller._active.discard(self)

    async def _next_work(self) -> object:
        """The next queued effect; meanwhile flushes outputs a pause left behind, and times out a gate wait."""
        await self._flush_while_idle()
        while True:
            if self._wait_began is None:
                return await self._work_recv.receive()
            deadline = self._wait_began + self.controller.config.pause_wait_timeout
            with trio.move_on_at(deadline):
                return await self._work_recv.receive()
            try:
                # Resumed (fed synchronously by the gate) wins over a timer that fired at the same moment.
                return self._work_recv.receive_nowait()
            except trio.WouldBlock:
                pass
            waited = trio.current_time() - self._wait_began
            self._wait_began = None
            log.info("generation %s: gave up waiting for resume after %.1f s", self.completion_id, waited)
            self._apply(self._send(PauseWaitTimedOut()))

    async def _flush_while_idle(self) -> None:
        """Send what a pause left staged while no work is queued; give it up as soon as work arrives.

        The driver must never wait on its client before carrying out work that a pause waits for: a client that
        stopped reading (or left unnoticed) would hold the generation's gate slot, and the pause with it, for ever
        (issue 13's hang: a continuation queued behind a full output channel, its rid never drawn, so the pause's
        abort had nothing to cut). ``waits_for_client`` is the rule, shared with the model-checked worlds."""
        if self._work_recv.statistics().current_buffer_used:
            return
        with trio.CancelScope() as scope:
            self._idle_flush = scope
            try:
                await self._output.flush()
            finally:
                self._idle_flush = None

    async def _do(self, item: object) -> None:
        if waits_for_client(item):
            # Only answers wait for the client here, and by then the generation holds no gate slot.
            await self._output.flush()
        if isinstance(item, StartUpstream):
            await self._run_upstream(item)
        elif isinstance(item, ParseOutput):
            await self._parse(item)
        elif isinstance(item, Commit):
            await self._commit()
        elif isinstance(item, DropFromSession):
            if self.prepared is not None:
                await self.controller.sessions.drop(self.prepared.handle)
        elif isinstance(item, Respond):
            await self._deliver_response()
        elif isinstance(item, RespondError):
            await self._deliver_error(item)
        else:
            raise AssertionError(f"unknown work item {item!r}")

    # -- upstream ----------------------------------------------------------------------------------------------

    async def _run_upstream(self, start: StartUpstream) -> None:
        """One upstream request in its own cancel scope (the reader); its ending becomes exactly one event."""
        if not self._may_feed():
            return
        if self._restart_seen_by_client:
            await self._abandon_restarted_stream()
            return
        config, request = self.controller.config, self.request
        assert self.prepared is not None and self.budget is not None
        self._epoch, self._admitted_version = start.epoch, start.weight_version
        if not config.partial_rollout:
            # Spec 7: without partial rollout every step of a session is generated under one epoch and version.
            # Checked before each from-scratch request (the first, or a restart after a pause).
            try:
                self.controller.sessions.check_version(self.prepared.handle, VersionStamp(start.epoch, None))
            except TrajectoryVersionChangedError as exc:
                # The machine's path for "this request cannot go upstream": release the gate slot and the
                # session's reservation, answer the error (400), commit nothing.
                self._apply(self._send(UpstreamFailed(400, exc.code, str(exc))))
                return
        rid = new_rid()
        input_ids = self.prompt_ids + self.ids[: start.kept_tokens] if start.kept_tokens else self.prompt_ids
        params = request.to_sampling_params(
            start.max_new_tokens, temperature_override=config.rollout_temperature, choice_index=self._choice_index
        )
        # Routing replay: ask only for rows not held yet. That is the machine's len(input_ids) - 1 for a
        # continuation whose interrupted request delivered its rows (its abort finish was read), else the first
        # position without a row (a stream cut at once delivers none: its rows are asked for again here).
        routed_start = self._rows_end if config.use_rollout_routing_replay else start.routed_experts_start_len
        self._request_accepted = 0
        outcome: ReadOutcome | None = None
        finished: list[Finished] = []
        with trio.CancelScope() as scope:
            self._request_scope = scope
            self._rid = rid
            try:
                # May cancel the scope at once: a pause's abort came before the request went out.
                self._apply(self._send(UpstreamStarted(rid)))
                outcome = await read_request(
                    self.controller.upstream, input_ids, params, rid=rid, routing_key=request.session_id,
                    on_tokens=self._on_tokens, on_finished=finished.append,
                    return_routed_experts=config.use_rollout_routing_replay,
                    routed_experts_start_len=routed_start,
                    stream=self._streams_upstream, vocab_size=self.controller.tokenizer.vocab_size,
                    top_logprobs_num=request.top_logprobs if request.logprobs else 0,
                )
            finally:
                self._request_scope = None
        if not self._may_feed():
            return
        if finished:
            # Ended by itself, even if our cancel came while the stream was being read to its end.
            outcome = ReadOutcome(finished=finished[0])
            self._matched_stop = getattr(finished[0].finish_reason, "matched", None)
            self._keep_rows(finished[0].routed_experts, len(input_ids))
        elif scope.cancelled_caught:
            # Our AbortUpstream cut it (a pause): the acknowledgement, with the tokens fed so far.
            self._apply(self._send(UpstreamAborted(self._request_accepted)))
            return
        assert outcome is not None
        self._apply(self._send(ending_event(outcome, self._request_accepted)))

    def _keep_rows(self, chunk: Any, input_length: int) -> None:
        """Keep a request's routed-expert rows: they cover its input positions from its ``start_len`` to the last
        token it delivered (exclusive). Rows contiguous with those held are kept; anything else is a protocol
        surprise, logged and dropped (the export then says which positions have no row)."""
        if chunk is None:
            return
        end = chunk.start_len + chunk.num_rows
        expected = input_length + self._request_accepted - 1
        if chunk.start_len != self._rows_end or end != expected:
            log.warning(
                "generation %s: routed experts rows [%d, %d) do not continue the %d held (expected end %d); dropped",
                self.completion_id, chunk.start_len, end, self._rows_end, expected,
            )
            return
        self.routed.append(chunk)
        self._rows_end = end

    async def _on_tokens(self, tokens: Sequence[Token]) -> None:
        """The tokens of one upstream read: to the machine (AcceptTokens records and renders them), then out.

        One event per read, not per token (the machine's step is a large part of the per-token cost); a read whose
        tokens report different weight versions is fed as one event per run of equal versions, so the machine
        still sees every version change."""
        start = 0
        while start < len(tokens) and self._may_feed():
            version = tokens[start].weight_version
            end = start + 1
            while end < len(tokens) and tokens[end].weight_version == version:
                end += 1
            self._incoming = tokens[start:end]
            try:
                self._apply(self._send(TokensReceived(self._rid, version, end - start)))
            finally:
                self._incoming = None
            start = end
        await self._output.flush()

    def _cut(self, rid: str | None) -> None:
        """AbortUpstream: cancel the current request's scope; abort the rid on the workers in the background.

        One exception, a pause's abort under routing replay with partial rollout when worker URLs are known: SGLang
        sends a request's routed experts only in its final chunk, so the rid is aborted on the workers first and the
        request read to its abort finish (its extra tokens are accepted: they were generated before the abort, under
        the old weights), bounded by the gate's ``--pause-abort-timeout`` (``force_cut``); the continuation then asks
        for rows from
        ``len(input_ids) - 1`` only (sglang-protocol.md §8.4).
        """
        scope = self._request_scope
        current = scope is not None and (rid is None or rid == self._rid)
        if current and rid is not None and self._pause_abort and self._graceful_pause_abort:
            self._nursery.start_soon(self._abort_then_cut, rid, scope)
            return
        if current:
            scope.cancel()
        if rid is not None:
            self._nursery.start_soon(self._abort_rid, rid, self._pause_abort)

    @property
    def _aborts_by_rid(self) -> bool:
        """Worker URLs are known, so ``/abort_request`` can end a request with its partial tokens."""
        return bool(getattr(self.controller.upstream, "worker_urls", ()))

    @property
    def _streams_upstream(self) -> bool:
        """Stream upstream for streaming clients, and whenever an abort can only be a closed stream (see
        ``upstream_reader``): a non-streaming request cut by closing it would lose every token it generated."""
        return self.request.stream or not self._aborts_by_rid

    @property
    def _graceful_pause_abort(self) -> bool:
        """A pause ends the request by aborting its rid and reading its answer, rather than cutting it: needed for
        a non-streaming upstream request (its tokens arrive only in the answer) and for routing replay with partial
        rollout (the rows arrive only in the final chunk)."""
        config = self.controller.config
        return self._aborts_by_rid and (
            not self._streams_upstream or (config.use_rollout_routing_replay and config.partial_rollout)
        )

    async def _abort_then_cut(self, rid: str, scope: trio.CancelScope) -> None:
        """Abort ``rid`` on the workers and let its reader read the abort finish; cut the stream if the abort cannot
        be sent; the wait for the finish is bounded by the gate (``force_cut`` after ``--pause-abort-timeout``)."""
        sent = False
        with trio.move_on_after(ABORT_TIMEOUT):
            try:
                sent = await self.controller.upstream.abort(rid)
            except UpstreamError as exc:
                log.debug("generation %s: abort of %s failed: %s", self.completion_id, rid, exc)
        if not sent:
            scope.cancel()

    async def _abort_rid(self, rid: str, after_pause_ack: bool = False) -> None:
        """Abort ``rid`` on the workers (frees SGLang's compute; the stream is already cut). A pause's aborts are sent
        once the pause is acknowledged: with hundreds of streams in flight, posting them at once delayed the
        acknowledgement itself (bench/pause.py: 1.75-4x the engine's own pause, against about 1x without them)."""
        if after_pause_ack:
            with trio.move_on_after(ABORT_TIMEOUT):
                await self.controller.gate.wait_pause_settled()
        with trio.move_on_after(ABORT_TIMEOUT):
            try:
                await self.controller.upstream.abort(rid)
            except UpstreamError as exc:
                log.debug("generation %s: abort of %s failed: %s", self.completion_id, rid, exc)

    def _accept(self, effect: AcceptTokens) -> None:
        """Record generated tokens ``effect.index``.. (the incoming read), stamped; stream what they make certain."""
        tokens = self._incoming
        if tokens is None or effect.index != len(self.ids) or effect.count != len(tokens):
            raise RuntimeError(f"{effect} without the matching incoming tokens")
        feed = self._decoder.feed
        pieces = []
        for token in tokens:
            self.ids.append(token.token_id)
            self.logprobs.append(token.logprob)
            self.tops.append(token.top_logprobs)
            pieces.append(feed(token.token_id))
        self.versions.extend([effect.weight_version] * effect.count)
        self._request_accepted += effect.count
        if self._stream is None:
            return
        text = "".join(pieces)
        deltas = self._stream.feed(text) if text else []
        events = self._render.token_events(tokens, effect.weight_version, deltas, self._shown_prompt_ids)
        if events:
            self._output.emit(events)

    def _discard(self) -> None:
        """DiscardPartial: the step restarts from scratch; forget every generated token."""
        self.ids.clear()
        self.logprobs.clear()
        self.tops.clear()
        self.versions.clear()
        self.routed.clear()
        self._rows_end = self._rows_start
        self._render.reset()
        if self._render.opened:
            # The client already saw tokens that a restart cannot take back.
            self._restart_seen_by_client = True
        self._new_text_state()

    def _new_text_state(self) -> None:
        controller, request = self.controller, self.request
        self._decoder = TextDecoder(controller.tokenizer, end_ids=controller._end_ids, stop=request.stop)
        if request.stream:
            self._stream = controller.parser.stream(
                request.parse_tools, session_id=request.session_id, step_index=self._step_index,
                reasoning_open_at_start=self._reasoning_open, choice_index=self._choice_index,
            )

    async def _abandon_restarted_stream(self) -> None:
        """Without partial rollout the step restarts, but this client already has tokens of the discarded try:
        end its stream with an error and give the generation up (nothing is committed; the client retries)."""
        error = ApiError.of(
            ErrorCode.GENERATION_RESTARTED,
            "generation was interrupted by a weight update and restarts from scratch (no partial rollout); "
            "the tokens already streamed are void: retry the request",
        )
        # Release first (the gate slot, the session's reservation): the flush below waits on the client.
        self.controller._counts["cancelled"] += 1
        self._client_gone = True
        self._apply(self._send(ClientDisconnected()))
        self._output.emit(error if self.choice is not None else sse_error(error) + SSE_DONE)
        await self._output.flush()
        self._output.close()
        self._queue(_STOP)

    # -- parse, commit, respond --------------------------------------------------------------------------------

    @property
    def _step_index(self) -> int:
        """Tool-call ids derive from (session, step index, call index); the step index is the answer's position in
        the conversation, so a retry of the same request gets the same ids (an idempotent retry stays one node)."""
        return len(self.request.messages)

    @property
    def _choice_index(self) -> int:
        """The choice this generation answers (0 but for the other choices of an ``n > 1`` request)."""
        return 0 if self.choice is None else self.choice.index

    def _prompt_ids_to_show(self) -> list[int] | None:
        """The prompt ids the answer shows (token extension): every choice's prompt is the first choice's (the same
        messages), shown once; another choice shows its own only if they differ (a checkpoint appeared on the
        prompt's path between the preparations, so the context was built differently)."""
        choice = self.choice
        if choice is None or choice.first_prompt_ids is None or list(choice.first_prompt_ids) != self.prompt_ids:
            return self.prompt_ids
        return None

    @property
    def _reasoning_open(self) -> bool:
        """The prompt ends inside a think block (Qwen3.5 with thinking on puts ``<think>\\n`` in the prompt)."""
        prefix = self.controller.tokenizer.thinking_prefix(self.request.chat_template_kwargs)
        return prefix.rstrip().endswith("<think>")

    async def _parse(self, effect: ParseOutput) -> None:
        if not self._may_feed():
            return
        self._finish = effect.finish
        request, parser = self.request, self.controller.parser
        failure: UpstreamError | None = None
        message: ParsedMessage | None = None
        with trio.CancelScope() as scope:
            self._parse_scope = scope
            try:
                tail = self._decoder.finish(self._matched_stop)
                if self._stream is not None:
                    deltas = self._stream.feed(tail) if tail else []
                    deltas += await self._stream.finish()
                    self._tail = deltas
                    message = self._stream.message
                else:
                    message = await parser.parse_final(
                        self._decoder.text, request.parse_tools, session_id=request.session_id,
                        step_index=self._step_index, reasoning_open_at_start=self._reasoning_open,
                        choice_index=self._choice_index,
                    )
            except UpstreamError as exc:
                failure = exc
        self._parse_scope = None
        if not self._may_feed() or scope.cancelled_caught:
            return
        if failure is not None:
            self._apply(self._send(failure_event(failure)))
            return
        self.message = message
        if request.tool_choice_unmet(call.name for call in message.tool_calls):
            # Answered as parsed, like SGLang (its "Required tool call missing" warning): the constraint was not
            # applied upstream (a gateway that drops structural_tag) or the output was cut short.
            log.warning("generation %s: tool_choice %s not met by the output", self.completion_id,
                        request.tool_choice)
        self._apply(self._send(ParseDone()))

    async def _commit(self) -> None:
        """The session's commit, shielded (it lands or is rejected even if the client leaves), answer fed inside."""
        assert self.prepared is not None and self.message is not None and self._finish is not None
        config, sessions = self.controller.config, self.controller.sessions
        stamp = None
        if not config.partial_rollout and self._epoch is not None:
            # One upstream request made every token of the step: its epoch, and the version SGLang reported.
            stamp = VersionStamp(self._epoch, self.versions[-1] if self.versions else self._admitted_version)
        with trio.CancelScope(shield=True):
            try:
                await sessions.commit(
                    self.prepared.handle, self.ids, self.logprobs, self.versions,
                    self.routed if config.use_rollout_routing_replay else None,
                    self._finish.value, self.message.to_openai(), version_stamp=stamp,
                )
            except SessionFinalizedError as exc:
                self._apply(self._send(CommitRejected(str(exc))))
            except TrajectoryVersionChangedError as exc:
                # Nothing was committed and the handle is still live: release it; answer with this code.
                await sessions.drop(self.prepared.handle)
                self._commit_refusal = ApiError.trajectory_version_changed(str(exc))
                self._apply(self._send(CommitRejected(str(exc))))
            except (ValueError, GenerationFinishedError) as exc:
                # Nothing was committed; the handle may still be live: release it, then fail closed.
                await sessions.drop(self.prepared.handle)
                self._apply(self._send(InternalError(f"commit refused: {type(exc).__name__}: {exc}")))
            else:
                self._apply(self._send(CommitAccepted()))

    async def _deliver_response(self) -> None:
        self._delivered = True
        self.controller._counts["responded"] += 1
        message, finish = self.message, self._finish
        assert message is not None and finish is not None
        usage = Usage(len(self.prompt_ids), len(self.ids))
        if self._stream is not None:
            reason = message.finish_reason(finish.value)
            self._output.emit(self._render.final_events(self._tail, reason, usage, self._shown_prompt_ids))
            if self.choice is not None:
                self._output.emit(usage)  # this choice is complete; the answer's usage chunk adds up the choices
        else:
            self._output.emit(self._render.completion(
                message, truncated=finish is FinishKind.LENGTH, usage=usage, prompt_ids=self._shown_prompt_ids,
                ids=self.ids, logprobs=self.logprobs, versions=self.versions, tops=self.tops,
            ))
        await self._output.flush()
        self._output.close()

    async def _deliver_error(self, effect: RespondError) -> None:
        self._delivered = True
        self.controller._counts["failed"] += 1
        error = self._api_error(effect)
        if effect.status >= 500 and effect.code == "internal_error":
            log.error("request %s: generation %s answered 500", current_request_id(), self.completion_id)
        opened = self._render.opened and self.choice is None  # one choice of several hands the error over as is
        self._output.emit(sse_error(error) + SSE_DONE if opened else error)
        await self._output.flush()
        self._output.close()

    def _api_error(self, effect: RespondError) -> ApiError:
        """The machine's RespondError as the API's error (the prepare refusal keeps its details): status and type
        from the one table (``proxy/api/errors.py``), whatever status the machine's effect carries."""
        if self._refusal is not None and str(self._refusal.code) == effect.code:
            return self._refusal
        if self._commit_refusal is not None and effect.code == ErrorCode.SESSION_FINALIZED:
            return self._commit_refusal
        if effect.code == ErrorCode.PAUSED_TIMEOUT:
            waited = self.controller.config.pause_wait_timeout
            return ApiError.paused_timeout(waited, PAUSE_RETRY_AFTER)
        message = effect.message or effect.code.replace("_", " ")
        try:
            return ApiError.of(effect.code, message)
        except ValueError:  # a code the table does not know: a bug, answered as one
            log.error("request %s: the machine answered the unknown code %r", current_request_id(), effect.code)
            return ApiError.internal_error()


__all__ = ["Generation", "GenerationController", "GenerationControllerStatistics"]
