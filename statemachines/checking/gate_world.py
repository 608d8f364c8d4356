"""The gate world: the real RolloutGate, a trainer, and ``n`` abstract generations that play the controllers' part.

``gate_with_generations(n)``: the real ``RolloutGate`` (fed through the memoized pure step of ``step.WorldConfig``),
a trainer that pauses and resumes at most ``pauses`` times, and ``n`` abstract generations. Each generation goes
IDLE -> start (asks the gate) -> STREAMING (admitted) or WAITING (parked) -> tokens, at most ``max_tokens`` ->
finished; when the gate says ``AbortInFlight`` every STREAMING generation is ABORTING at once (its cancel scope is
cancelled), and then answers: abort acknowledged (WAITING, tokens kept) or finished anyway. ``AdmitWaiters`` moves
every WAITING generation back to STREAMING. A waiting client may give up (CANCELLED). The trainer may also repeat
its pause, resume too early, or resume while running: idempotent or refused, those change nothing.

The world carries out the gate's broadcast effects by the gate's own rule (``rollout_gate.tell``, which the gate
controller runs too): nothing here reads the gate's state to decide what to do. It runs on the one step mechanism
(``step``): each move runs on a fresh ``GateStep``, a refused event or an effect that does not fit is ``Broken``.
Invariants checked in every reachable state (the first two are architecture.md's):

1. ``paused_means_no_generation_streaming``: gate PAUSED -> no generation STREAMING or ABORTING.
2. ``pause_returns_after_every_stream_is_interrupted_or_finished``: the trainer's pause call has returned -> no
   generation STREAMING or ABORTING.
3. ``no_stream_admitted_while_pausing``: gate not RUNNING -> no generation STREAMING. The per-step form of 1 and 2:
   the set of streams a pause waits for only shrinks, and no token is produced between pause and resume.
4. ``gate_counts_match_generations``: in_flight = STREAMING + ABORTING, waiting = WAITING.
5. ``machines_accept_every_event``: no ``IllegalTransition`` (nor a table/code disagreement, nor an effect that
   does not fit the generations) on the way.

Final states (for the deadlock check): every generation finished or cancelled, the trainer not pausing.

With ``lifecycle=ServiceLifecycle`` the process's lifecycle joins (graceful shutdown, issue 15): a generation asks
the lifecycle before the gate (refused once a stop was requested: REFUSED) and tells it when it ends; the process
sends up to two stop signals, the grace timer fires, the store's flush returns. ``CutGenerations`` cuts every
admitted generation the way the controller does (``Generation.shut_down``: its gate slot is released at once, as a
finish or a cancelled wait), and each then answers ``shutting_down`` (its own later move) and ends. Invariants:

6. ``after_stopped_no_generation_is_streaming_or_waiting``: lifecycle STOPPED -> no generation admitted and not
   ended (STREAMING, ABORTING, WAITING, CUT).
7. ``no_admission_after_draining_began``: no generation was admitted after the first stop signal.
8. ``lifecycle_counts_match_generations``: the lifecycle's in_flight = the generations admitted and not ended.
9. ``every_stop_reaches_stopped_without_the_trainer_or_clients`` (progress): from every state after a stop signal,
   STOPPED is reachable by the process's, the upstream's and the generations' own moves, never the trainer's resume
   nor a client leaving: a generation parked by a pause waits out the grace, then is cut.
"""

from __future__ import annotations

import enum

import attrs

from statemachines import service_lifecycle as life
from statemachines.checking.explorer import Composition, Invariant, Progress
from statemachines.checking.invariants import (
    ACCEPTS, GATE_COUNTS, LIFECYCLE_COUNTS, NO_ADMISSION_AFTER_STOP, NOT_WHILE_PAUSING, PAUSE_RETURNS, PAUSED,
    STOP_COMPLETES, STOPPED_HOLDS_NOTHING, not_broken,
)
from statemachines.checking.records import Trainer
from statemachines.checking.step import Broken, Move, Step, WorldConfig, take
from statemachines.core import Snapshot
from statemachines.rollout_gate import (
    Admit,
    AlreadyPaused,
    GenerationAbortAcknowledged,
    GenerationFinished,
    GenerationWantsToStart,
    PauseRequested,
    ResumeRequested,
    RolloutGate,
    State,
    Wait,
    WaiterCancelled,
    tell,
)


