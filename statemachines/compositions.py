"""Systems for the explorer: real machines composed with small abstract peers that play the controllers' part.

``gate_with_generations(n)``: the real ``RolloutGate`` (restored from its snapshot for every step), a trainer that
pauses and resumes at most ``pauses`` times, and ``n`` abstract generations. Each generation goes
IDLE -> start (asks the gate) -> STREAMING (admitted) or WAITING (parked) -> tokens, at most ``max_tokens`` ->
finished; when the gate says ``AbortInFlight`` every STREAMING generation is ABORTING at once (its cancel scope is
cancelled), and then answers: abort acknowledged (WAITING, tokens kept) or finished anyway. ``AdmitWaiters`` moves
every WAITING generation back to STREAMING. A waiting client may give up (CANCELLED). The trainer may also repeat
its pause, resume too early, or resume while running: idempotent or refused, those change nothing.

The composition applies the gate's effects exactly as the controllers will: nothing here reads the gate's state
to decide what to do. Invariants checked in every reachable state (the first two are architecture.md's):

1. ``paused_means_no_generation_streaming``: gate PAUSED -> no generation STREAMING or ABORTING.
2. ``pause_returns_after_every_stream_is_interrupted_or_finished``: the trainer's pause call has returned -> no
   generation STREAMING or ABORTING.
3. ``no_stream_admitted_while_pausing``: gate not RUNNING -> no generation STREAMING. The per-step form of 1 and 2:
   the set of streams a pause waits for only shrinks, and no token is produced between pause and resume.
4. ``gate_counts_match_generations``: in_flight = STREAMING + ABORTING, waiting = WAITING.
5. ``gate_accepts_every_event``: no ``IllegalTransition`` (nor a table/code disagreement) on the way.

Final states (for the deadlock check): every generation finished or cancelled, the trainer not pausing.
"""

from __future__ import annotations

import enum

import attrs

from statemachines.core import IllegalTransition, Snapshot, TableError
from statemachines.explorer import Composition, Invariant
from statemachines.rollout_gate import (
    AbortInFlight,
    Admit,
    AdmitWaiters,
    AlreadyPaused,
    GenerationAbortAcknowledged,
    GenerationFinished,
    GenerationWantsToStart,
    PauseAcknowledged,
    PauseRequested,
    ResumeRequested,
    RolloutGate,
    State,
    Wait,
    WaiterCancelled,
)


class Phase(enum.Enum):
    """An abstract generation's phase, as its controller sees it."""

    IDLE = "not started"
    WAITING = "parked by the gate until resume (new, or interrupted with its tokens)"
    STREAMING = "admitted; tokens arrive from upstream"
    ABORTING = "its upstream stream is being cut; no token is recorded any more"
    DONE = "finished: stop, length, upstream failure or client gone while in flight"
    CANCELLED = "gave up while waiting: client gone or pause-wait timeout"


class Trainer(enum.Enum):
    """The trainer's side of pause and resume."""

    TRAINING = "no pause call in progress"
    PAUSE_PENDING = "its pause call waits for PauseAcknowledged"
    PAUSE_RETURNED = "its pause call returned: weights may change, then it resumes"


# Phases in which a generation holds an upstream stream (the gate counts them in flight).
_IN_FLIGHT = (Phase.STREAMING, Phase.ABORTING)
# Phases a generation never leaves.
_ENDED = (Phase.DONE, Phase.CANCELLED)


@attrs.frozen
class Generation:
    """An abstract generation: its phase and the tokens it has received (kept across an interruption)."""

    phase: Phase
    tokens: int = 0


@attrs.frozen(cache_hash=True)
class GateWorld:
    """The global state: the gate's snapshot, the generations, the trainer, the pauses it has left."""

    gate: Snapshot
    generations: tuple[Generation, ...]
    trainer: Trainer
    pauses_left: int
    # Set when the gate refused an event or an effect did not match the generations; the world stops there.
    error: str | None = None

    def describe(self) -> str:
        """One line: gate state and counters, trainer, each generation's phase and tokens."""
        gate = self.gate.data
        gens = " ".join(f"g{i}={g.phase.name}/{g.tokens}" for i, g in enumerate(self.generations))
        text = (
            f"gate={self.gate.state.name}(epoch={gate.epoch}, in_flight={gate.in_flight}, waiting={gate.waiting}) "
            f"trainer={self.trainer.name} pauses_left={self.pauses_left} {gens}"
        )
        return text + (f" ERROR: {self.error}" if self.error else "")


