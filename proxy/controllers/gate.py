"""The gate controller: owns the proxy's ``RolloutGate`` machine and knows its members one by one.

The machine counts generations (in flight, waiting); the controller keeps the sets behind those counts, so that
the machine's ``AbortInFlight`` reaches every in-flight generation (``abort_requested()``) and ``AdmitWaiters``
every waiter (``resumed(epoch, version)``), as the gate's broadcast rule (``rollout_gate.tell``, shared with the
model-checked worlds) says. Members are the generation controllers' per-request objects; anything with those methods
will do (:class:`GateMember`).

Everything a generation asks of the gate is synchronous (admission, release, acknowledgement, giving up): each is
one ``send`` to the machine and the effects it returns, carried out before the call returns. So the machine's
counts and the member sets never disagree, and no pause can slip between a generation's admission and its first
upstream request. Waiting is never polling:

- a member that got ``Wait`` waits on its own work queue, which ``resumed()`` fills (the controller delivers
  ``Resumed`` to every waiter in the same synchronous step in which the machine admits them);
- ``pause()`` waits on a ``trio.Event`` that the ``PauseAcknowledged`` effect sets (the last in-flight generation
  to acknowledge or finish carries it out), for at most ``abort_timeout`` seconds from the pause's start: then it
  force-cuts every generation still in flight (``force_cut()``: its own upstream request is cancelled, keeping
  what it delivered, so it acknowledges under the same rules as any abort) and reports them in its answer;
- ``wait_running()`` waits on a ``trio.Event`` that resume sets.

Pause and resume are idempotent, as the machine's table says: a second pause while pausing joins the first, while
paused returns at once; a resume while running with no or the same version is a no-op. A resume while pausing, or
one announcing a new version while running, is refused (:class:`ResumeRefusedError`; ``POST /v1/rollout/resume``
answers 409 ``resume_refused``). Nothing here branches on the machine's state: every decision comes back as an
effect. The HTTP routes are ``proxy/routes/rollout_control.py``; ``docs/partial-rollout.md`` has the protocol.
"""

from __future__ import annotations

import logging
from typing import Protocol

import attrs
import trio

from proxy.observability.metrics import NO_METRICS, MetricsHooks
from statemachines import rollout_gate as gate_sm
from statemachines.core import IllegalTransition

log = logging.getLogger("dressage_proxy.gate")


class GateMember(Protocol):
    """What the gate controller needs from a generation (``proxy.controllers.generation.Generation``)."""

    def abort_requested(self) -> None:
        """A pause wants this in-flight generation's upstream request cut (feed ``AbortRequested``)."""

    def resumed(self, epoch: int, weight_version: str | None) -> None:
        """The gate resumed while this generation waited (feed ``Resumed``); it streams from now on."""

    def cut_report(self) -> dict[str, object]:
        """How a pause's answer names this generation when it had to force-cut it."""

    def force_cut(self) -> None:
        """The pause's bound passed and the upstream has not confirmed this generation's abort: cut its request
        now (it acknowledges, or fails closed, before long)."""


class ResumeRefusedError(Exception):
    """A resume the gate refused: a pause is still in progress, or a new version was announced without a pause."""

    code = "resume_refused"


@attrs.frozen
class PauseResult:
    """What a pause call returns once the gate is PAUSED."""

    epoch: int
    #: generations interrupted by this pause (acknowledged aborts); 0 for a pause that found nothing in flight
    aborted: int
    #: generations waiting for resume now
    waiting: int
    #: True when the gate was already paused (the call returned at once)
    already_paused: bool = False
    #: generated tokens the interrupted generations hold (kept across the pause; see abort_acknowledged)
    tokens_kept: int = 0
    #: generations whose abort the upstream had not confirmed within the bound: the proxy cut them itself
    force_cut: tuple[dict[str, object], ...] = ()


@attrs.frozen
class ResumeResult:
    """What a resume call returns."""

    epoch: int
    weight_version: str | None
    #: waiters admitted by this resume (0 for a no-op resume while running)
    admitted: int
    #: True when the gate was already running (nothing changed)
    already_running: bool = False