class Phase(enum.Enum):
    """An abstract generation's phase, as its controller sees it."""

    IDLE = "not started"
    WAITING = "parked by the gate until resume (new, or interrupted with its tokens)"
    STREAMING = "admitted; tokens arrive from upstream"
    ABORTING = "its upstream stream is being cut; no token is recorded any more"
    DONE = "finished: stop, length, upstream failure or client gone while in flight"
    CANCELLED = "gave up while waiting: client gone or pause-wait timeout"
    CUT = "cut by the shutdown (its gate slot released); its shutting_down answer is on its way"
    REFUSED = "refused at admission: the proxy was stopping (503 shutting_down)"


# Phases in which a generation holds an upstream stream (the gate counts them in flight).
_IN_FLIGHT = (Phase.STREAMING, Phase.ABORTING)
# Phases a generation never leaves.
_ENDED = (Phase.DONE, Phase.CANCELLED, Phase.REFUSED)
# Phases of a generation the lifecycle admitted and has not seen end.
_ADMITTED = (Phase.STREAMING, Phase.ABORTING, Phase.WAITING, Phase.CUT)
# The stop signals the process may send (the second cuts at once).
_STOP_SIGNALS = 2


@attrs.frozen
class GateGeneration:
    """An abstract generation of the gate world: its phase and the tokens it has received (kept across an
    interruption)."""

    phase: Phase
    tokens: int = 0
    #: admitted by the lifecycle after a stop signal (invariant 7 says never)
    late: bool = False


@attrs.frozen(cache_hash=True)
class GateWorld:
    """The global state: the gate's snapshot, the generations, the trainer, the pauses it has left."""

    gate: Snapshot
    generations: tuple[GateGeneration, ...]
    trainer: Trainer
    pauses_left: int
    # (invariant name, what happened) when the gate refused an event or an effect did not match the generations;
    # the world stops there.
    broken: tuple[str, str] | None = None
    # With the lifecycle: its snapshot, the stop signals sent, whether its grace timer and the store's flush are
    # pending (None, 0, False, False without it).
    lifecycle: Snapshot | None = None
    stops: int = 0
    timer: bool = False
    flushing: bool = False

    def describe(self) -> str:
        """One line: gate state and counters, trainer, each generation's phase and tokens."""
        gate = self.gate.data
        gens = " ".join(f"g{i}={g.phase.name}/{g.tokens}" for i, g in enumerate(self.generations))
        text = (
            f"gate={self.gate.state.name}(epoch={gate.epoch}, in_flight={gate.in_flight}, waiting={gate.waiting}) "
            f"trainer={self.trainer.name} pauses_left={self.pauses_left} {gens}"
        )
        if self.lifecycle is not None:
            text += (f" lifecycle={self.lifecycle.state.name}(in_flight={self.lifecycle.data.in_flight}) "
                     f"stops={self.stops} timer={self.timer} flushing={self.flushing}")
        return text + (f" BROKEN {self.broken[0]}: {self.broken[1]}" if self.broken else "")


@attrs.frozen(kw_only=True)
class GateConfig(WorldConfig):
    """The gate world's bounds and its gate class (a variant for planted bugs)."""

    pauses: int
    max_tokens: int
    clients_may_leave: bool
    gate: type[RolloutGate]
    lifecycle: type[life.ServiceLifecycle] | None = None


