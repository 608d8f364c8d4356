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

``session_with_generations(n)``: the real ``SessionMachine`` and ``ChainMachine``s with ``n`` abstract generations
and a finalizing trainer; it checks architecture invariants 4, 5 and 6 (see the comment above it, further down).
"""

from __future__ import annotations

import enum

import attrs

from statemachines import branching
from statemachines import chain as chain_sm
from statemachines import session as session_sm
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


# ---- Sessions, chains and generations ------------------------------------------------------------------------------
#
# ``session_with_generations(n)``: the real ``SessionMachine`` and real ``ChainMachine``s (restored from their
# snapshots for every step), a trainer that finalizes (and repeats it: a retry after a failed export), aborts,
# drains, or whose export fails, and ``n`` abstract generations,
# driven exactly as ``proxy/trajectory/session.py`` drives them. Each generation is prepared once, on a base of its
# choice: no checkpoint (a new segment), the tip of any chain, or a chain's first step below its tip (a splice);
# the chain machine says whether it extends the tip, forks, or starts a new segment (a closed tip). A prepared
# generation may fail (upstream failure, client gone), have its incremental encode fail (it moves to a new
# segment), or commit a step that ends at a turn boundary or at the length limit (which closes its chain).
# It may also commit the same answer as an earlier step over the same checkpoint position (an idempotent retry,
# spec 5.2): the controller asks that step's chain (``RefreshRequested``), which replaces its tip, shadows the
# step below the tip, or declines (the step then commits as usual). Which earlier step: the newest of any position
# whose base sits where the generation's base sits (the trie's node is abstracted away: an over-approximation).
# Every step occupies one (chain, position); a chain's steps are the walk back from its tip through the bases.
# Finalize exports every chain (``ExportRequested``) and records each exported segment's steps; a failed export
# keeps them (``KeepForRetry``) and the next finalize runs the same export again (``RetryExport``).
#
# Invariants (architecture.md 4, 5, 6 and the bookkeeping behind them):
# 1. ``each_generation_commits_at_most_once``; 2. ``failed_or_rejected_generations_commit_nothing``;
# 3. ``no_commit_after_session_left_active``; 4. ``every_committed_step_owned_by_exactly_one_chain`` (it holds
# one position of one chain, and that position exists);
# 5. ``chains_are_token_paths`` (a chain's steps extend one another: a sibling never overwrites a tip);
# 6. ``every_committed_step_in_exactly_one_exported_segment`` (once exported; no segment without a step): a step
# a refresh superseded (replaced, shadowed, or replaced back by a generation that was extending it) is in none, and
# another step of its position is in one;
# 7. ``machines_accept_every_event``; 8. ``no_committed_step_lost_by_a_failed_export`` (only an abort of an active
# session discards steps). Final states: every generation ended, the session finalized (or drained, or aborted).


class GenPhase(enum.Enum):
    """An abstract generation's phase, as its controller sees it."""

    IDLE = "not started"
    PREPARED = "admitted and attached to a branch; generating upstream"
    COMMITTED = "its step was accepted"
    FAILED = "ended without committing: upstream failure or client gone"
    REJECTED = "refused at prepare (session closed, step limit) or its commit was rejected"


class Finalizer(enum.Enum):
    """The trainer's side of finalize."""

    WORKING = "the rollout is running; finalize not called"
    EXPORTING = "its finalize call waits for the export"
    FINALIZED = "its finalize call returned"
    DRAINED = "it read and drained the segments"
    DISCARDED = "the session was aborted"
    RETRYING = "its export failed; the steps are kept and its next finalize retries the export"
    LOST = "its export failed and the session was discarded with its committed steps (a bug)"


@attrs.frozen
class AbstractGeneration:
    """An abstract generation: phase, how it is attached (mode, chain index, base step id, base position)."""

    phase: GenPhase
    # "new" (its own pending chain), "tip" (counted on chain), "fork" (commits into a new chain), or "".
    mode: str = ""
    chain: int = -1
    base: int = 0
    at: int = 0


@attrs.frozen
class ChainRecord:
    """A chain: its machine's snapshot, the step its first step extends (0: none), the step ids it owns."""

    machine: Snapshot
    base: int
    steps: tuple[int, ...] = ()
    # Forgotten by the controller after DiscardChain.
    discarded: bool = False


