"""The session world: the real SessionMachine and ChainMachines, ``n`` abstract generations, a finalizing trainer.

``session_with_generations(n)``: the real ``SessionMachine`` and real ``ChainMachine``s (restored from their
snapshots for every step), a trainer that finalizes (and repeats it: a retry after a failed export), aborts,
drains, or whose export fails, and ``n`` abstract generations,
driven by the rule ``proxy/trajectory/session.py`` runs (``statemachines/branching.py``). Each generation is prepared once, on a base of its
choice: no checkpoint (a new segment), the tip of any chain, or a chain's first step below its tip (a splice);
the chain machine says whether it extends the tip, forks, or starts a new segment (a closed tip). A prepared
generation may fail (upstream failure, client gone), have its incremental encode fail (it moves to a new
segment), or commit a step that ends at a turn boundary or at the length limit (which closes its chain).
It may also commit the same answer as an earlier step over the same checkpoint position (an idempotent retry,
spec 5.2): the controller asks that step's chain (``RefreshRequested``), which replaces its tip, shadows the
step below the tip, or declines (the step then commits as usual). Which earlier step: the newest of any position
whose base sits where the generation's base sits (the trie's node is abstracted away: an over-approximation).
Every step occupies one (chain, position); a chain's steps are the walk back from its tip through the bases.
Finalize exports every chain (``ExportRequested``) and records each exported segment's steps; a failed export
keeps them (``KeepForRetry``) and the next finalize runs the same export again (``RetryExport``).

Invariants (architecture.md 4, 5, 6 and the bookkeeping behind them):
1. ``each_generation_commits_at_most_once``; 2. ``failed_or_rejected_generations_commit_nothing``;
3. ``no_commit_after_session_left_active``; 4. ``every_committed_step_owned_by_exactly_one_chain`` (it holds
one position of one chain, and that position exists);
5. ``chains_are_token_paths`` (a chain's steps extend one another: a sibling never overwrites a tip);
6. ``every_committed_step_in_exactly_one_exported_segment`` (once exported; no segment without a step): a step
a refresh superseded (replaced, shadowed, or replaced back by a generation that was extending it) is in none, and
another step of its position is in one;
7. ``machines_accept_every_event``; 8. ``no_committed_step_lost_by_a_failed_export`` (only an abort of an active
session discards steps); 9. ``no_accepted_commit_lost`` (every accepted commit is a step). Final states: every
generation ended, the session finalized (or drained, or aborted).

The world runs on the one step mechanism (``step``): every move is a function of a ``SessionStep``, run by ``take``;
the machines are fed through the memoized pure step of ``step.WorldConfig``. The session rules (prepare, commit,
place, refresh, discard, finalize) are functions from a world to the next (``session_with_generations``' inner
functions); ``guarded`` makes each a move, and a refusal (``_Refused``, a ``Broken``) keeps what the move did up
to it for the trace.

``commit_holds_the_lock=False`` plants a bug: the commit's check-then-act is no longer one critical section (the
session's lock, ``proxy/controllers/session_registry.py``), but two moves: the commit *reads* (it computes its
outcome from the world as it is) and later *writes* that outcome back, over whatever other moves (another commit,
the finalize) did in between: their changes are lost.

Just over 500 lines: the session's moves (prepare, commit, fail, a TITO failure, finalize, export failure, abort,
drain) are world -> world functions over the world's records, each a few lines around a call into
``statemachines/branching.py``, the rule the session runs; splitting them from the records they evolve would scatter
one job.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs

from statemachines import branching
from statemachines import chain as chain_sm
from statemachines import session as session_sm
from statemachines.checking.explorer import Composition, Invariant
from statemachines.checking.invariants import (
    ACCEPTS, AT_MOST_ONCE, EXPORTED_ONCE, NO_COMMIT_LOST, NOT_AFTER_ACTIVE, NOT_LOST_BY_FAILED_EXPORT,
    NOTHING_IF_FAILED, OWNED_ONCE, PATHS, chains_are_paths, not_broken,
)
from statemachines.checking.records import ChainRecord
from statemachines.checking.step import Broken, Move, Step, WorldConfig, take
from statemachines.core import Snapshot


class GenPhase(enum.Enum):
    """An abstract generation's phase, as its controller sees it."""

    IDLE = "not started"
    PREPARED = "admitted and attached to a branch; generating upstream"
    COMMITTED = "its step was accepted"
    FAILED = "ended without committing: upstream failure or client gone"
    REJECTED = "refused at prepare (session closed, step limit) or its commit was rejected"
    COMMITTING = "its commit read the world and will write its outcome later (only without the lock: a planted bug)"


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
class StepRecord:
    """A committed step: its generation, the step it extends (0: none), the session state that accepted it, and
    the position it holds (chain index, 1-based position; -1 until its commit placed it)."""

    generation: int
    base: int
    accepted_in: str
    chain: int = -1
    position: int = -1