class GateStep(Step):
    """One step of the gate world: copies of the gate's snapshot, the generations and the trainer."""

    config: GateConfig

    def __init__(self, world: GateWorld, config: GateConfig) -> None:
        super().__init__(config)
        self.gate = world.gate
        self.generations = list(world.generations)
        self.trainer = world.trainer
        self.pauses_left = world.pauses_left
        self.lifecycle, self.stops, self.timer, self.flushing = world.lifecycle, world.stops, world.timer, world.flushing

    def world(self, broken: tuple[str, str] | None = None, *, symmetry: bool = True) -> GateWorld:
        return GateWorld(self.gate, tuple(self.generations), self.trainer, self.pauses_left, broken,
                         self.lifecycle, self.stops, self.timer, self.flushing)

    def lifecycle_send(self, event: object, actor: int | None = None) -> None:
        """Feed ``event`` to the lifecycle and carry out its effects as ``proxy/controllers/lifecycle.py`` does."""
        assert self.config.lifecycle is not None and self.lifecycle is not None
        self.lifecycle, effects = self.config.send(self.config.lifecycle, self.lifecycle, event, "lifecycle")
        gens = self.generations
        for effect in effects:
            if isinstance(effect, (life.AdmitGeneration, life.RefuseGeneration)):
                if actor is None or not isinstance(event, life.GenerationWantsToStart):
                    raise Broken(ACCEPTS, f"{effect!r} answers no start")
                if isinstance(effect, life.RefuseGeneration):
                    gens[actor] = GateGeneration(Phase.REFUSED)
                    continue
                # Admitted: now the gate decides (stream or park).
                self.gate_send(GenerationWantsToStart(), actor)
                gens[actor] = attrs.evolve(gens[actor], late=self.stops > 0)
            elif isinstance(effect, life.StartGraceTimer):
                self.timer = True
            elif isinstance(effect, life.FlushStore):
                self.flushing = True
            elif isinstance(effect, life.CutGenerations):
                self._cut(effect)
            # StopAccepting (the listener closes) and Stopped (the process exits) change nothing modelled here.

    def _cut(self, effect: life.CutGenerations) -> None:
        """Every admitted generation is cut at once, releasing its gate slot (``Generation.shut_down``)."""
        gens = self.generations
        members = [i for i, g in enumerate(gens) if g.phase in _ADMITTED]
        if effect.count != len(members):
            raise Broken(ACCEPTS, f"{effect!r} but {len(members)} generation(s) admitted")
        for i in members:
            phase = gens[i].phase
            gens[i] = attrs.evolve(gens[i], phase=Phase.CUT)
            if phase in _IN_FLIGHT:
                self.gate_send(GenerationFinished(), i)
            elif phase is Phase.WAITING:
                self.gate_send(WaiterCancelled(), i)

    def gate_send(self, event: object, actor: int | None = None) -> None:
        """Feed ``event`` to the gate (after the actor's own move) and carry out its effects."""
        self.gate, effects = self.config.send(self.config.gate, self.gate, event, "gate")
        gens = self.generations
        for effect in effects:
            if isinstance(effect, (Admit, Wait)):
                # The answer to this generation's start: stream now, or park.
                if actor is None or not isinstance(event, GenerationWantsToStart):
                    raise Broken(ACCEPTS, f"{effect!r} answers no start")
                gens[actor] = GateGeneration(Phase.STREAMING if isinstance(effect, Admit) else Phase.WAITING)
                continue
            if isinstance(effect, AlreadyPaused):
                # This pause call returns at once.
                self.trainer = Trainer.PAUSE_RETURNED
                continue
            in_flight = [i for i, g in enumerate(gens) if g.phase in _IN_FLIGHT]
            waiting = [i for i, g in enumerate(gens) if g.phase is Phase.WAITING]
            told = tell(effect, in_flight, waiting)
            if told.mismatch is not None:
                raise Broken(ACCEPTS, told.mismatch)
            for i in told.abort:
                # The controller cancels every stream it holds, all in this step (one being cut already stays so).
                if gens[i].phase is Phase.STREAMING:
                    gens[i] = attrs.evolve(gens[i], phase=Phase.ABORTING)
            for i in told.resume:
                # Every waiter streams again, continuing with its tokens.
                gens[i] = attrs.evolve(gens[i], phase=Phase.STREAMING)
            if told.resumed is not None:
                # The resume call returns.
                self.trainer = Trainer.TRAINING
            if told.acknowledged is not None:
                # Every pending pause call returns.
                self.trainer = Trainer.PAUSE_RETURNED
            # AlreadyPausing, AlreadyRunning, ResumeRefused: the caller is answered; nothing else changes.


