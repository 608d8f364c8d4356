"""RolloutGate: one per proxy; decides when generations may stream upstream, around the trainer's pause and resume.

Theory of operation
-------------------
The trainer pauses generation to update the weights, then resumes with the new weight version (spec section 7).
The gate counts generations, it does not know them one by one: ``in_flight`` are admitted and streaming upstream
(or being aborted), ``waiting`` are parked until the next resume (new ones that arrived during a pause, and
interrupted ones that keep their tokens and will continue).

- RUNNING: a generation that wants to start is admitted at once (``Admit``).
- ``PauseRequested`` in RUNNING: with nothing in flight the gate is PAUSED at once (``PauseAcknowledged``);
  otherwise it is PAUSING and asks the controller to cut every in-flight stream (``AbortInFlight``). Each of those
  answers exactly once: ``GenerationAbortAcknowledged`` (cut at a token boundary; it becomes a waiter) or
  ``GenerationFinished`` (it ended anyway). The answer that brings ``in_flight`` to 0 moves the gate to PAUSED and
  emits ``PauseAcknowledged``: only then does the pause call return (architecture invariant 2).
- PAUSING and PAUSED admit nobody: a generation that wants to start waits (``Wait``). So once the pause is
  requested the set of streams it waits for only shrinks, and PAUSED has nothing in flight (invariant 1).
- ``ResumeRequested`` in PAUSED: RUNNING, ``epoch + 1``, the announced weight version (or the old one), and every
  waiter is admitted at once (``AdmitWaiters``): they are counted in flight before any of them runs, so a pause
  that follows immediately aborts them too.

Idempotent events: a second pause while PAUSING (``AlreadyPausing``: keep waiting for the ``PauseAcknowledged``)
or PAUSED (``AlreadyPaused``: return at once); a resume while RUNNING with no version or the current one
(``AlreadyRunning``, no epoch change). Refused, as effects because they come from outside: a resume while PAUSING
(the pause has not returned yet) and a resume while RUNNING that announces a different version (weights may only
change under a pause); the controller answers 409 to those.

The broadcast effects name no generation: the gate counts them. ``tell`` is the one rule, shared by the gate controller
(``proxy/controllers/gate.py``) and the model-checked worlds (``statemachines/checking/``), that turns one effect and
the members the caller knows (in flight, waiting) into who is told what.

Illegal events are programming errors in the controller (a count would go negative, an abort acknowledged that
was never requested): the policy is transactional, ``IllegalTransition`` with state and counts unchanged, because
the gate is shared by the whole proxy and must not wedge it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

import attrs

from statemachines.core import Branch, Goto, Machine, MachineState, Policy, Refused, TransitionTable, evolve, on


class State(MachineState):
    """The gate's states; each value is its one-line description."""

    RUNNING = "generations are admitted and stream upstream"
    PAUSING = "a pause was requested; in-flight generations are being aborted; new ones wait"
    PAUSED = "nothing is in flight; new and interrupted generations wait for resume"


# ---- Events: what the controllers tell the gate -----------------------------------------------------------------


@attrs.frozen
class PauseRequested:
    """The trainer asks to pause generation (POST /v1/rollout/pause)."""


@attrs.frozen
class ResumeRequested:
    """The trainer asks to resume, optionally announcing the weight version now loaded."""

    # None keeps the current version.
    weight_version: str | None = None


@attrs.frozen
class GenerationWantsToStart:
    """A new generation asks to stream upstream."""


@attrs.frozen
class GenerationFinished:
    """An in-flight generation left the gate: its stream ended, failed, or its client went away."""


@attrs.frozen
class GenerationAbortAcknowledged:
    """An in-flight generation was cut at a token boundary after AbortInFlight; it now waits for resume."""


@attrs.frozen
class WaiterCancelled:
    """A waiting generation gave up: its client went away or its pause wait timed out."""


EVENTS = (
    PauseRequested,
    ResumeRequested,
    GenerationWantsToStart,
    GenerationFinished,
    GenerationAbortAcknowledged,
    WaiterCancelled,
)


# ---- Effects: what the controllers must do -----------------------------------------------------------------------


@attrs.frozen
class Admit:
    """Stream upstream now, under this epoch and weight version."""

    epoch: int
    weight_version: str | None


@attrs.frozen
class Wait:
    """Wait for the next AdmitWaiters (bounded by --pause-wait-timeout; give up with WaiterCancelled)."""

    epoch: int