def gate_with_generations(
    n: int,
    *,
    pauses: int = 2,
    max_tokens: int = 2,
    clients_may_leave: bool = True,
    gate: type[RolloutGate] = RolloutGate,
) -> Composition:
    """The gate, a trainer with ``pauses`` pause/resume rounds, and ``n`` generations of ``max_tokens`` tokens."""
    initial = GateWorld(gate.new("v0").snapshot(), (Generation(Phase.IDLE),) * n, Trainer.TRAINING, pauses)

    def send(world: GateWorld, event: object, actor: int | None, **changes: object) -> GateWorld:
        """Apply the actor's own move (``changes``), feed ``event`` to the gate, carry out its effects."""
        machine = gate.from_snapshot(world.gate)
        try:
            effects = machine.send(event)
        except (IllegalTransition, TableError) as error:
            return attrs.evolve(world, error=f"{type(error).__name__}: {error}")
        world = attrs.evolve(world, gate=machine.snapshot(), **changes)
        gens = list(world.generations)
        trainer = world.trainer
        for effect in effects:
            problem = None
            if isinstance(effect, (Admit, Wait)):
                # The answer to this generation's start: stream now, or park.
                if actor is None or not isinstance(event, GenerationWantsToStart):
                    problem = f"{effect!r} answers no start"
                else:
                    gens[actor] = Generation(Phase.STREAMING if isinstance(effect, Admit) else Phase.WAITING)
            elif isinstance(effect, AbortInFlight):
                # The controller cancels every stream it holds, all in this step.
                holding = sum(g.phase in _IN_FLIGHT for g in gens)
                problem = None if effect.count == holding else f"{effect!r} but {holding} hold a stream"
                gens = [attrs.evolve(g, phase=Phase.ABORTING) if g.phase is Phase.STREAMING else g for g in gens]
            elif isinstance(effect, AdmitWaiters):
                # Every waiter streams again (continuing with its tokens), and the resume call returns.
                parked = sum(g.phase is Phase.WAITING for g in gens)
                problem = None if effect.count == parked else f"{effect!r} but {parked} wait"
                gens = [attrs.evolve(g, phase=Phase.STREAMING) if g.phase is Phase.WAITING else g for g in gens]
                trainer = Trainer.TRAINING
            elif isinstance(effect, (PauseAcknowledged, AlreadyPaused)):
                # Every pending pause call returns.
                trainer = Trainer.PAUSE_RETURNED
            # AlreadyPausing, AlreadyRunning, ResumeRefused: the caller is answered; nothing else changes.
            if problem is not None:
                return attrs.evolve(world, error=problem)
        return attrs.evolve(world, generations=tuple(gens), trainer=trainer)

    def successors(world: GateWorld) -> list[tuple[str, GateWorld]]:
        """Every event enabled in ``world``, labelled for traces."""
        if world.error is not None:
            return []
        moves = []
        trainer = world.trainer
        # The trainer: pause (bounded rounds), resume after the pause returned, and the harmless repeats.
        if trainer is Trainer.TRAINING and world.pauses_left:
            changes = dict(trainer=Trainer.PAUSE_PENDING, pauses_left=world.pauses_left - 1)
            moves.append(("trainer: pause", send(world, PauseRequested(), None, **changes)))
        if trainer is not Trainer.TRAINING:
            moves.append(("trainer: pause again", send(world, PauseRequested(), None)))
        if trainer is Trainer.PAUSE_RETURNED:
            version = f"v{pauses - world.pauses_left}"
            moves.append((f"trainer: resume {version}", send(world, ResumeRequested(version), None)))
        else:
            # Too early (pause pending) or while running (no-op): the same version, nothing may change.
            version = world.gate.data.weight_version
            moves.append(("trainer: resume (repeat)", send(world, ResumeRequested(version), None)))
        for i, gen in enumerate(world.generations):
            name = f"g{i}"
            if gen.phase is Phase.IDLE:
                moves.append((f"{name}: start", send(world, GenerationWantsToStart(), i)))
            if gen.phase is Phase.STREAMING and gen.tokens < max_tokens:
                # A token arrives: local to the generation, the gate does not see it.
                moved = _replace(world.generations, i, Generation(Phase.STREAMING, gen.tokens + 1))
                moves.append((f"{name}: token {gen.tokens + 1}", attrs.evolve(world, generations=moved)))
            if gen.phase in _IN_FLIGHT:
                # Stop, length, upstream failure or client gone: the stream ends (also racing an abort).
                done = _replace(world.generations, i, Generation(Phase.DONE))
                moves.append((f"{name}: finish", send(world, GenerationFinished(), i, generations=done)))
            if gen.phase is Phase.ABORTING:
                # Cut at a token boundary: it keeps its tokens and waits for resume.
                parked = _replace(world.generations, i, Generation(Phase.WAITING, gen.tokens))
                moves.append((f"{name}: abort acknowledged", send(world, GenerationAbortAcknowledged(), i,
                                                                  generations=parked)))
            if gen.phase is Phase.WAITING and clients_may_leave:
                gone = _replace(world.generations, i, Generation(Phase.CANCELLED))
                moves.append((f"{name}: client gone while waiting", send(world, WaiterCancelled(), i,
                                                                         generations=gone)))
        return moves

    invariants = (
        Invariant("paused_means_no_generation_streaming",
                  lambda w: w.gate.state is not State.PAUSED or not _holding(w)),
        Invariant("pause_returns_after_every_stream_is_interrupted_or_finished",
                  lambda w: w.trainer is not Trainer.PAUSE_RETURNED or not _holding(w)),
        Invariant("no_stream_admitted_while_pausing",
                  lambda w: w.gate.state is State.RUNNING or all(g.phase is not Phase.STREAMING
                                                                for g in w.generations)),
        Invariant("gate_counts_match_generations", _counts_match),
        Invariant("gate_accepts_every_event", lambda w: w.error is None),
    )

    def is_final(world: GateWorld) -> bool:
        """Everyone is done and no pause call is left hanging."""
        return world.trainer is Trainer.TRAINING and all(g.phase in _ENDED for g in world.generations)

    name = f"RolloutGate x {n} generation(s), {pauses} pause(s), {max_tokens} token(s)"
    return Composition(name, initial, successors, invariants, is_final, GateWorld.describe)


def _replace(gens: tuple[Generation, ...], i: int, gen: Generation) -> tuple[Generation, ...]:
    """``gens`` with generation ``i`` replaced."""
    return gens[:i] + (gen,) + gens[i + 1:]


def _holding(world: GateWorld) -> bool:
    """Does any generation hold an upstream stream?"""
    return any(g.phase in _IN_FLIGHT for g in world.generations)


def _counts_match(world: GateWorld) -> bool:
    """The gate's counters agree with the generations."""
    gate = world.gate.data
    in_flight = sum(g.phase in _IN_FLIGHT for g in world.generations)
    waiting = sum(g.phase is Phase.WAITING for g in world.generations)
    return (gate.in_flight, gate.waiting) == (in_flight, waiting)