def gate_with_generations(
    n: int,
    *,
    pauses: int = 2,
    max_tokens: int = 2,
    clients_may_leave: bool = True,
    gate: type[RolloutGate] = RolloutGate,
    lifecycle: type[life.ServiceLifecycle] | None = None,
) -> Composition:
    """The gate, a trainer with ``pauses`` pause/resume rounds, and ``n`` generations of ``max_tokens`` tokens; with
    ``lifecycle``, the process's lifecycle and its stop signals too (module docstring)."""
    config = GateConfig(pauses=pauses, max_tokens=max_tokens, clients_may_leave=clients_may_leave, gate=gate,
                        lifecycle=lifecycle)
    initial = GateWorld(gate.new("v0").snapshot(), (GateGeneration(Phase.IDLE),) * n, Trainer.TRAINING, pauses,
                        lifecycle=None if lifecycle is None else lifecycle.new().snapshot())

    def successors(world: GateWorld) -> list[tuple[str, GateWorld]]:
        """Every event enabled in ``world``, labelled for traces."""
        if world.broken is not None:
            return []
        moves = _trainer_moves(world, config) + _generation_moves(world, config) + _process_moves(world)
        return take(world, moves, lambda w: GateStep(w, config), symmetry=False)

    invariants = (
        Invariant(PAUSED, lambda w: w.gate.state is not State.PAUSED or not _holding(w)),
        Invariant(PAUSE_RETURNS, lambda w: w.trainer is not Trainer.PAUSE_RETURNED or not _holding(w)),
        Invariant(NOT_WHILE_PAUSING, lambda w: w.gate.state is State.RUNNING or all(
            g.phase is not Phase.STREAMING for g in w.generations)),
        Invariant(GATE_COUNTS, _counts_match),
        not_broken(ACCEPTS),
    )
    progress: tuple[Progress, ...] = ()
    if lifecycle is not None:
        invariants += (
            Invariant(STOPPED_HOLDS_NOTHING, lambda w: w.lifecycle.state is not life.State.STOPPED or all(
                g.phase not in _ADMITTED for g in w.generations)),
            Invariant(NO_ADMISSION_AFTER_STOP, lambda w: not any(g.late for g in w.generations)),
            Invariant(LIFECYCLE_COUNTS, lambda w: w.lifecycle.data.in_flight == sum(
                g.phase in _ADMITTED for g in w.generations)),
        )
        progress = (Progress(
            STOP_COMPLETES, pending=lambda w: w.stops > 0, done=lambda w: w.lifecycle.state is life.State.STOPPED,
            relies_on=lambda label: not label.startswith("trainer") and "client gone" not in label,
        ),)

    def is_final(world: GateWorld) -> bool:
        """Everyone is done and no pause call is left hanging (and the process serves, or it stopped)."""
        serving_or_stopped = world.lifecycle is None or world.lifecycle.state in (life.State.SERVING,
                                                                                   life.State.STOPPED)
        return (world.trainer is Trainer.TRAINING and all(g.phase in _ENDED for g in world.generations)
                and serving_or_stopped)

    name = f"RolloutGate x {n} generation(s), {pauses} pause(s), {max_tokens} token(s)"
    if lifecycle is not None:
        name += " + ServiceLifecycle"
    return Composition(name, initial, successors, invariants, is_final, GateWorld.describe, progress)


def _trainer_moves(world: GateWorld, config: GateConfig) -> list[tuple[str, Move]]:
    """The trainer: pause (bounded rounds), resume after the pause returned, and the harmless repeats."""
    moves: list[tuple[str, Move]] = []
    trainer = world.trainer
    if trainer is Trainer.TRAINING and world.pauses_left:
        moves.append(("trainer: pause", _pause))
    if trainer is not Trainer.TRAINING:
        moves.append(("trainer: pause again", lambda run: run.gate_send(PauseRequested())))
    if trainer is Trainer.PAUSE_RETURNED:
        version = f"v{config.pauses - world.pauses_left}"
        moves.append((f"trainer: resume {version}", lambda run: run.gate_send(ResumeRequested(version))))
    else:
        # Too early (pause pending) or while running (no-op): the same version, nothing may change.
        repeat = ResumeRequested(world.gate.data.weight_version)
        moves.append(("trainer: resume (repeat)", lambda run: run.gate_send(repeat)))
    return moves


def _process_moves(world: GateWorld) -> list[tuple[str, Move]]:
    """The process's own moves with the lifecycle: stop signals (at most two), the grace timer, the flush."""
    if world.lifecycle is None:
        return []
    moves: list[tuple[str, Move]] = []
    if world.stops < _STOP_SIGNALS:
        moves.append((f"process: stop signal {world.stops + 1}", _stop_signal))
    if world.timer:
        moves.append(("process: grace expired", _grace_expired))
    if world.flushing:
        moves.append(("process: store flushed", _store_flushed))
    return moves