@attrs.frozen
class AbortInFlight:
    """Cancel every in-flight upstream stream and abort its request id; each answers with an ack or a finish."""

    count: int
    epoch: int


@attrs.frozen
class PauseAcknowledged:
    """Every in-flight generation is interrupted or finished: every pending pause call returns now."""

    epoch: int
    # Generations interrupted by this pause (acknowledged aborts), and generations waiting now.
    aborted: int
    waiting: int


@attrs.frozen
class AlreadyPausing:
    """A pause is in progress: this pause call waits for the coming PauseAcknowledged."""

    epoch: int


@attrs.frozen
class AlreadyPaused:
    """The gate is already paused: this pause call returns at once."""

    epoch: int
    waiting: int


@attrs.frozen
class AdmitWaiters:
    """Resumed: every waiting generation streams now (count may be 0); the resume call returns."""

    count: int
    epoch: int
    weight_version: str | None


@attrs.frozen
class AlreadyRunning:
    """Resume while running with no or the same version: nothing changes; the resume call returns."""

    epoch: int
    weight_version: str | None


@attrs.frozen
class ResumeRefused:
    """Resume refused (pause still in progress, or a version change without a pause): answer 409."""

    reason: str


# ---- Data ---------------------------------------------------------------------------------------------------------


@attrs.frozen
class GateData:
    """The gate's counters; replaced on every transition, never mutated."""

    # Incremented by every effective resume; never decreases. Epoch N = the Nth running period and its pause.
    epoch: int = 0
    # Announced by the last resume (or configured at start); the fallback version of generated tokens.
    weight_version: str | None = None
    # Admitted generations that have not answered yet (streaming, or being aborted). PAUSED implies 0;
    # PAUSING implies > 0 (the answer that reaches 0 leaves PAUSING).
    in_flight: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    # Generations parked until the next resume. RUNNING implies 0 (resume admits them all).
    waiting: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    # Aborts acknowledged during the current pause; reported by PauseAcknowledged. RUNNING implies 0.
    aborted: int = attrs.field(default=0, validator=attrs.validators.ge(0))


@attrs.frozen
class GateStatistics:
    """A frozen report of the gate for /v1/rollout/pause_state (reporting only, never for decisions)."""

    state: str
    epoch: int
    weight_version: str | None
    in_flight: int
    waiting: int


def _check(state: State, gate: GateData) -> str | None:
    """The (state, data) invariants, checked after every transition and on restore."""
    if state is State.PAUSED and gate.in_flight:
        return f"PAUSED with {gate.in_flight} in flight"
    if state is State.PAUSING and not gate.in_flight:
        return "PAUSING with nothing in flight"
    if state is State.RUNNING and (gate.waiting or gate.aborted):
        return f"RUNNING with {gate.waiting} waiting and {gate.aborted} aborted"
    return None


# ---- Actions: the code behind the rows; guards that need the data live here --------------------------------------


def _admit(state: State, gate: GateData, event: GenerationWantsToStart) -> Goto:
    """Admit a generation: it is in flight from now on."""
    return Goto(state, evolve(gate, in_flight=gate.in_flight + 1), [Admit(gate.epoch, gate.weight_version)])


def _wait(state: State, gate: GateData, event: GenerationWantsToStart) -> Goto:
    """Park a generation until the next resume."""
    return Goto(state, evolve(gate, waiting=gate.waiting + 1), [Wait(gate.epoch)])


def _leave(gate: GateData) -> GateData:
    """One in-flight generation answers; refuse if none is in flight (the count never goes negative)."""
    if not gate.in_flight:
        raise Refused("no generation is in flight")
    return evolve(gate, in_flight=gate.in_flight - 1)


def _finish_running(state: State, gate: GateData, event: GenerationFinished) -> Goto:
    """A generation ended while running: nothing to do but count it out."""
    return Goto(State.RUNNING, _leave(gate))


def _settle(gate: GateData) -> Goto:
    """While pausing: the answer that leaves nothing in flight completes the pause."""
    if gate.in_flight:
        return Goto(State.PAUSING, gate)
    return Goto(State.PAUSED, gate, [PauseAcknowledged(gate.epoch, gate.aborted, gate.waiting)])


def _finish_pausing(state: State, gate: GateData, event: GenerationFinished) -> Goto:
    """A generation ended (instead of being cut) while pausing."""
    return _settle(_leave(gate))