@attrs.frozen
class StepRecord:
    """A committed step: its generation, the step it extends (0: none), the session state that accepted it, and
    the position it holds (chain index, 1-based position; -1 until its commit placed it)."""

    generation: int
    base: int
    accepted_in: str
    chain: int = -1
    position: int = -1


@attrs.frozen(cache_hash=True)
class SessionWorld:
    """The global state of the session composition."""

    session: Snapshot
    chains: tuple[ChainRecord, ...]
    generations: tuple[AbstractGeneration, ...]
    # Step id k is steps[k - 1].
    steps: tuple[StepRecord, ...]
    finalizer: Finalizer
    # The owned step ids of every exported segment, once exported.
    exported: tuple[tuple[int, ...], ...] | None = None
    error: str | None = None

    def describe(self) -> str:
        """One line: session, chains, generations, steps."""
        data = self.session.data
        chains = " ".join(
            f"c{i}={c.machine.state.name}(base={c.base},steps={list(c.steps)},ext={c.machine.data.extenders})"
            for i, c in enumerate(self.chains)
        )
        gens = " ".join(f"g{i}={g.phase.name}/{g.mode or '-'}" for i, g in enumerate(self.generations))
        text = (f"session={self.session.state.name}(steps={data.steps}, in_flight={data.in_flight}) "
                f"finalizer={self.finalizer.name} {chains} {gens} exported={self.exported}")
        return text + (f" ERROR: {self.error}" if self.error else "")


