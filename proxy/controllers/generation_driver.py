"""One request's generation, driven by its GenerationMachine: the machine, the dispatch of its effects, the driver task.

Theory of operation (``docs/request-path.md`` has the diagrams and the decisions)
--------------------------------------------------------------------------------
A :class:`Generation` is made and prepared by ``GenerationController.start`` (``proxy/controllers/generation.py``):
:meth:`Generation.prepare` runs in the caller's task (the session registry walks the trie and tokenizes, context
safety decides the budget, the machine is told ``Prepared`` and asks the gate at once); then its **driver task**
(:meth:`Generation.drive`) runs in the app's nursery. A generation has three parts, each with one job: this driver
(the machine and every effect carried out, the gate membership, the session's prepare and commit, the public face
the route awaits), its upstream requests (``proxy/controllers/upstream_request.py:UpstreamRequest``: start, read,
the abort policy) and its output (``proxy/controllers/step_output.py:StepOutput``: token buffers, text decode,
parser, response channel).

How the machine is driven (its docstring is the contract): every event goes through ``send_fail_closed``; the
effects are carried out in order (:meth:`Generation._apply`), synchronously where they touch only memory or the gate
(so the gate's counts and its member sets never disagree), and queued to the driver where they need I/O
(``StartUpstream``, ``ParseOutput``, ``Commit``, ``DropFromSession``, ``Respond``, ``RespondError``). Events from
other tasks (the gate's ``AbortRequested`` and ``Resumed``, the handler's ``ClientDisconnected``) are fed where they
happen; their I/O effects land in the same queue. Nothing here branches on the machine's state, and no data travels
beside it: ``TokensReceived`` carries the tokens of a read and ``AcceptTokens`` hands back those accepted;
``AbortUpstream`` says whether a pause cuts the request; once the machine answered (``Respond``, ``RespondError``)
or answers nobody (``AnswerNobody``: the client left) the driver feeds nothing more but a commit's answer. A request
our own cut ended is ``UpstreamAborted`` (the pause's acknowledgement).

A client that goes away (the handler cancelled, the body generator closed, the exchange ended:
``proxy/request_end.py``) calls :meth:`Generation.client_gone`: ``ClientDisconnected`` releases what the generation
holds and nothing is committed, except a commit already requested (shielded; the machine ignores a disconnect while
COMMITTING). One choice of an ``n > 1`` answer (``proxy/controllers/choices.py``) is a generation given its
``ChoiceSlot``. Without partial rollout every from-scratch request is first checked against the session's version
stamp (``trajectory_version_changed``, fed as ``UpstreamFailed`` with status 400: the path that releases the gate
slot and the session's reservation), the commit carries the step's (epoch, version) stamp, and a stream that showed
tokens of a try a restart discards ends with a ``generation_restarted`` SSE error (nothing is committed). The
proxy's shutdown (:meth:`Generation.shut_down`, once ``--shutdown-grace`` ran out) ends a generation on the
client-left path too, answering ``shutting_down`` instead of nobody.

At about 600 lines this module is over the house's ~500: every effect lands here, and the effects' session
side (prepare, commit) stays with their dispatch rather than in a fourth class of a few dozen lines.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
from array import array
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

import attrs
import trio

from proxy import channel_steps
from proxy.api import ApiError, ChatCompletionRequest
from proxy.api.error_mapping import api_error_for
from proxy.api.errors import ErrorCode
from proxy.config import ProxyConfig
from proxy.controllers.context_budget import StepBudget, plan_step_budget
from proxy.controllers.context_window import ContextWindow
from proxy.controllers.gate import GateController
from proxy.controllers.lifecycle import shutting_down_error
from proxy.controllers.session_journal import StoreUnavailableError
from proxy.controllers.session_registry import PreparedStep, SessionRegistry
from proxy.controllers.step_output import ChoiceSlot, StepOutput
from proxy.controllers.upstream_request import UpstreamRequest, failure_event
from proxy.observability.metrics import MetricsHooks
from proxy.request_id import current_request_id
from proxy.tokenization.results import TitoError
from proxy.trajectory.session_errors import (
    GenerationFinishedError,
    SessionError,
    SessionFinalizedError,
    TrajectoryVersionChangedError,
)
from proxy.trajectory.store import LeaseLostError
from proxy.trajectory.tokens import routed_rows_end
from proxy.trajectory.version_stamp import VersionStamp
from proxy.upstream.errors import UpstreamError
from proxy.upstream.events import Token
from statemachines import rollout_gate as gate_sm
from statemachines import generation as gen
from statemachines.generation_machine import GenerationMachine

log = logging.getLogger("dressage_proxy.generation")

class GenerationHost(Protocol):
    """What a generation uses of the controller that made it (``proxy/controllers/generation.py``)."""

    config: ProxyConfig
    sessions: SessionRegistry
    gate: GateController
    context_window: ContextWindow | None
    #: the request path's counters (``GenerationControllerStatistics``)
    counts: collections.Counter[str]
    #: the Prometheus hooks (first token, tokens, pause fates)
    metrics: MetricsHooks

    def ended(self, generation: Generation) -> None:
        """The generation's driver has ended."""