def _stop_signal(run: GateStep) -> None:
    run.stops += 1
    run.lifecycle_send(life.StopRequested())


def _grace_expired(run: GateStep) -> None:
    run.timer = False
    run.lifecycle_send(life.GraceExpired())


def _store_flushed(run: GateStep) -> None:
    run.flushing = False
    run.lifecycle_send(life.StoreFlushed())


def _pause(run: GateStep) -> None:
    """The trainer pauses (one of its rounds)."""
    run.trainer = Trainer.PAUSE_PENDING
    run.pauses_left -= 1
    run.gate_send(PauseRequested())


def _generation_moves(world: GateWorld, config: GateConfig) -> list[tuple[str, Move]]:
    """Each generation's moves, labelled ``g<i>: ...``."""
    moves: list[tuple[str, Move]] = []
    for i, gen in enumerate(world.generations):
        moves += [(f"g{i}: {label}", move) for label, move in _moves_of(i, gen, config)]
    return moves


def _moves_of(i: int, gen: GateGeneration, config: GateConfig) -> list[tuple[str, Move]]:
    """Generation ``i``'s moves: start, a token, finish, abort acknowledged, give up while waiting."""
    moves: list[tuple[str, Move]] = []
    with_lifecycle = config.lifecycle is not None
    if gen.phase is Phase.IDLE and with_lifecycle:
        moves.append(("start", lambda run: run.lifecycle_send(life.GenerationWantsToStart(), i)))
    elif gen.phase is Phase.IDLE:
        moves.append(("start", lambda run: run.gate_send(GenerationWantsToStart(), i)))
    if gen.phase is Phase.STREAMING and gen.tokens < config.max_tokens:
        # A token arrives: local to the generation, the gate does not see it.
        moves.append((f"token {gen.tokens + 1}", lambda run: _set(run, i, GateGeneration(Phase.STREAMING,
                                                                                         gen.tokens + 1))))
    if gen.phase in _IN_FLIGHT:
        # Stop, length, upstream failure or client gone: the stream ends (also racing an abort).
        moves.append(("finish", lambda run: _answer(run, i, GateGeneration(Phase.DONE), GenerationFinished(),
                                                    with_lifecycle)))
    if gen.phase is Phase.ABORTING:
        # Cut at a token boundary: it keeps its tokens and waits for resume.
        parked = GateGeneration(Phase.WAITING, gen.tokens)
        moves.append(("abort acknowledged", lambda run: _answer(run, i, parked, GenerationAbortAcknowledged())))
    if gen.phase is Phase.WAITING and config.clients_may_leave:
        gone = GateGeneration(Phase.CANCELLED)
        moves.append(("client gone while waiting", lambda run: _answer(run, i, gone, WaiterCancelled(),
                                                                       with_lifecycle)))
    if gen.phase is Phase.CUT:
        # Its driver writes the shutting_down answer and ends.
        moves.append(("answered shutting_down", lambda run: _ended(run, i, GateGeneration(Phase.DONE))))
    return moves


def _set(run: GateStep, i: int, gen: GateGeneration) -> None:
    """Generation ``i``'s own move, which the gate does not see."""
    run.generations[i] = gen


def _answer(run: GateStep, i: int, gen: GateGeneration, event: object, ends_with_lifecycle: bool = False) -> None:
    """Generation ``i`` moves on, then tells the gate (and, when it ended, the lifecycle)."""
    run.generations[i] = gen
    run.gate_send(event, i)
    if ends_with_lifecycle:
        run.lifecycle_send(life.GenerationEnded())


def _ended(run: GateStep, i: int, gen: GateGeneration) -> None:
    """Generation ``i`` ended after its cut: only the lifecycle hears of it (the gate slot was released)."""
    run.generations[i] = gen
    run.lifecycle_send(life.GenerationEnded())


def _holding(world: GateWorld) -> bool:
    """Does any generation hold an upstream stream?"""
    return any(g.phase in _IN_FLIGHT for g in world.generations)


def _counts_match(world: GateWorld) -> bool:
    """The gate's counters agree with the generations."""
    gate = world.gate.data
    in_flight = sum(g.phase in _IN_FLIGHT for g in world.generations)
    waiting = sum(g.phase is Phase.WAITING for g in world.generations)
    return (gate.in_flight, gate.waiting) == (in_flight, waiting)