def session_with_generations(
    n: int,
    *,
    max_steps: int | None = None,
    session: type | None = None,
    chain: type | None = None,
) -> Composition:
    """A session, its chains, a finalizing trainer and ``n`` generations (see the comment above)."""
    session_cls = session or session_sm.SessionMachine
    chain_cls = chain or chain_sm.ChainMachine
    initial = SessionWorld(session_cls.new(max_steps).snapshot(), (), (AbstractGeneration(GenPhase.IDLE),) * n, (),
                           Finalizer.WORKING)

    class _Refused(Exception):
        """A machine refused an event, or an effect did not fit: the world (as far as it got) stops with an error."""

        world: SessionWorld | None = None

    def feed(machine_cls: type, snapshot: Snapshot, event: object) -> tuple[Snapshot, list]:
        machine = machine_cls.from_snapshot(snapshot)
        try:
            effects = machine.send(event)
        except (IllegalTransition, TableError) as error:
            raise _Refused(f"{type(error).__name__}: {error}") from None
        return machine.snapshot(), effects

    def guarded(step):
        """Run a move; a refusal becomes the world's error."""
        def run(world: SessionWorld, *args) -> SessionWorld:
            try:
                return step(world, *args)
            except _Refused as refused:
                return attrs.evolve(refused.world or world, error=str(refused))
        return run

    def with_chain(chains: tuple[ChainRecord, ...], index: int, record: ChainRecord) -> tuple[ChainRecord, ...]:
        return chains[:index] + (record,) + chains[index + 1:]

    def new_chain(world: SessionWorld, base: int) -> tuple[SessionWorld, int]:
        chains = world.chains + (ChainRecord(chain_cls.new().snapshot(), base),)
        return attrs.evolve(world, chains=chains), len(chains) - 1

    def send_chain(world: SessionWorld, index: int, event: object) -> tuple[SessionWorld, list]:
        record = world.chains[index]
        try:
            snapshot, effects = feed(chain_cls, record.machine, event)
        except _Refused as refused:
            # Keep what the move did before the refusal (a step already accepted, say) in the reported world.
            refused.world = world
            raise
        chains = with_chain(world.chains, index, attrs.evolve(record, machine=snapshot))
        return attrs.evolve(world, chains=chains), effects

    def set_gen(world: SessionWorld, i: int, gen: AbstractGeneration) -> SessionWorld:
        return attrs.evolve(world, generations=_replace_any(world.generations, i, gen))

    class WorldChains:
        """The world's chains as the branching rule's ``ChainPort`` (chains by index, bases by step id, 0: none);
        every event replaces the world it holds."""

        def __init__(self, world: SessionWorld) -> None:
            self.world = world

        def send(self, c: int, event: object) -> list:
            self.world, effects = send_chain(self.world, c, event)
            return effects

        def new_chain(self, base: int | None) -> int:
            self.world, c = new_chain(self.world, base or 0)
            return c

        def forget(self, c: int) -> None:
            """The controller forgets a chain on DiscardChain."""
            record = attrs.evolve(self.world.chains[c], discarded=True)
            self.world = attrs.evolve(self.world, chains=with_chain(self.world.chains, c, record))

    def ruled(world: SessionWorld, rule, *args) -> tuple[SessionWorld, object]:
        """Run a ``branching`` rule on the world's chains: the world after it, and the rule's answer."""
        chains = WorldChains(world)
        try:
            answer = rule(chains, *args)
        except branching.UnexpectedAnswer as error:
            refused = _Refused(str(error))
            refused.world = chains.world
            raise refused from None
        return chains.world, answer

    @guarded
    def prepare(world: SessionWorld, i: int, target: tuple[int, int] | None) -> SessionWorld:
        snapshot, effects = feed(session_cls, world.session, session_sm.GenerationRequested())
        world = attrs.evolve(world, session=snapshot)
        if not any(isinstance(e, session_sm.AdmitGeneration) for e in effects):
            return set_gen(world, i, AbstractGeneration(GenPhase.REJECTED))
        if target is None:
            world, claim = ruled(world, branching.attach, None)
        else:
            c, at = target
            world, claim = ruled(world, branching.attach, world.chains[c].steps[at - 1], c, at)
        return set_gen(world, i, _prepared(claim))

    @guarded
    def tito_fails(world: SessionWorld, i: int) -> SessionWorld:
        gen = world.generations[i]
        snapshot, effects = feed(session_cls, world.session, session_sm.TitoFailed())
        world, claim = ruled(attrs.evolve(world, session=snapshot), branching.restart_segment, _claim(gen), effects)
        return set_gen(world, i, _prepared(claim))

    def slot(world: SessionWorld, step_id: int) -> tuple[int, int] | None:
        """Where a step sits (None for no step: a full encode)."""
        if not step_id:
            return None
        record = world.steps[step_id - 1]
        return record.chain, record.position

    def refresh_targets(world: SessionWorld, gen: AbstractGeneration) -> list[int]:
        """The steps a commit of ``gen`` may refresh: the newest step of every position whose base sits where the
        generation's base sits."""
        newest: dict[tuple[int, int], int] = {}
        for k, record in enumerate(world.steps, start=1):
            if record.chain >= 0 and branching.same_checkpoint(slot(world, record.base), slot(world, gen.base)):
                newest[(record.chain, record.position)] = k
        return sorted(newest.values())

    def place(world: SessionWorld, step_id: int, c: int, position: int, tip: bool) -> SessionWorld:
        """Record the step's position; when it is the chain's tip, the chain's steps are the walk back from it."""
        steps = world.steps[:step_id - 1] + (attrs.evolve(world.steps[step_id - 1], chain=c, position=position),)
        steps += world.steps[step_id:]
        world = attrs.evolve(world, steps=steps)
        if not tip:
            return world
        walk, k = [], step_id
        while k and steps[k - 1].chain == c:
            walk.append(k)
            k = steps[k - 1].base
        record = attrs.evolve(world.chains[c], steps=tuple(reversed(walk)), base=k)
        return attrs.evolve(world, chains=with_chain(world.chains, c, record))

    @guarded
    def commit(world: SessionWorld, i: int, closes: bool, target: int = 0) -> SessionWorld:
        gen = world.generations[i]
        accepted_in = world.session.state.name
        snapshot, effects = feed(session_cls, world.session, session_sm.CommitRequested())
        world = attrs.evolve(world, session=snapshot)
        if not any(isinstance(e, session_sm.AcceptCommit) for e in effects):
            return set_gen(world, i, AbstractGeneration(GenPhase.REJECTED))
        # Accepted: the step exists from now on (recorded first, so a bug that follows is still seen).
        step_id = len(world.steps) + 1
        world = attrs.evolve(world, steps=world.steps + (StepRecord(i, gen.base, accepted_in),))
        world = set_gen(world, i, attrs.evolve(gen, phase=GenPhase.COMMITTED))
        close = chain_sm.CloseReason.LENGTH_EXHAUSTED if closes else None
        # The same answer as step ``target``, if any: its chain says what the refresh does.
        refresh = branching.Refresh(*slot(world, target)) if target else None
        world, placement = ruled(world, branching.commit, _claim(gen), close, refresh)
        return place(world, step_id, placement.chain, placement.position, placement.is_tip)

    @guarded
    def fail(world: SessionWorld, i: int) -> SessionWorld:
        gen = world.generations[i]
        snapshot, effects = feed(session_cls, world.session, session_sm.GenerationDropped())
        world = set_gen(attrs.evolve(world, session=snapshot), i, AbstractGeneration(GenPhase.FAILED))
        world, _ = ruled(world, branching.release, _claim(gen), effects)
        return world

    @guarded
    def finalize(world: SessionWorld) -> SessionWorld:
        snapshot, effects = feed(session_cls, world.session, session_sm.FinalizeRequested())
        world = attrs.evolve(world, session=snapshot)
        for effect in effects:
            if isinstance(effect, session_sm.RetryExport):
                # The export kept by the failed attempt runs again: the same segments.
                return attrs.evolve(world, finalizer=Finalizer.EXPORTING)
            if isinstance(effect, session_sm.ExportSession):
                live = [c for c, record in enumerate(world.chains) if not record.discarded]
                world, export = ruled(world, branching.export, live)
                exported = tuple(world.chains[segment.chain].steps for segment in export.segments)
                return attrs.evolve(world, exported=exported, finalizer=Finalizer.EXPORTING)
        return world

    @guarded
    def export_fails(world: SessionWorld) -> SessionWorld:
        snapshot, effects = feed(session_cls, world.session, session_sm.ExportFailed("disk full"))
        world = attrs.evolve(world, session=snapshot)
        if any(isinstance(e, session_sm.KeepForRetry) for e in effects):
            return attrs.evolve(world, finalizer=Finalizer.RETRYING)
        if any(isinstance(e, session_sm.DiscardSession) for e in effects):
            return attrs.evolve(world, exported=None, finalizer=Finalizer.LOST)
        return world

    @guarded
    def abort(world: SessionWorld) -> SessionWorld:
        snapshot, effects = feed(session_cls, world.session, session_sm.AbortRequested())
        return discard_session(attrs.evolve(world, session=snapshot), effects)

    def discard_session(world: SessionWorld, effects: list) -> SessionWorld:
        """DiscardSession: nothing is exported (a pending finalize call fails)."""
        if any(isinstance(e, session_sm.DiscardSession) for e in effects):
            return attrs.evolve(world, exported=None, finalizer=Finalizer.DISCARDED)
        return world

    @guarded
    def complete(world: SessionWorld) -> SessionWorld:
        snapshot, effects = feed(session_cls, world.session, session_sm.ExportCompleted())
        finalized = any(isinstance(e, session_sm.Finalized) for e in effects)
        finalizer = Finalizer.FINALIZED if finalized else world.finalizer
        return attrs.evolve(world, session=snapshot, finalizer=finalizer)

    @guarded
    def drain(world: SessionWorld) -> SessionWorld:
        snapshot, _ = feed(session_cls, world.session, session_sm.SegmentsDrained())
        return attrs.evolve(world, session=snapshot, finalizer=Finalizer.DRAINED)

    def successors(world: SessionWorld) -> list[tuple[str, SessionWorld]]:
        if world.error is not None:
            return []
        moves = []
        if world.finalizer is Finalizer.WORKING:
            moves.append(("trainer: finalize", finalize(world)))
        else:
            moves.append(("trainer: finalize again", finalize(world)))
        if world.finalizer is Finalizer.EXPORTING:
            moves.append(("trainer: export stored", complete(world)))
            moves.append(("trainer: export fails", export_fails(world)))
        moves.append(("trainer: abort", abort(world)))
        if world.finalizer in (Finalizer.FINALIZED, Finalizer.DRAINED):
            moves.append(("trainer: drain", drain(world)))
        for i, gen in enumerate(world.generations):
            name = f"g{i}"
            if gen.phase is GenPhase.IDLE:
                moves.append((f"{name}: prepare (no checkpoint)", prepare(world, i, None)))
                for c, record in enumerate(world.chains):
                    if record.steps:
                        moves.append((f"{name}: prepare on c{c} tip", prepare(world, i, (c, len(record.steps)))))
                        if len(record.steps) > 1:
                            moves.append((f"{name}: prepare on c{c} step 1", prepare(world, i, (c, 1))))
            if gen.phase is GenPhase.PREPARED:
                moves.append((f"{name}: commit", commit(world, i, False)))
                moves.append((f"{name}: commit (length)", commit(world, i, True)))
                for k in refresh_targets(world, gen):
                    moves.append((f"{name}: commit the same answer as s{k}", commit(world, i, False, k)))
                    moves.append((f"{name}: commit the same answer as s{k} (length)", commit(world, i, True, k)))
                moves.append((f"{name}: fail", fail(world, i)))
                if gen.mode in ("tip", "fork"):
                    moves.append((f"{name}: tito fails", tito_fails(world, i)))
        return moves

    invariants = (
        Invariant("each_generation_commits_at_most_once",
                  lambda w: all(sum(s.generation == i for s in w.steps) <= 1 for i in range(n))),
        Invariant("failed_or_rejected_generations_commit_nothing",
                  lambda w: not any(w.generations[s.generation].phase in (GenPhase.FAILED, GenPhase.REJECTED)
                                    for s in w.steps)),
        Invariant("no_commit_after_session_left_active", lambda w: all(s.accepted_in == "ACTIVE" for s in w.steps)),
        Invariant("every_committed_step_owned_by_exactly_one_chain", _positions_held),
        Invariant("chains_are_token_paths", _chains_are_paths),
        Invariant("every_committed_step_in_exactly_one_exported_segment", _exported_once),
        Invariant("machines_accept_every_event", lambda w: w.error is None),
        Invariant("no_committed_step_lost_by_a_failed_export",
                  lambda w: w.finalizer is not Finalizer.LOST or not w.steps),
    )

    def is_final(world: SessionWorld) -> bool:
        ended = all(g.phase not in (GenPhase.IDLE, GenPhase.PREPARED) for g in world.generations)
        # LOST is final too: a bug, but the invariant reports it (a deadlock report would hide which bug).
        finals = (Finalizer.FINALIZED, Finalizer.DRAINED, Finalizer.DISCARDED, Finalizer.LOST)
        return ended and world.finalizer in finals

    limit = "" if max_steps is None else f", max {max_steps} step(s)"
    name = f"SessionMachine + ChainMachines x {n} generation(s){limit}"
    return Composition(name, initial, successors, invariants, is_final, SessionWorld.describe)