class _Stop:
    """The driver's last work item after the machine answered nobody."""


_STOP = _Stop()


class _ShuttingDown:
    """The driver's last work item after a shutdown cut (``Generation.shut_down``): answer ``shutting_down``."""


_SHUTTING_DOWN = _ShuttingDown()


@attrs.define(eq=False)
class Generation:
    """One request's generation: its machine, its driver task, its upstream requests and its output.

    Public: :meth:`result` (non-streaming), :meth:`first_output` + :meth:`sse_body` (streaming),
    :meth:`client_gone`; for the gate (:class:`~proxy.controllers.gate.GateMember`): :meth:`abort_requested`,
    :meth:`resumed`, :meth:`cut_report`, :meth:`force_cut`.
    """

    host: GenerationHost
    request: ChatCompletionRequest
    _nursery: trio.Nursery
    #: one choice of an ``n > 1`` answer; None for an ``n = 1`` request
    choice: ChoiceSlot | None
    #: the answer's id (shared by the choices of one answer)
    completion_id: str
    output: StepOutput
    upstream: UpstreamRequest
    machine: GenerationMachine = attrs.field(init=False)
    prepared: PreparedStep | None = attrs.field(default=None, init=False)
    budget: StepBudget | None = attrs.field(default=None, init=False)
    # The epoch and announced version of the current request's admission (the step's stamp without partial rollout).
    _epoch: int | None = attrs.field(default=None, init=False)
    _admitted_version: str | None = attrs.field(default=None, init=False)
    _parse_scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    # The driver's flush while it has no work (cancelled when work is queued; see _flush_while_idle).
    _idle_flush: trio.CancelScope | None = attrs.field(default=None, init=False)
    # Work for the driver (unbounded: the machine bounds it).
    _work_send: trio.MemorySendChannel[object] = attrs.field(init=False)
    _work_recv: trio.MemoryReceiveChannel[object] = attrs.field(init=False)
    # The machine's last answer was issued (Respond, RespondError, AnswerNobody): nothing more is fed but a
    # commit's answer. Set from those effects only.
    _answered: bool = attrs.field(default=False, init=False)
    _delivered: bool = attrs.field(default=False, init=False)
    # When the gate wait (GateWait, or an acknowledged abort) began: the pause-wait timeout's start.
    _wait_began: float | None = attrs.field(default=None, init=False)
    # The shutdown's grace ran out (shut_down); _driving: the driver task has begun (it cuts a cut that came first).
    _shutting_down: bool = attrs.field(default=False, init=False)
    _driving: bool = attrs.field(default=False, init=False)
    #: when the generation was made (trio's clock): its duration and time to first token count from here
    began: float = attrs.field(factory=trio.current_time, init=False)
    _first_token_seen: bool = attrs.field(default=False, init=False)
    # Tokens held when a pause's abort was acknowledged, until the resume decides their fate (kept or discarded).
    _held_at_pause: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        self.machine = GenerationMachine.new(partial_rollout=self.host.config.partial_rollout)
        self._work_send, self._work_recv = trio.open_memory_channel(math.inf)

    # -- the public face: what the route awaits ------------------------------------------------------------------

    @property
    def streaming(self) -> bool:
        return self.request.stream

    async def result(self) -> dict[str, Any]:
        """Non-streaming: the ``chat.completion`` object, or raises the ``ApiError`` to answer."""
        return await self._first_item()

    async def first_output(self) -> bytes:
        """Streaming: the first SSE bytes (the stream is open: answer 200), or raises the ``ApiError`` to answer
        instead (nothing was sent yet)."""
        return await self._first_item()

    async def _first_item(self) -> Any:
        item = await self.output.channel.receive_first(self.client_gone)
        if isinstance(item, ApiError):
            raise item
        return item

    async def next_output(self) -> Any:
        """One choice of several: its next output item (SSE bytes, its ``Usage`` after its last chunk, the
        ``ApiError`` it ends with, or a non-streaming ``chat.completion`` dict), None at its end. A cancellation
        calls :meth:`client_gone`."""
        return await self.output.channel.receive_next(self.client_gone)

    def opening_chunk(self) -> dict[str, Any]:
        """One choice of several: its opening chunk (the role, and the prompt ids it shows), which the answer sends
        for every choice, in index order, when the stream opens (its own stream starts with its first delta)."""
        return self.output.render.opening_chunk(self.output.shown_prompt_ids)

    def sse_body(self, first: bytes) -> AsyncIterator[bytes]:
        """The streaming response body: ``first``, then whatever the driver buffered, one write per wake-up. It holds
        no cancel scope or nursery across a ``yield``; closed or cancelled before the end, it calls
        :meth:`client_gone`."""
        return self.output.channel.body(first, self.client_gone)

    def client_gone(self) -> None:
        """The client went away: ``ClientDisconnected`` (releases everything; nothing is committed). Sync and
        idempotent: safe from a cancelled handler, a closing body generator, or the end of the exchange."""
        # A request still read to its abort finish (a pause's drain) is given up at once.
        self.upstream.cancel()
        # Wakes a driver blocked on a full output channel and drops what was buffered.
        self.output.channel.abandon()
        self._feed(gen.ClientDisconnected())
        if self._parse_scope is not None:
            self._parse_scope.cancel()

    def shut_down(self) -> None:
        """``--shutdown-grace`` ran out (``proxy/controllers/lifecycle.py``): ``ClientDisconnected`` releases
        everything and commits nothing (a commit already requested lands and is answered), and the client, still
        there, is answered ``shutting_down``. Sync and idempotent; before the driver runs, the driver does it."""
        if self._shutting_down:
            return
        self._shutting_down = True
        if self._driving:
            self._cut_for_shutdown()

    def _cut_for_shutdown(self) -> None:
        # As client_gone, but the output channel stays: the client is still there and gets its answer.
        self.upstream.cancel()
        self._feed(gen.ClientDisconnected())

    def statistics(self) -> gen.GenerationStatistics:
        return self.machine.statistics()

    # -- the gate's calls (GateMember) ---------------------------------------------------------------------------

    def abort_requested(self) -> None:
        self._feed(gen.AbortRequested())

    def resumed(self, epoch: int, weight_version: str | None) -> None:
        self._wait_began = None
        held, self._held_at_pause = self._held_at_pause, 0
        self._feed(gen.Resumed(epoch, weight_version))
        if held:
            # What the resume did with the tokens the pause cut: a restart discarded them (DiscardPartial, carried
            # out synchronously above), a continuation or a finish at the budget kept them.
            kept = len(self.output.ids)
            self.host.metrics.pause_tokens(kept, held - kept)

    def cut_report(self) -> dict[str, object]:
        return {
            "id": self.completion_id, "session_id": self.request.session_id, "tokens_before": len(self.output.ids),
        }

    def force_cut(self) -> None:
        """The pause's bound passed without the upstream confirming this generation's abort: cancel its request's
        scope, so its reader returns and acknowledges with the tokens it delivered (the rules of any abort). With no
        request open while the gate counts it in flight, its driver is not where it must be (a bug): fail closed,
        which releases the gate slot at once."""
        if not self.upstream.cancel():
            self._feed(gen.InternalError("in flight at the pause's bound with no upstream request open"))

    # -- prepare (in the handler's task) -------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Prepare + tokenize + budget as one unit: ``Prepared`` (and the gate's answer), or raise the refusal."""
        request, host = self.request, self.host
        # Before anything is held: a client that leaves during this wait leaves nothing behind.
        assert host.context_window is not None
        window = await host.context_window.tokens()
        try:
            prepared = await host.sessions.prepare(
                # The tools the template renders (none for tool_choice none, the named one for a named choice):
                # what the model sees is the session's context.
                request.session_id, request.messages, tools=request.template_tools,
                chat_template_kwargs=request.chat_template_kwargs, response_mask=request.response_mask,
                instance_id=request.instance_id, turn_id=request.turn_id, idempotency=request.idempotency,
            )
        except (SessionError, TitoError) as exc:
            self._refuse(api_error_for(exc))
        except trio.Cancelled:
            # The client left during prepare; the registry rolled itself back.
            self._feed(gen.ClientDisconnected())
            raise
        except Exception as exc:
            # A bug below: fail closed (the app answers 500); the registry rolled itself back.
            self._feed(gen.InternalError(f"prepare failed: {type(exc).__name__}: {exc}"))
            raise
        self.prepared = prepared
        config = host.config
        # Routing replay: rows already held along the path (the base checkpoint's steps) are not asked for again.
        rows = routed_rows_end(prepared.tokens.base) if config.use_rollout_routing_replay else 0
        self.output.prepared(prepared.input_array(), rows)
        prompt = len(self.output.prompt_ids)
        try:
            self.budget = plan_step_budget(prompt, request.max_tokens, context_window=window,
                                           dynamic=config.dynamic_max_tokens)
        except ApiError as refusal:
            await host.sessions.drop(prepared.handle)
            self._refuse(refusal)
        self._feed(gen.Prepared(prompt, self.budget.max_new_tokens))

    def _refuse(self, refusal: ApiError) -> None:
        """The prepare unit failed: tell the machine, raise what it says to answer (with the refusal's details)."""
        self.output.refusal = refusal
        self.host.counts["refused"] += 1
        for effect in self.machine.send_fail_closed(gen.PrepareFailed(refusal.status, str(refusal.code),
                                                                  refusal.message)):
            if isinstance(effect, gen.RespondError):
                raise self.output.error_for(effect)
        raise refusal

    # -- the machine ---------------------------------------------------------------------------------------------

    def _feed(self, event: object) -> None:
        """Send ``event`` to the machine (failing closed on an illegal one) and carry out its effects."""
        self._apply(self.machine.send_fail_closed(event))

    def _apply(self, effects: list) -> None:
        """Carry out effects in order: memory and gate effects now, I/O effects queued to the driver."""
        gate = self.host.gate
        for effect in effects:
            if isinstance(effect, gen.AskGate):
                answer = gate.want_to_start(self)
                if isinstance(answer, gate_sm.Admit):
                    self._feed(gen.GateAdmitted(answer.epoch, answer.weight_version))
                else:
                    self._wait_began = trio.current_time()
                    self._feed(gen.GateWait(answer.epoch))
            elif isinstance(effect, gen.AcceptTokens):
                self.output.accept(effect)
                self.upstream.accepted += effect.count
                self._count_tokens(effect.count)
            elif isinstance(effect, gen.DropTokens):
                self.host.counts["dropped_tokens"] += effect.count
            elif isinstance(effect, gen.AbortUpstream):
                self.upstream.cut(effect.rid, effect.for_pause)
            elif isinstance(effect, gen.ReleaseGate):
                gate.finished(self)
            elif isinstance(effect, gen.AcknowledgeAbortToGate):
                self._wait_began = trio.current_time()
                self._held_at_pause = len(self.output.ids)
                gate.abort_acknowledged(self, self._held_at_pause)
            elif isinstance(effect, gen.CancelGateWait):
                self._wait_began = None
                gate.cancel_wait(self)
            elif isinstance(effect, gen.DiscardPartial):
                self.output.discard()
            elif isinstance(effect, gen.AnswerNobody):
                self._answered = True
                if self._shutting_down:
                    # Nobody left: the shutdown cut it (shut_down), and its client is still waiting for an answer.
                    self.host.counts["failed"] += 1
                    self._queue(_SHUTTING_DOWN)
                else:
                    self.host.counts["cancelled"] += 1
                    self._queue(_STOP)
            elif isinstance(effect, gen.ReportFault):
                log.error(
                    "request %s: generation %s: controller fault: %s", current_request_id(), self.completion_id,
                    effect.reason, extra={"completion_id": self.completion_id, "reason": effect.reason},
                )
            elif isinstance(effect, (gen.Respond, gen.RespondError)):
                self._answered = True
                self._queue(effect)
            else:  # StartUpstream, ParseOutput, Commit, DropFromSession
                self._queue(effect)

    def _count_tokens(self, count: int) -> None:
        """Accepted tokens, for the metrics (the first one's time too: a restart's first token is not the first)."""
        metrics = self.host.metrics
        if not self._first_token_seen:
            self._first_token_seen = True
            metrics.first_token(trio.current_time() - self.began)
        metrics.tokens_generated(count)

    def _queue(self, item: object) -> None:
        try:
            self._work_send.send_nowait(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the driver has ended; nothing is left to do
        if self._idle_flush is not None:
            # Work comes first: what is staged is sent by the next flush (the reader's, or the answer's).
            self._idle_flush.cancel()

    # -- the driver task ---------------------------------------------------------------------------------------

    async def drive(self) -> None:
        """Carry out queued effects until the response is delivered (or the machine answered nobody). Runs in the
        app's nursery and never raises into it: a bug becomes ``InternalError`` (fail closed, 500)."""
        self._driving = True
        if self._shutting_down:
            self._cut_for_shutdown()
        try:
            while not self._delivered:
                item = await self._next_work()
                if item is _STOP:
                    break
                answered_before = self._answered
                try:
                    await self._do(item)
                except Exception as exc:  # noqa: BLE001 - a bug in this controller: fail closed, keep the proxy up
                    log.exception("generation %s: error while carrying out %s", self.completion_id, item)
                    self._feed(gen.InternalError(f"{type(exc).__name__}: {exc}"))
                    if answered_before:
                        break
        except Exception:  # noqa: BLE001 - the loop itself failed; never raise into the app nursery
            log.exception("generation %s: driver failed", self.completion_id)
        finally:
            self.output.channel.close()
            if self._held_at_pause:
                # Ended while a pause held it (its client left, its pause wait timed out): its tokens are lost.
                self.host.metrics.pause_tokens(0, self._held_at_pause)
            self.host.ended(self)

    async def _next_work(self) -> object:
        """The next queued effect; meanwhile flushes outputs a pause left behind, and times out a gate wait."""
        await self._flush_while_idle()
        while True:
            if self._wait_began is None:
                return await channel_steps.receive(self._work_recv)  # queued work: no task step (4 a request)
            deadline = self._wait_began + self.host.config.pause_wait_timeout
            with trio.move_on_at(deadline):
                return await self._work_recv.receive()
            try:
                # Resumed (fed synchronously by the gate) wins over a timer that fired at the same moment.
                return self._work_recv.receive_nowait()
            except trio.WouldBlock:
                pass
            waited = trio.current_time() - self._wait_began
            self._wait_began = None
            log.info("generation %s: gave up waiting for resume after %.1f s", self.completion_id, waited,
                     extra={"completion_id": self.completion_id, "waited_seconds": round(waited, 3)})
            self._feed(gen.PauseWaitTimedOut())

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
                await self.output.channel.flush()
            finally:
                self._idle_flush = None

    async def _do(self, item: object) -> None:
        if gen.waits_for_client(item):
            # Only answers wait for the client here, and by then the generation holds no gate slot.
            await self.output.channel.flush()
        if isinstance(item, gen.StartUpstream):
            await self._run_upstream(item)
        elif isinstance(item, gen.ParseOutput):
            await self._parse(item)
        elif isinstance(item, gen.Commit):
            await self._commit()
        elif isinstance(item, gen.DropFromSession):
            if self.prepared is not None:
                await self.host.sessions.drop(self.prepared.handle)
        elif isinstance(item, gen.Respond):
            self._delivered = True
            self.host.counts["responded"] += 1
            await self.output.respond()
        elif isinstance(item, gen.RespondError):
            self._delivered = True
            self.host.counts["failed"] += 1
            await self.output.respond_error(self.output.error_for(item))
        elif item is _SHUTTING_DOWN:
            self._delivered = True
            await self.output.respond_error(shutting_down_error())
        else:
            raise AssertionError(f"unknown work item {item!r}")

    # -- upstream ----------------------------------------------------------------------------------------------

    async def _run_upstream(self, start: gen.StartUpstream) -> None:
        """One upstream request (``UpstreamRequest.run``); its ending becomes exactly one event."""
        if self._answered:
            return
        if self.output.restart_seen_by_client:
            await self._abandon_restarted_stream()
            return
        config, output = self.host.config, self.output
        assert self.prepared is not None and self.budget is not None
        self._epoch, self._admitted_version = start.epoch, start.weight_version
        if not config.partial_rollout:
            # Spec 7: without partial rollout every step of a session is generated under one epoch and version.
            # Checked before each from-scratch request (the first, or a restart after a pause).
            try:
                self.host.sessions.check_version(self.prepared.handle, VersionStamp(start.epoch, None))
            except TrajectoryVersionChangedError as exc:
                # The machine's path for "this request cannot go upstream": release the gate slot and the
                # session's reservation, answer the error (400), commit nothing.
                self._feed(gen.UpstreamFailed(400, exc.code, str(exc)))
                return
        kept = start.kept_tokens
        input_ids = output.prompt_ids + array("i", output.ids[:kept]) if kept else output.prompt_ids
        # Routing replay: ask only for rows not held yet. That is the machine's len(input_ids) - 1 for a
        # continuation whose interrupted request delivered its rows (its abort finish was read), else the first
        # position without a row (a stream cut at once delivers none: its rows are asked for again here).
        routed_start = output.rows_end if config.use_rollout_routing_replay else start.routed_experts_start_len
        end = await self.upstream.run(
            start, input_ids, routed_start, started=self._upstream_started, on_tokens=self._on_tokens,
        )
        if self._answered:
            return
        if end.outcome.finished is not None:
            output.upstream_finished(end.outcome.finished, len(input_ids), end.accepted)
        self._feed(end.event())

    def _upstream_started(self, rid: str) -> None:
        """The request's rid is drawn: ``UpstreamStarted`` (a pause that came first cuts it at once)."""
        self._feed(gen.UpstreamStarted(rid))

    async def _on_tokens(self, rid: str, tokens: Sequence[Token]) -> None:
        """The tokens of one upstream read: to the machine (AcceptTokens records and renders them), then out.

        One event per read, not per token (the machine's step is a large part of the per-token cost); a read whose
        tokens report different weight versions is fed as one event per run of equal versions, so the machine
        still sees every version change."""
        start = 0
        while start < len(tokens) and not self._answered:
            version = tokens[start].weight_version
            end = start + 1
            while end < len(tokens) and tokens[end].weight_version == version:
                end += 1
            self._feed(gen.TokensReceived(rid, version, tokens[start:end]))
            start = end
        await self.output.channel.flush()

    async def _abandon_restarted_stream(self) -> None:
        """Without partial rollout the step restarts, but this client already has tokens of the discarded try:
        end its stream with an error and give the generation up (nothing is committed; the client retries)."""
        # Release first (the gate slot, the session's reservation): the answer below waits on the client.
        self._feed(gen.ClientDisconnected())
        await self.output.respond_error(ApiError.of(
            ErrorCode.GENERATION_RESTARTED,
            "generation was interrupted by a weight update and restarts from scratch (no partial rollout); "
            "the tokens already streamed are void: retry the request",
        ))

    # -- parse, commit ---------------------------------------------------------------------------------------

    async def _parse(self, effect: gen.ParseOutput) -> None:
        if self._answered:
            return
        failure: UpstreamError | None = None
        message = None
        # A parse that asks SGLang is cut short when the client leaves (``client_gone``); local parsers ask nobody,
        # so they run without a scope (a cancel scope is ~6 us of trio's work, issue 21 item 2).
        scope = trio.CancelScope() if self.output.parser.config.uses_sglang else None
        with scope if scope is not None else contextlib.nullcontext():
            self._parse_scope = scope
            try:
                message = await self.output.parse(effect.finish)
            except UpstreamError as exc:
                failure = exc
        self._parse_scope = None
        if self._answered or (scope is not None and scope.cancelled_caught):
            return
        if failure is not None:
            self._feed(failure_event(failure))
            return
        assert message is not None
        self.output.message = message
        self._feed(gen.ParseDone())

    async def _commit(self) -> None:
        """The session's commit, shielded (it lands or is rejected even if the client leaves), answer fed inside."""
        output = self.output
        assert self.prepared is not None and output.message is not None and output.finish is not None
        config, sessions = self.host.config, self.host.sessions
        stamp = None
        if not config.partial_rollout and self._epoch is not None:
            # One upstream request made every token of the step: its epoch, and the version SGLang reported.
            stamp = VersionStamp(self._epoch, output.versions[-1] if output.versions else self._admitted_version)
        with trio.CancelScope(shield=True):
            try:
                await sessions.commit(
                    self.prepared.handle, output.ids, output.logprobs, output.versions,
                    output.routed if config.use_rollout_routing_replay else None,
                    output.finish.value, output.message.to_openai(), version_stamp=stamp,
                )
            except SessionFinalizedError as exc:
                self._feed(gen.CommitRejected(str(exc)))
            except TrajectoryVersionChangedError as exc:
                # Nothing was committed and the handle is still live: release it; answer with this code.
                await sessions.drop(self.prepared.handle)
                self.output.refusal = ApiError.trajectory_version_changed(str(exc))
                self._feed(gen.CommitRejected(str(exc)))
            except (StoreUnavailableError, LeaseLostError) as exc:
                # The step is in memory but not durable (503 store_unavailable), or another proxy owns the session
                # now (503 session_moved): either way the agent is answered an error it may retry.
                self.output.refusal = api_error_for(exc)
                self._feed(gen.CommitRejected(str(exc)))
            except (ValueError, GenerationFinishedError) as exc:
                # Nothing was committed; the handle may still be live: release it, then fail closed.
                await sessions.drop(self.prepared.handle)
                self._feed(gen.InternalError(f"commit refused: {type(exc).__name__}: {exc}"))
            else:
                self._feed(gen.CommitAccepted())

__all__ = ["Generation", "GenerationHost"]