@attrs.frozen
class PendingWrite:
    """Without the lock (a planted bug): what generation ``generation``'s commit computed when it read the world, to
    be written back later over whatever changed in between."""

    generation: int
    session: Snapshot
    chains: tuple[ChainRecord, ...]
    steps: tuple[StepRecord, ...]
    outcome: AbstractGeneration


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
    # (invariant name, what happened) when a machine refused an event or an effect did not fit; the world stops.
    broken: tuple[str, str] | None = None
    # Commits that read the world and have not written their outcome yet (only without the lock).
    writes: tuple[PendingWrite, ...] = ()

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
        return text + (f" BROKEN {self.broken[0]}: {self.broken[1]}" if self.broken else "")


def session_with_generations(
    n: int,
    *,
    max_steps: int | None = None,
    session: type | None = None,
    chain: type | None = None,
    commit_holds_the_lock: bool = True,
) -> Composition:
    """A session, its chains, a finalizing trainer and ``n`` generations (module docstring); ``session`` and ``chain``
    may be variant machines, and ``commit_holds_the_lock=False`` splits each commit into a read and a write (planted
    bugs)."""
    session_cls = session or session_sm.SessionMachine
    chain_cls = chain or chain_sm.ChainMachine
    initial = SessionWorld(session_cls.new(max_steps).snapshot(), (), (AbstractGeneration(GenPhase.IDLE),) * n, (),
                           Finalizer.WORKING)

    config = WorldConfig()

    class _Refused(Broken):
        """A machine refused an event, or an effect did not fit: the world (as far as it got: ``world``, or the
        step's) stops there."""

        world: SessionWorld | None = None

        def __init__(self, detail: str) -> None:
            super().__init__(ACCEPTS, detail)

    def feed(machine_cls: type, snapshot: Snapshot, event: object) -> tuple[Snapshot, tuple]:
        """The machine's pure step (memoized); a refusal is ``_Refused``."""
        try:
            return config.send(machine_cls, snapshot, event, machine_cls.table.machine)
        except Broken as broken:
            raise _Refused(broken.detail) from None

    def guarded(step: Callable[..., SessionWorld]) -> Callable[..., None]:
        """A session rule (world -> world) as a move of the step: a refusal keeps what the rule did up to it."""
        def move(run: SessionStep, *args: object) -> None:
            try:
                run.current = step(run.current, *args)
            except _Refused as refused:
                run.current = refused.world or run.current
                raise
        return move

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
    def finalize(world: SessionWorld, event: object = session_sm.FinalizeRequested()) -> SessionWorld:
        # The trainer's FinalizeRequested, or the reaper's IdleTimeout (the same export, or nothing while a
        # generation is in flight or once the session left ACTIVE).
        snapshot, effects = feed(session_cls, world.session, event)
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

    def commit_reads(run: SessionStep, i: int, closes: bool, target: int = 0) -> None:
        """Without the lock: the commit runs on the world as it is now, but its outcome is only kept aside."""
        before = run.current
        commit(run, i, closes, target)
        after = run.current
        write = PendingWrite(i, after.session, after.chains, after.steps, after.generations[i])
        committing = _replace_any(before.generations, i, AbstractGeneration(GenPhase.COMMITTING))
        run.current = attrs.evolve(before, generations=committing, writes=before.writes + (write,))

    def commit_writes(run: SessionStep, i: int) -> None:
        """Without the lock: the commit writes what it computed back, over what changed since it read."""
        world = run.current
        write = next(w for w in world.writes if w.generation == i)
        run.current = attrs.evolve(
            world, session=write.session, chains=write.chains, steps=write.steps,
            generations=_replace_any(world.generations, i, write.outcome),
            writes=tuple(w for w in world.writes if w is not write),
        )

    def successors(world: SessionWorld) -> list[tuple[str, SessionWorld]]:
        if world.broken is not None:
            return []
        moves: list[tuple[str, Move]] = []
        if world.finalizer is Finalizer.WORKING:
            moves.append(("trainer: finalize", finalize))
        else:
            moves.append(("trainer: finalize again", finalize))
        if world.finalizer is Finalizer.EXPORTING:
            moves.append(("trainer: export stored", complete))
            moves.append(("trainer: export fails", export_fails))
        moves.append(("trainer: abort", abort))
        moves.append(("reaper: idle timeout", lambda run: finalize(run, session_sm.IdleTimeout())))
        if world.finalizer in (Finalizer.FINALIZED, Finalizer.DRAINED):
            moves.append(("trainer: drain", drain))
        # With the lock a commit is one move; without it, it reads in one and writes in a later one.
        commits = commit if commit_holds_the_lock else commit_reads
        reads = "" if commit_holds_the_lock else " (reads)"
        for i, gen in enumerate(world.generations):
            name = f"g{i}"
            if gen.phase is GenPhase.IDLE:
                moves.append((f"{name}: prepare (no checkpoint)", lambda run, i=i: prepare(run, i, None)))
                for c, record in enumerate(world.chains):
                    if record.steps:
                        tip = (c, len(record.steps))
                        moves.append((f"{name}: prepare on c{c} tip", lambda run, i=i, t=tip: prepare(run, i, t)))
                        if len(record.steps) > 1:
                            moves.append((f"{name}: prepare on c{c} step 1",
                                          lambda run, i=i, c=c: prepare(run, i, (c, 1))))
            if gen.phase is GenPhase.PREPARED:
                moves.append((f"{name}: commit{reads}", lambda run, i=i: commits(run, i, False)))
                moves.append((f"{name}: commit (length){reads}", lambda run, i=i: commits(run, i, True)))
                for k in refresh_targets(world, gen):
                    moves.append((f"{name}: commit the same answer as s{k}{reads}",
                                  lambda run, i=i, k=k: commits(run, i, False, k)))
                    moves.append((f"{name}: commit the same answer as s{k} (length){reads}",
                                  lambda run, i=i, k=k: commits(run, i, True, k)))
                moves.append((f"{name}: fail", lambda run, i=i: fail(run, i)))
                if gen.mode in ("tip", "fork"):
                    moves.append((f"{name}: tito fails", lambda run, i=i: tito_fails(run, i)))
            if gen.phase is GenPhase.COMMITTING:
                moves.append((f"{name}: commit (writes)", lambda run, i=i: commit_writes(run, i)))
        return take(world, moves, lambda w: SessionStep(w, config), symmetry=False)

    invariants = (
        Invariant(AT_MOST_ONCE, lambda w: all(sum(s.generation == i for s in w.steps) <= 1 for i in range(n))),
        Invariant(NOTHING_IF_FAILED,
                  lambda w: not any(w.generations[s.generation].phase in (GenPhase.FAILED, GenPhase.REJECTED)
                                    for s in w.steps)),
        Invariant(NOT_AFTER_ACTIVE, lambda w: all(s.accepted_in == "ACTIVE" for s in w.steps)),
        Invariant(OWNED_ONCE, _positions_held),
        Invariant(PATHS, chains_are_paths),
        Invariant(EXPORTED_ONCE, _exported_once),
        not_broken(ACCEPTS),
        Invariant(NOT_LOST_BY_FAILED_EXPORT, lambda w: w.finalizer is not Finalizer.LOST or not w.steps),
        Invariant(NO_COMMIT_LOST,
                  lambda w: sum(g.phase is GenPhase.COMMITTED for g in w.generations) == len(w.steps)),
    )

    def is_final(world: SessionWorld) -> bool:
        ended = all(g.phase not in (GenPhase.IDLE, GenPhase.PREPARED, GenPhase.COMMITTING) for g in world.generations)
        # LOST is final too: a bug, but the invariant reports it (a deadlock report would hide which bug).
        finals = (Finalizer.FINALIZED, Finalizer.DRAINED, Finalizer.DISCARDED, Finalizer.LOST)
        return ended and world.finalizer in finals

    limit = "" if max_steps is None else f", max {max_steps} step(s)"
    name = f"SessionMachine + ChainMachines x {n} generation(s){limit}"
    return Composition(name, initial, successors, invariants, is_final, SessionWorld.describe)


class SessionStep(Step):
    """One step of the session world: the world as the move's session rules leave it (they are world -> world)."""

    def __init__(self, world: SessionWorld, config: WorldConfig) -> None:
        super().__init__(config)
        self.current = world

    def world(self, broken: tuple[str, str] | None = None, *, symmetry: bool = True) -> SessionWorld:
        return self.current if broken is None else attrs.evolve(self.current, broken=broken)


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