# An abstract generation's mode, as the branching rule names it.
_MODES = {"new": branching.Mode.NEW_SEGMENT, "tip": branching.Mode.EXTEND_TIP, "fork": branching.Mode.FORK}


def _claim(gen: AbstractGeneration) -> branching.BranchClaim[int, int]:
    """A prepared generation's attachment as the branching rule's claim (chain -1, base 0: none)."""
    return branching.BranchClaim(_MODES[gen.mode], gen.chain if gen.chain >= 0 else None, gen.base or None, gen.at)


def _prepared(claim: branching.BranchClaim[int, int]) -> AbstractGeneration:
    """The prepared generation that holds ``claim``."""
    mode = next(name for name, value in _MODES.items() if value is claim.mode)
    chain = claim.chain if claim.chain is not None else -1
    return AbstractGeneration(GenPhase.PREPARED, mode, chain, claim.base or 0, claim.at)


def _replace_any(items: tuple, i: int, item: object) -> tuple:
    """``items`` with item ``i`` replaced."""
    return items[:i] + (item,) + items[i + 1:]


def _positions_held(world: SessionWorld) -> bool:
    """Every committed step holds one position of one chain, and the chain has that position; each chain's steps
    hold its positions 1, 2, ... in order."""
    for record in world.steps:
        if record.chain < 0 or not 1 <= record.position <= len(world.chains[record.chain].steps):
            return False
    for c, chain in enumerate(world.chains):
        for position, step_id in enumerate(chain.steps, start=1):
            if (world.steps[step_id - 1].chain, world.steps[step_id - 1].position) != (c, position):
                return False
    return True


def _chains_are_paths(world: SessionWorld) -> bool:
    """Each chain's steps extend one another, starting from the chain's base."""
    for record in world.chains:
        previous = record.base
        for step_id in record.steps:
            if world.steps[step_id - 1].base != previous:
                return False
            previous = step_id
    return True


def _exported_once(world: SessionWorld) -> bool:
    """Once exported: every committed step is in at most one segment, and one that is in none was superseded by a
    refresh (another step of its position is exported); no segment is empty."""
    if world.exported is None:
        return True
    if any(not segment for segment in world.exported):
        return False
    exported_positions = {(world.steps[k - 1].chain, world.steps[k - 1].position)
                          for segment in world.exported for k in segment}
    for k, record in enumerate(world.steps, start=1):
        count = sum(k in segment for segment in world.exported)
        if count > 1 or (count == 0 and (record.chain, record.position) not in exported_positions):
            return False
    return True
