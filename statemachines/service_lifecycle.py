"""ServiceLifecycle: one per proxy process; its life from serving to stopped, around a graceful shutdown.

Theory of operation
-------------------
The machine counts the generations it admitted (``in_flight``), it does not know them one by one (like the gate).

- SERVING: a generation that wants to start is admitted (``AdmitGeneration``); one that ends is counted out.
- ``StopRequested`` (SIGTERM or SIGINT) in SERVING: the listener stops accepting (``StopAccepting``). With nothing
  in flight the store is flushed at once (FLUSHING); otherwise the machine is DRAINING and the grace timer starts
  (``StartGraceTimer``, ``--shutdown-grace``).
- DRAINING, CLOSING, FLUSHING and STOPPED admit nobody (``RefuseGeneration``: the client gets 503 shutting_down).
  So once the stop was requested the set of generations it waits for only shrinks.
- ``GraceExpired`` in DRAINING, or a second ``StopRequested`` (an impatient operator's second Ctrl-C): CLOSING, and
  every generation still in flight is cut (``CutGenerations``: streams end with an SSE error event and ``[DONE]``,
  non-streaming requests with 503; nothing of a cut generation is committed).
- The ``GenerationEnded`` that brings ``in_flight`` to 0 in DRAINING or CLOSING moves to FLUSHING (``FlushStore``);
  ``StoreFlushed`` moves to STOPPED (``Stopped``: the process exits 0).

Idempotent: a stop requested again while CLOSING, FLUSHING or STOPPED, and a grace timer that fires after the
machine left DRAINING (it raced the last generation's end, or a second signal), change nothing. Illegal events
are programming errors in the controller (a count would go negative, a flush nobody asked for): the policy is
transactional, like the gate's, so a bug cannot wedge the process half-way through its shutdown.

The controller (``proxy/controllers/lifecycle.py``) feeds the events and carries out the effects; the gate world
(``statemachines/checking/gate_world.py``) composes this machine with the gate and abstract generations.
"""

from __future__ import annotations

import attrs

from statemachines.core import Branch, Goto, Machine, MachineState, Policy, Refused, TransitionTable, evolve, on


class State(MachineState):
    """The process's states; each value is its one-line description."""

    SERVING = "new generations are admitted"
    DRAINING = "stop requested: nothing new is accepted; generations in flight may finish within the grace"
    CLOSING = "the grace ran out (or a second signal came): the generations still in flight are being cut"
    FLUSHING = "no generation is in flight; the trajectory store is being flushed"
    STOPPED = "flushed; the process exits 0"


# ---- Events: what the controller tells the machine ---------------------------------------------------------------


@attrs.frozen
class GenerationWantsToStart:
    """A chat-completions request (or one choice of it) wants to start a generation."""


@attrs.frozen
class GenerationEnded:
    """An admitted generation ended (answered, failed, cut, or its client left): its driver is done."""


@attrs.frozen
class StopRequested:
    """SIGTERM or SIGINT (or an embedding program's request): stop gracefully."""


@attrs.frozen
class GraceExpired:
    """The grace timer started by StartGraceTimer fired."""


@attrs.frozen
class StoreFlushed:
    """The trajectory store's flush returned."""


EVENTS = (GenerationWantsToStart, GenerationEnded, StopRequested, GraceExpired, StoreFlushed)


# ---- Effects: what the controller carries out --------------------------------------------------------------------


@attrs.frozen
class AdmitGeneration:
    """The generation may start (it is counted in flight until its GenerationEnded)."""


@attrs.frozen
class RefuseGeneration:
    """The proxy is stopping: answer 503 shutting_down; nothing was started."""


@attrs.frozen
class StopAccepting:
    """Close the listener (new connections are refused; idle keep-alive connections close)."""


@attrs.frozen
class StartGraceTimer:
    """Start the --shutdown-grace timer; it answers GraceExpired."""


@attrs.frozen
class CutGenerations:
    """End every generation still in flight with the shutting_down error; they answer GenerationEnded."""

    count: int


@attrs.frozen
class FlushStore:
    """Flush the trajectory store; answer StoreFlushed."""


@attrs.frozen
class Stopped:
    """Everything is answered and flushed: the process may exit 0."""


# ---- Data, check, actions ----------------------------------------------------------------------------------------


@attrs.frozen
class LifecycleData:
    """The generations admitted and not ended yet."""

    in_flight: int = 0


@attrs.frozen
class LifecycleStatistics:
    """A frozen report (``/health``, ``/ready``)."""

    state: str
    in_flight: int


def _check(state: State, data: LifecycleData) -> str | None:
    if data.in_flight < 0:
        return f"in_flight={data.in_flight} < 0"
    if state in (State.FLUSHING, State.STOPPED) and data.in_flight:
        return f"{state.name} with {data.in_flight} generation(s) in flight"
    return None


def _admit(state: State, data: LifecycleData, event: GenerationWantsToStart) -> Goto:
    return Goto(state, evolve(data, in_flight=data.in_flight + 1), [AdmitGeneration()])


def _refuse(state: State, data: LifecycleData, event: GenerationWantsToStart) -> Goto:
    return Goto(state, data, [RefuseGeneration()])


def _leave(data: LifecycleData) -> LifecycleData:
    if data.in_flight == 0:
        raise Refused("no generation in flight")
    return evolve(data, in_flight=data.in_flight - 1)