@attrs.define(eq=False)
class _Pause:
    """One pause: set when acknowledged, with its result (recorded before the event is set)."""

    done: trio.Event = attrs.field(factory=trio.Event)
    result: PauseResult | None = None


@attrs.define(eq=False)
class GateController:
    """The rollout gate of one proxy process (see the module docstring)."""

    machine: gate_sm.RolloutGate
    #: seconds a pause waits for its aborts to be confirmed before it force-cuts (--pause-abort-timeout)
    abort_timeout: float = 30.0
    #: where each acknowledged pause is reported (its latency, the generations it cut)
    metrics: MetricsHooks = attrs.field(default=NO_METRICS, kw_only=True)
    # Invariant: len(_in_flight) == machine's in_flight and len(_waiting) == its waiting (a dict keeps the order).
    _in_flight: dict[GateMember, None] = attrs.field(factory=dict, init=False)
    _waiting: dict[GateMember, None] = attrs.field(factory=dict, init=False)
    # The latest pause: acknowledged (its event set, its result recorded) or in progress. Each pause has its own, so
    # a caller woken by its acknowledgement reads its result even if a resume and the next pause came first.
    _pause: _Pause = attrs.field(factory=_Pause, init=False)
    # Tokens the generations interrupted by the current pause hold (reported in its PauseResult).
    _tokens_kept: int = attrs.field(default=0, init=False)
    # When the pause in progress began (None: no pause in progress), and whom it force-cut.
    _pausing_since: float | None = attrs.field(default=None, init=False)
    _force_cut: dict[GateMember, dict[str, object]] = attrs.field(factory=dict, init=False)
    # Set while RUNNING; replaced when a pause starts.
    _running: trio.Event = attrs.field(factory=trio.Event, init=False)
    # Lifetime counters, for statistics.
    _admitted: int = attrs.field(default=0, init=False)
    _parked: int = attrs.field(default=0, init=False)
    _pauses: int = attrs.field(default=0, init=False)

    @classmethod
    def new(
        cls, weight_version: str | None = None, *, abort_timeout: float = 30.0, metrics: MetricsHooks = NO_METRICS
    ) -> GateController:
        """A running gate at epoch 0, with the configured weight version (if known)."""
        controller = cls(gate_sm.RolloutGate.new(weight_version), abort_timeout, metrics=metrics)
        controller._running.set()
        controller._pause.done.set()  # no pause in progress: wait_pause_settled() returns at once
        return controller

    async def start_as(self, *, paused: bool, weight_version: str | None) -> None:
        """Before serving, a proxy joining a fleet takes the fleet's state: its weight version (a fresh machine at
        epoch 0, as :meth:`new` would make it), and paused when the fleet is (an ordinary ``PauseRequested`` with
        nothing in flight: the machine's RUNNING -> PAUSED row, so the paused start is the machine's own path)."""
        if self._in_flight or self._waiting or self._pauses:
            raise RuntimeError("start_as() is for a gate that has not served yet")
        if weight_version is not None:
            self.machine = gate_sm.RolloutGate.new(weight_version)
        if paused:
            await self.pause()

    # -- what generations ask (synchronous) ----------------------------------------------------------------------

    def want_to_start(self, member: GateMember) -> gate_sm.Admit | gate_sm.Wait:
        """Admission: ``Admit`` (the member is in flight from now on) or ``Wait`` (it waits for ``resumed``)."""
        for effect in self._send(gate_sm.GenerationWantsToStart()):
            if isinstance(effect, gate_sm.Admit):
                self._in_flight[member] = None
                self._admitted += 1
                return effect
            if isinstance(effect, gate_sm.Wait):
                self._waiting[member] = None
                self._parked += 1
                return effect
        raise AssertionError("the gate answered a start with neither Admit nor Wait")  # the table rules this out

    def finished(self, member: GateMember) -> None:
        """An in-flight member no longer streams upstream (its stream ended, failed, or its client left)."""
        if self._in_flight.pop(member, _ABSENT) is _ABSENT:
            log.error("gate: finished() from a generation that is not in flight; ignored")
            return
        self._carry_out(self._send(gate_sm.GenerationFinished()))

    def abort_acknowledged(self, member: GateMember, tokens_kept: int = 0) -> None:
        """An in-flight member was cut at a token boundary after a pause's abort: it now waits for resume, holding
        ``tokens_kept`` generated tokens (summed into the pause's result)."""
        if self._in_flight.pop(member, _ABSENT) is _ABSENT:
            log.error("gate: abort_acknowledged() from a generation that is not in flight; ignored")
            return
        self._waiting[member] = None
        self._tokens_kept += max(0, tokens_kept)
        self._carry_out(self._send(gate_sm.GenerationAbortAcknowledged()))

    def cancel_wait(self, member: GateMember) -> None:
        """A waiting member gives up (its client left, or its pause wait timed out)."""
        if self._waiting.pop(member, _ABSENT) is _ABSENT:
            log.error("gate: cancel_wait() from a generation that is not waiting; ignored")
            return
        self._carry_out(self._send(gate_sm.WaiterCancelled()))

    # -- what the trainer asks -----------------------------------------------------------------------------------

    async def pause(self) -> PauseResult:
        """Pause generation; returns once nothing streams upstream (every in-flight generation acknowledged its
        abort or finished). Idempotent. Cancelling the caller does not undo the pause."""
        pause = self._pause
        for effect in self._send(gate_sm.PauseRequested()):
            if isinstance(effect, gate_sm.AlreadyPaused):
                return PauseResult(effect.epoch, 0, effect.waiting, already_paused=True)
            if isinstance(effect, gate_sm.AbortInFlight):
                self._pauses += 1
                # This pause's own record; the running event is cleared until resume.
                self._pause = pause = _Pause()
                self._tokens_kept = 0
                self._force_cut = {}
                self._pausing_since = trio.current_time()
                self._running = trio.Event()
            elif isinstance(effect, gate_sm.PauseAcknowledged):
                # Nothing was in flight: paused at once (the broadcast below records the result).
                self._pauses += 1
                self._pause = pause = _Pause()
                self._running = trio.Event()
            self._broadcast(effect)
            if isinstance(effect, gate_sm.PauseAcknowledged):
                assert pause.result is not None  # recorded by the broadcast
                return pause.result
            # AlreadyPausing: join the pause in progress below.
        since = self._pausing_since
        with trio.move_on_at(trio.current_time() if since is None else since + self.abort_timeout):
            await pause.done.wait()
        if not pause.done.is_set():
            self._force_cut_in_flight()
            await pause.done.wait()
        assert pause.result is not None  # recorded with the event, never cleared
        return pause.result

    def _force_cut_in_flight(self) -> None:
        """The bound passed: every generation still in flight cuts its own request (once per pause)."""
        for member in list(self._in_flight):
            # A member's force_cut may release others synchronously: only those still in flight are cut.
            if member in self._in_flight and member not in self._force_cut:
                # Named before the cut: a cut that fails closed may acknowledge the pause synchronously.
                self._force_cut[member] = member.cut_report()
                member.force_cut()
        if self._force_cut:
            log.warning("gate: the upstream did not confirm %d abort(s) within %.1f s; cut by the proxy: %s",
                        len(self._force_cut), self.abort_timeout, list(self._force_cut.values()),
                        extra={"cut": len(self._force_cut), "abort_timeout_seconds": self.abort_timeout})

    def pausing_for(self) -> float:
        """Seconds the pause in progress has waited so far (0 when none is in progress)."""
        since = self._pausing_since
        return 0.0 if since is None or self._pause.done.is_set() else trio.current_time() - since

    async def resume(self, weight_version: str | None = None) -> ResumeResult:
        """Resume generation, optionally announcing the weight version now loaded; every waiter streams at once.
        Raises :class:`ResumeRefusedError` while a pause is in progress, or for a new version without a pause."""
        # Resume never waits; it is async so that later versions may do I/O here (e.g. continue_generation).
        await trio.lowlevel.checkpoint()
        for effect in self._send(gate_sm.ResumeRequested(weight_version)):
            if isinstance(effect, gate_sm.ResumeRefused):
                raise ResumeRefusedError(effect.reason)
            if isinstance(effect, gate_sm.AlreadyRunning):
                return ResumeResult(effect.epoch, effect.weight_version, 0, already_running=True)
            if self._broadcast(effect).resumed is not None:
                return ResumeResult(effect.epoch, effect.weight_version, effect.count)
        raise AssertionError("the gate answered a resume with no known effect")  # the table rules this out

    async def wait_pause_settled(self) -> None:
        """Return once the pause in progress (if any) was acknowledged. Cleanup a pause causes (the ``/abort_request``
        of each cut rid) waits for this, so it never competes with the acknowledgements for the event loop: the
        streams are already cut locally, so no token can be accepted in between."""
        await self._pause.done.wait()

    async def wait_running(self) -> None:
        """Return once the gate is running (at once if it is)."""
        await self._running.wait()

    # -- reporting -----------------------------------------------------------------------------------------------

    def statistics(self) -> GateControllerStatistics:
        """The machine's report plus the controller's lifetime counters (for /v1/rollout/pause_state, /health)."""
        gate = self.machine.statistics()
        return GateControllerStatistics(
            state=gate.state, epoch=gate.epoch, weight_version=gate.weight_version, in_flight=gate.in_flight,
            waiting=gate.waiting, admitted_total=self._admitted, parked_total=self._parked, pauses_total=self._pauses,
        )

    # -- plumbing ------------------------------------------------------------------------------------------------

    def _send(self, event: object) -> list:
        """One event to the machine. An IllegalTransition is a bug in this controller (its sets mirror the
        machine's counts); the machine is transactional, so nothing changed: re-raise for the caller."""
        try:
            return self.machine.send(event)
        except IllegalTransition:
            log.exception("gate: illegal event %s", type(event).__name__)
            raise

    def _carry_out(self, effects: list) -> None:
        """The effects of a member's answer: only ``PauseAcknowledged`` can come back."""
        for effect in effects:
            self._broadcast(effect)

    def _broadcast(self, effect: object) -> gate_sm.Told[GateMember]:
        """Carry out one effect's broadcast as the gate's rule says (``rollout_gate.tell``): every in-flight member
        told to abort, every waiter admitted (all counted in flight before any is told, so a member's synchronous
        release during ``resumed()`` finds itself in flight), or the pending pause calls returned."""
        told = gate_sm.tell(effect, list(self._in_flight), list(self._waiting))
        if told.mismatch is not None:
            log.error("gate: the members disagree with the machine: %s", told.mismatch)
        for member in told.abort:
            # Each answers later (abort acknowledged, or finished), through this controller.
            member.abort_requested()
        for member in told.resume:
            del self._waiting[member]
            self._in_flight[member] = None
        if told.resumed is not None:
            self._running.set()
            for member in told.resume:
                member.resumed(told.resumed.epoch, told.resumed.weight_version)
        if told.acknowledged is not None:
            self._acknowledge(told.acknowledged)
        return told

    def _acknowledge(self, effect: gate_sm.PauseAcknowledged) -> None:
        pause = self._pause
        pause.result = PauseResult(effect.epoch, effect.aborted, effect.waiting, tokens_kept=self._tokens_kept,
                                   force_cut=tuple(self._force_cut.values()))
        # From the pause's request (none for a pause that found nothing in flight: acknowledged at once).
        since = self._pausing_since
        self.metrics.pause_acknowledged(0.0 if since is None else trio.current_time() - since, effect.aborted)
        self._tokens_kept = 0
        self._pausing_since = None
        pause.done.set()


@attrs.frozen
class GateControllerStatistics:
    """A frozen report of the gate and its controller."""

    state: str
    epoch: int
    weight_version: str | None
    in_flight: int
    waiting: int
    admitted_total: int
    parked_total: int
    pauses_total: int


_ABSENT = object()

__all__ = [
    "GateController", "GateControllerStatistics", "GateMember", "PauseResult", "ResumeRefusedError", "ResumeResult",
]