def _abort_acknowledged(state: State, gate: GateData, event: GenerationAbortAcknowledged) -> Goto:
    """A generation was cut at a token boundary: it becomes a waiter, keeping its tokens."""
    left = _leave(gate)
    return _settle(evolve(left, waiting=left.waiting + 1, aborted=left.aborted + 1))


def _cancel_waiter(state: State, gate: GateData, event: WaiterCancelled) -> Goto:
    """A waiter gave up; refuse if nobody waits."""
    if not gate.waiting:
        raise Refused("no generation is waiting")
    return Goto(state, evolve(gate, waiting=gate.waiting - 1))


def _pause(state: State, gate: GateData, event: PauseRequested) -> Goto:
    """Start a pause: done at once when nothing is in flight, else abort everything in flight."""
    if not gate.in_flight:
        return Goto(State.PAUSED, gate, [PauseAcknowledged(gate.epoch, aborted=0, waiting=gate.waiting)])
    return Goto(State.PAUSING, gate, [AbortInFlight(gate.in_flight, gate.epoch)])


def _already_pausing(state: State, gate: GateData, event: PauseRequested) -> Goto:
    """A second pause while pausing joins the first."""
    return Goto(state, gate, [AlreadyPausing(gate.epoch)])


def _already_paused(state: State, gate: GateData, event: PauseRequested) -> Goto:
    """A second pause while paused returns at once."""
    return Goto(state, gate, [AlreadyPaused(gate.epoch, gate.waiting)])


def _resume(state: State, gate: GateData, event: ResumeRequested) -> Goto:
    """Resume: new epoch, new version (if announced), every waiter admitted in the same step."""
    version = gate.weight_version if event.weight_version is None else event.weight_version
    resumed = GateData(epoch=gate.epoch + 1, weight_version=version, in_flight=gate.waiting)
    return Goto(State.RUNNING, resumed, [AdmitWaiters(gate.waiting, resumed.epoch, version)])


def _resume_running(state: State, gate: GateData, event: ResumeRequested) -> Goto:
    """Resume while running: a no-op, unless it announces another version, which needs a pause first."""
    if event.weight_version in (None, gate.weight_version):
        return Goto(state, gate, [AlreadyRunning(gate.epoch, gate.weight_version)])
    return Goto(state, gate, [ResumeRefused("a new weight version needs a pause first")])


def _resume_pausing(state: State, gate: GateData, event: ResumeRequested) -> Goto:
    """Resume while the pause is still waiting for acknowledgements: refused."""
    return Goto(state, gate, [ResumeRefused("a pause is in progress; resume after it returns")])


# ---- The table: the spec. Pairs not listed are illegal. -----------------------------------------------------------

TABLE = TransitionTable.build(
    machine="RolloutGate",
    states=State,
    events=EVENTS,
    initial=State.RUNNING,
    policy=Policy.TRANSACTIONAL,
    check=_check,
    transitions=[
        # RUNNING: admit everyone; a pause aborts what is in flight (or is done at once).
        on(State.RUNNING, GenerationWantsToStart, _admit, Branch(State.RUNNING, [Admit])),
        on(State.RUNNING, GenerationFinished, _finish_running, Branch(State.RUNNING, when="in_flight > 0")),
        on(
            State.RUNNING, PauseRequested, _pause,
            Branch(State.PAUSING, [AbortInFlight], when="in_flight > 0"),
            Branch(State.PAUSED, [PauseAcknowledged], when="in_flight == 0"),
        ),
        on(
            State.RUNNING, ResumeRequested, _resume_running,
            Branch(State.RUNNING, [AlreadyRunning], when="no or same version"),
            Branch(State.RUNNING, [ResumeRefused], when="new version"),
        ),
        # PAUSING: everyone waits; each in-flight answer counts down; the last one completes the pause.
        on(State.PAUSING, GenerationWantsToStart, _wait, Branch(State.PAUSING, [Wait])),
        on(
            State.PAUSING, GenerationAbortAcknowledged, _abort_acknowledged,
            Branch(State.PAUSING, when="others in flight"),
            Branch(State.PAUSED, [PauseAcknowledged], when="last in flight"),
        ),
        on(
            State.PAUSING, GenerationFinished, _finish_pausing,
            Branch(State.PAUSING, when="others in flight"),
            Branch(State.PAUSED, [PauseAcknowledged], when="last in flight"),
        ),
        on(State.PAUSING, WaiterCancelled, _cancel_waiter, Branch(State.PAUSING, when="waiting > 0")),
        on(State.PAUSING, PauseRequested, _already_pausing, Branch(State.PAUSING, [AlreadyPausing])),
        on(State.PAUSING, ResumeRequested, _resume_pausing, Branch(State.PAUSING, [ResumeRefused])),
        # PAUSED: nothing in flight; everyone waits for resume, which admits them all.
        on(State.PAUSED, GenerationWantsToStart, _wait, Branch(State.PAUSED, [Wait])),
        on(State.PAUSED, WaiterCancelled, _cancel_waiter, Branch(State.PAUSED, when="waiting > 0")),
        on(State.PAUSED, PauseRequested, _already_paused, Branch(State.PAUSED, [AlreadyPaused])),
        on(State.PAUSED, ResumeRequested, _resume, Branch(State.RUNNING, [AdmitWaiters])),
    ],
)