def _end_serving(state: State, data: LifecycleData, event: GenerationEnded) -> Goto:
    return Goto(state, _leave(data))


def _end_stopping(state: State, data: LifecycleData, event: GenerationEnded) -> Goto:
    """DRAINING or CLOSING: the last generation's end starts the flush."""
    data = _leave(data)
    if data.in_flight:
        return Goto(state, data)
    return Goto(State.FLUSHING, data, [FlushStore()])


def _stop(state: State, data: LifecycleData, event: StopRequested) -> Goto:
    if data.in_flight:
        return Goto(State.DRAINING, data, [StopAccepting(), StartGraceTimer()])
    return Goto(State.FLUSHING, data, [StopAccepting(), FlushStore()])


def _cut(state: State, data: LifecycleData, event: object) -> Goto:
    """DRAINING: the grace ran out, or a second signal: cut what is left (DRAINING always has some in flight)."""
    return Goto(State.CLOSING, data, [CutGenerations(data.in_flight)])


def _unchanged(state: State, data: LifecycleData, event: object) -> Goto:
    return Goto(state, data)


def _stopped(state: State, data: LifecycleData, event: StoreFlushed) -> Goto:
    return Goto(State.STOPPED, data, [Stopped()])


def _ended_row(state: State) -> object:
    """DRAINING's and CLOSING's GenerationEnded row (the same outcomes in both)."""
    return on(
        state, GenerationEnded, _end_stopping,
        Branch(state, when="others in flight"),
        Branch(State.FLUSHING, [FlushStore], when="last in flight"),
    )


TABLE = TransitionTable.build(
    machine="ServiceLifecycle",
    states=State,
    events=EVENTS,
    initial=State.SERVING,
    policy=Policy.TRANSACTIONAL,
    check=_check,
    transitions=[
        # SERVING: admit, count out; a stop request closes the listener and drains (or flushes at once).
        on(State.SERVING, GenerationWantsToStart, _admit, Branch(State.SERVING, [AdmitGeneration])),
        on(State.SERVING, GenerationEnded, _end_serving, Branch(State.SERVING, when="in_flight > 0")),
        on(
            State.SERVING, StopRequested, _stop,
            Branch(State.DRAINING, [StopAccepting, StartGraceTimer], when="some in flight"),
            Branch(State.FLUSHING, [StopAccepting, FlushStore], when="none in flight"),
        ),
        # DRAINING: nobody new; the in-flight generations finish, or are cut when the grace runs out.
        on(State.DRAINING, GenerationWantsToStart, _refuse, Branch(State.DRAINING, [RefuseGeneration])),
        _ended_row(State.DRAINING),
        on(State.DRAINING, GraceExpired, _cut, Branch(State.CLOSING, [CutGenerations])),
        on(State.DRAINING, StopRequested, _cut, Branch(State.CLOSING, [CutGenerations], when="a second signal")),
        # CLOSING: the cut generations end one by one; the last one starts the flush.
        on(State.CLOSING, GenerationWantsToStart, _refuse, Branch(State.CLOSING, [RefuseGeneration])),
        _ended_row(State.CLOSING),
        on(State.CLOSING, GraceExpired, _unchanged, Branch(State.CLOSING, when="the timer raced a second signal")),
        on(State.CLOSING, StopRequested, _unchanged, Branch(State.CLOSING)),
        # FLUSHING, STOPPED: nothing in flight; only the flush's answer moves on.
        on(State.FLUSHING, GenerationWantsToStart, _refuse, Branch(State.FLUSHING, [RefuseGeneration])),
        on(State.FLUSHING, GraceExpired, _unchanged, Branch(State.FLUSHING, when="the timer raced the last end")),
        on(State.FLUSHING, StopRequested, _unchanged, Branch(State.FLUSHING)),
        on(State.FLUSHING, StoreFlushed, _stopped, Branch(State.STOPPED, [Stopped])),
        on(State.STOPPED, GenerationWantsToStart, _refuse, Branch(State.STOPPED, [RefuseGeneration])),
        on(State.STOPPED, GraceExpired, _unchanged, Branch(State.STOPPED, when="the timer raced the last end")),
        on(State.STOPPED, StopRequested, _unchanged, Branch(State.STOPPED)),
    ],
)


@attrs.define(eq=False)
class ServiceLifecycle(Machine):
    """The process's lifecycle; the lifecycle controller (proxy/controllers/lifecycle.py) feeds it and carries out
    its effects."""

    table = TABLE

    @classmethod
    def new(cls) -> ServiceLifecycle:
        """A serving process with nothing in flight."""
        return cls(State.SERVING, LifecycleData())

    def statistics(self) -> LifecycleStatistics:
        data: LifecycleData = self._data
        return LifecycleStatistics(self._state.name, data.in_flight)


__all__ = [
    "State", "GenerationWantsToStart", "GenerationEnded", "StopRequested", "GraceExpired", "StoreFlushed", "EVENTS",
    "AdmitGeneration", "RefuseGeneration", "StopAccepting", "StartGraceTimer", "CutGenerations", "FlushStore",
    "Stopped", "LifecycleData", "LifecycleStatistics", "TABLE", "ServiceLifecycle",
]
