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
"""

from __future__ import annotations

import enum

import attrs

from statemachines.checking.explorer import Composition, Invariant
from statemachines.checking.invariants import (
    ACCEPTS, GATE_COUNTS, NOT_WHILE_PAUSING, PAUSE_RETURNS, PAUSED, not_broken,
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


# Phases in which a generation holds an upstream stream (the gate counts them in flight).
_IN_FLIGHT = (Phase.STREAMING, Phase.ABORTING)
# Phases a generation never leaves.
_ENDED = (Phase.DONE, Phase.CANCELLED)


@attrs.frozen
class GateGeneration:
    """An abstract generation of the gate world: its phase and the tokens it has received (kept across an
    interruption)."""

    phase: Phase
    tokens: int = 0


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

    def describe(self) -> str:
        """One line: gate state and counters, trainer, each generation's phase and tokens."""
        gate = self.gate.data
        gens = " ".join(f"g{i}={g.phase.name}/{g.tokens}" for i, g in enumerate(self.generations))
        text = (
            f"gate={self.gate.state.name}(epoch={gate.epoch}, in_flight={gate.in_flight}, waiting={gate.waiting}) "
            f"trainer={self.trainer.name} pauses_left={self.pauses_left} {gens}"
        )
        return text + (f" BROKEN {self.broken[0]}: {self.broken[1]}" if self.broken else "")


@attrs.frozen(kw_only=True)
class GateConfig(WorldConfig):
    """The gate world's bounds and its gate class (a variant for planted bugs)."""

    pauses: int
    max_tokens: int
    clients_may_leave: bool
    gate: type[RolloutGate]


class GateStep(Step):
    """One step of the gate world: copies of the gate's snapshot, the generations and the trainer."""

    config: GateConfig

    def __init__(self, world: GateWorld, config: GateConfig) -> None:
        super().__init__(config)
        self.gate = world.gate
        self.generations = list(world.generations)
        self.trainer = world.trainer
        self.pauses_left = world.pauses_left

    def world(self, broken: tuple[str, str] | None = None, *, symmetry: bool = True) -> GateWorld:
        return GateWorld(self.gate, tuple(self.generations), self.trainer, self.pauses_left, broken)

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
) -> Composition:
    """The gate, a trainer with ``pauses`` pause/resume rounds, and ``n`` generations of ``max_tokens`` tokens."""
    config = GateConfig(pauses=pauses, max_tokens=max_tokens, clients_may_leave=clients_may_leave, gate=gate)
    initial = GateWorld(gate.new("v0").snapshot(), (GateGeneration(Phase.IDLE),) * n, Trainer.TRAINING, pauses)

    def successors(world: GateWorld) -> list[tuple[str, GateWorld]]:
        """Every event enabled in ``world``, labelled for traces."""
        if world.broken is not None:
            return []
        return take(world, _trainer_moves(world, config) + _generation_moves(world, config),
                    lambda w: GateStep(w, config), symmetry=False)

    invariants = (
        Invariant(PAUSED, lambda w: w.gate.state is not State.PAUSED or not _holding(w)),
        Invariant(PAUSE_RETURNS, lambda w: w.trainer is not Trainer.PAUSE_RETURNED or not _holding(w)),
        Invariant(NOT_WHILE_PAUSING, lambda w: w.gate.state is State.RUNNING or all(
            g.phase is not Phase.STREAMING for g in w.generations)),
        Invariant(GATE_COUNTS, _counts_match),
        not_broken(ACCEPTS),
    )

    def is_final(world: GateWorld) -> bool:
        """Everyone is done and no pause call is left hanging."""
        return world.trainer is Trainer.TRAINING and all(g.phase in _ENDED for g in world.generations)

    name = f"RolloutGate x {n} generation(s), {pauses} pause(s), {max_tokens} token(s)"
    return Composition(name, initial, successors, invariants, is_final, GateWorld.describe)


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
    if gen.phase is Phase.IDLE:
        moves.append(("start", lambda run: run.gate_send(GenerationWantsToStart(), i)))
    if gen.phase is Phase.STREAMING and gen.tokens < config.max_tokens:
        # A token arrives: local to the generation, the gate does not see it.
        moves.append((f"token {gen.tokens + 1}", lambda run: _set(run, i, GateGeneration(Phase.STREAMING,
                                                                                         gen.tokens + 1))))
    if gen.phase in _IN_FLIGHT:
        # Stop, length, upstream failure or client gone: the stream ends (also racing an abort).
        moves.append(("finish", lambda run: _answer(run, i, GateGeneration(Phase.DONE), GenerationFinished())))
    if gen.phase is Phase.ABORTING:
        # Cut at a token boundary: it keeps its tokens and waits for resume.
        parked = GateGeneration(Phase.WAITING, gen.tokens)
        moves.append(("abort acknowledged", lambda run: _answer(run, i, parked, GenerationAbortAcknowledged())))
    if gen.phase is Phase.WAITING and config.clients_may_leave:
        gone = GateGeneration(Phase.CANCELLED)
        moves.append(("client gone while waiting", lambda run: _answer(run, i, gone, WaiterCancelled())))
    return moves


def _set(run: GateStep, i: int, gen: GateGeneration) -> None:
    """Generation ``i``'s own move, which the gate does not see."""
    run.generations[i] = gen


def _answer(run: GateStep, i: int, gen: GateGeneration, event: object) -> None:
    """Generation ``i`` moves on, then tells the gate."""
    run.generations[i] = gen
    run.gate_send(event, i)


def _holding(world: GateWorld) -> bool:
    """Does any generation hold an upstream stream?"""
    return any(g.phase in _IN_FLIGHT for g in world.generations)


def _counts_match(world: GateWorld) -> bool:
    """The gate's counters agree with the generations."""
    gate = world.gate.data
    in_flight = sum(g.phase in _IN_FLIGHT for g in world.generations)
    waiting = sum(g.phase is Phase.WAITING for g in world.generations)
    return (gate.in_flight, gate.waiting) == (in_flight, waiting)