# ---- The broadcast rule: which member is told what --------------------------------------------------------------

M = TypeVar("M")


@attrs.frozen
class Told(Generic[M]):
    """What one gate effect asks of the gate's members (``tell``) and of the trainer's calls."""

    # In-flight members whose upstream stream must be cut (``AbortInFlight``): each is told ``AbortRequested``
    # (it answers later: abort acknowledged, or finished).
    abort: tuple[M, ...] = ()
    # Waiters admitted by ``AdmitWaiters``: every one is counted in flight before any of them is told
    # ``Resumed(epoch, weight_version)`` (a member may release itself while being told, and must find itself in
    # flight); ``resumed`` is that effect (the resume call returns).
    resume: tuple[M, ...] = ()
    resumed: AdmitWaiters | None = None
    # ``PauseAcknowledged``: every pending pause call returns with it.
    acknowledged: PauseAcknowledged | None = None
    # Set when the members the caller knows disagree with the effect's count: the caller's records and the machine's
    # counts diverged (a bug in the caller; the members are told anyway).
    mismatch: str | None = None


def tell(effect: object, in_flight: Sequence[M], waiting: Sequence[M]) -> Told[M]:
    """The broadcast rule: who is told what for ``effect``, given the members in flight and waiting (in order).

    ``AbortInFlight`` reaches every in-flight member, ``AdmitWaiters`` every waiter; ``PauseAcknowledged`` returns
    every pending pause call. The answers to the caller (``Admit``, ``Wait``, ``AlreadyPausing``, ``AlreadyPaused``,
    ``AlreadyRunning``, ``ResumeRefused``) tell nobody else: an empty ``Told``."""
    if isinstance(effect, AbortInFlight):
        mismatch = None if effect.count == len(in_flight) else f"{effect!r} but {len(in_flight)} member(s) in flight"
        return Told(abort=tuple(in_flight), mismatch=mismatch)
    if isinstance(effect, AdmitWaiters):
        mismatch = None if effect.count == len(waiting) else f"{effect!r} but {len(waiting)} member(s) wait"
        return Told(resume=tuple(waiting), resumed=effect, mismatch=mismatch)
    if isinstance(effect, PauseAcknowledged):
        return Told(acknowledged=effect)
    return Told()


@attrs.define(eq=False)
class RolloutGate(Machine):
    """The proxy's rollout gate; the gate controller (proxy/) feeds it events and carries out its effects."""

    table = TABLE

    @classmethod
    def new(cls, weight_version: str | None = None) -> RolloutGate:
        """A running gate at epoch 0, with the configured weight version (if known)."""
        return cls(State.RUNNING, GateData(weight_version=weight_version))

    def statistics(self) -> GateStatistics:
        """A frozen report for /v1/rollout/pause_state."""
        gate: GateData = self._data
        return GateStatistics(self._state.name, gate.epoch, gate.weight_version, gate.in_flight, gate.waiting)


__all__ = [
    "State", "PauseRequested", "ResumeRequested", "GenerationWantsToStart", "GenerationFinished",
    "GenerationAbortAcknowledged", "WaiterCancelled", "EVENTS", "Admit", "Wait", "AbortInFlight",
    "PauseAcknowledged", "AlreadyPausing", "AlreadyPaused", "AdmitWaiters", "AlreadyRunning", "ResumeRefused",
    "GateData", "GateStatistics", "TABLE", "Told", "tell", "RolloutGate",
]
