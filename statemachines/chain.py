"""ChainMachine: one per chain of a session; decides whether a commit extends the chain's tip or forks a new chain.

Theory of operation
-------------------
A *chain* is a run of committed steps whose tokens were built incrementally, each step's checkpoint extending the
previous one by TITO (spec sections 2 and 5). It is exported as one segment. Its first step either starts from
scratch (a full encode) or extends a checkpoint owned by another chain (a *fork*: the two chains share that prefix
in memory, and the prefix is trained in the chain that owns it). Every committed step occupies exactly one position
of one chain: the one whose tip it became, or the position of the step it refreshed (below). The segment is the walk
back from the tip, so each position is trained once and a step replaced by a refresh is not (architecture
invariant 6).

The machine counts, it does not know generations by name. ``steps`` is the number of steps the chain owns; its
tip is step number ``steps``. A generation whose nearest checkpoint is the chain's step ``at`` asks first
(``ExtensionRequested(at)``):

- at the tip of an open chain: ``ExtendTip``; the generation is counted in ``extenders`` (EXTENDING);
- below the tip (a splice, a return to an earlier point): ``ForkAt``; it will commit into a new chain;
- at the tip of a CLOSED chain (length exhausted, or no end-of-turn token): ``StartNewSegment`` with the reason;
  the generation full-encodes and starts a new chain (spec 5.4).

A counted generation ends exactly once: ``ExtensionCommitted(at)`` or ``GenerationDropped`` (failed, cancelled, or
switched to a full encode after a TITO failure). The commit extends the chain in place (``TipAdvanced``) only if
the tip is still where it was at prepare; if a sibling committed first, it forks (``ForkAt``), so concurrent
siblings never overwrite each other. A commit that cannot be extended further (``close_reason`` set) closes the
chain. A chain created for a generation that starts a new segment is PENDING until that generation commits
(``FirstStepCommitted``) or drops (ABANDONED: a failed generation commits nothing); forks are created at commit
and receive their ``FirstStepCommitted`` at once.

*Refreshes* (spec 5.2, idempotent retry: the same answer to the same prompt refreshes the trie node; seed 001: same
input, same output, same node, and one segment for it). A generation that committed the same message as the chain's
step ``at``, over the same checkpoint (the same position: both full encodes, or both extending the same position of
the same chain), asks
``RefreshRequested(at, close_reason)`` instead of committing a step of its own:

- at the tip, ending the same way (``close_reason`` equal to the chain's): ``TipRefreshed``; the new step replaces
  the tip at the same position (the segment holds it, once; nothing else changes: the counts, the state, a CLOSED
  chain's reason). Generations that were extending the old tip still extend that position in place (their tokens
  continue the old step, which their segment then holds);
- below the tip, ending at a turn boundary: ``StepShadowed``; the chain already continued past that position, so
  its segment keeps the step it was continued from and the new step is exported nowhere: it only becomes the node's
  newest checkpoint, which later generations fork from (if a retry built on it then replaces the tip, the chain's
  path runs through it instead: both steps hold one position);
- otherwise (it ends differently: at the length limit or without the end-of-turn token where the step did not, or
  the reverse): ``RefreshDeclined``; the generation commits as a step of its own (in place, a fork or a new segment).

``ExportRequested`` (the session is finalizing) exports every chain that owns a step (``ExportSegment``) and
abandons pending ones (``DiscardChain``); counted generations still in flight are rejected by the session machine
and never reach a chain again. EXPORTED and ABANDONED absorb.

Illegal events are controller bugs (a count would go negative, a step position that does not exist, an event
after export): the policy is transactional, ``IllegalTransition`` and nothing changes, because the chain holds
training data that a bug elsewhere must not destroy.
"""

from __future__ import annotations

import enum

import attrs

from statemachines.core import Branch, Goto, Machine, MachineState, Policy, Refused, TransitionTable, evolve, on


class State(MachineState):
    """The chain's states; each value is its one-line description."""

    PENDING = "created for a generation that starts a new segment; nothing committed yet"
    OPEN = "its tip ends at a turn boundary and may be extended; no generation is extending it"
    EXTENDING = "one or more generations are extending its tip"
    CLOSED = "its tip cannot be extended (reason recorded); generations already extending it will fork"
    EXPORTED = "written out as one segment at finalize"
    ABANDONED = "its only generation failed, or the session ended before it committed; never exported"


class CloseReason(enum.Enum):
    """Why a chain's tip cannot be extended by TITO; also the boundary reason of the segment that follows."""

    LENGTH_EXHAUSTED = "length_exhausted"
    NO_END_OF_TURN = "no_end_of_turn"


# ---- Events: what the session controller tells a chain ------------------------------------------------------------


@attrs.frozen
class ExtensionRequested:
    """A generation was prepared on the chain's step ``at`` (its nearest checkpoint)."""

    # 1-based position of the checkpoint among the chain's own steps; the tip is ``steps``.
    at: int


@attrs.frozen
class ExtensionCommitted:
    """A generation counted by ExtendTip commits; close_reason is set when its step cannot be extended."""

    at: int
    close_reason: CloseReason | None = None


@attrs.frozen
class FirstStepCommitted:
    """The generation a pending chain was created for (or a fork) commits the chain's first step."""

    close_reason: CloseReason | None = None


@attrs.frozen
class GenerationDropped:
    """A generation counted on this chain ended without committing (failed, cancelled, or re-segmented)."""


@attrs.frozen
class ExportRequested:
    """The session is finalizing: export the chain as a segment, or abandon it if it owns no step."""


@attrs.frozen
class RefreshRequested:
    """A generation committed the same answer as the chain's step ``at``, over the same checkpoint (a refresh)."""

    at: int
    close_reason: CloseReason | None = None


EVENTS = (ExtensionRequested, ExtensionCommitted, FirstStepCommitted, GenerationDropped, ExportRequested,
          RefreshRequested)


# ---- Effects: what the session controller must do ----------------------------------------------------------------


@attrs.frozen
class ExtendTip:
    """Encode incrementally after the tip; the generation is counted on this chain until it commits or drops."""

    at: int


@attrs.frozen
class ForkAt:
    """Encode incrementally after step ``at`` (prepare) / commit into a new chain forked there (commit)."""

    at: int


@attrs.frozen
class StartNewSegment:
    """The tip cannot be extended: full-encode and start a new chain; the reason becomes its boundary reason."""

    reason: CloseReason


@attrs.frozen
class TipAdvanced:
    """The committed step is now the chain's tip, at position ``step``."""

    step: int


@attrs.frozen
class TipRefreshed:
    """The refreshing step replaces the chain's tip at position ``step`` (the old tip is no longer exported)."""

    step: int


@attrs.frozen
class StepShadowed:
    """The refreshing step is the node's newest checkpoint at position ``step``, below the tip: exported nowhere."""

    step: int


@attrs.frozen
class RefreshDeclined:
    """Not a refresh of this chain: the step ends differently; commit it as a step of its own."""

    at: int


@attrs.frozen
class ExportSegment:
    """Write the chain out as one segment of ``steps`` owned steps."""

    steps: int


@attrs.frozen
class DiscardChain:
    """The chain owns no step and never will: forget it (nothing is exported)."""


# ---- Data ---------------------------------------------------------------------------------------------------------


@attrs.frozen
class ChainData:
    """The chain's counters; replaced on every transition, never mutated."""

    # Steps owned by the chain. PENDING and ABANDONED imply 0; OPEN, EXTENDING, CLOSED and EXPORTED imply >= 1.
    steps: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    # Generations counted by ExtendTip that have not committed or dropped. OPEN implies 0; EXTENDING implies > 0.
    extenders: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    # Set exactly in CLOSED (and kept when a closed chain is exported).
    close_reason: CloseReason | None = None


@attrs.frozen
class ChainStatistics:
    """A frozen report of one chain for the session's debug view (reporting only, never for decisions)."""

    state: str
    steps: int
    extenders: int
    close_reason: str | None


def _check(state: State, chain: ChainData) -> str | None:
    """The (state, data) invariants, checked after every transition and on restore."""
    if state in (State.PENDING, State.ABANDONED) and chain.steps:
        return f"{state.name} owning {chain.steps} step(s)"
    if state not in (State.PENDING, State.ABANDONED) and not chain.steps:
        return f"{state.name} owning no step"
    if state is State.OPEN and chain.extenders:
        return f"OPEN with {chain.extenders} extender(s)"
    if state is State.EXTENDING and not chain.extenders:
        return "EXTENDING with no extender"
    if (state is State.CLOSED) != (chain.close_reason is not None) and state is not State.EXPORTED:
        return f"{state.name} with close_reason {chain.close_reason}"
    return None


# ---- Actions: the code behind the rows; guards that need the data live here --------------------------------------


def _position(chain: ChainData, at: int) -> None:
    """Refuse a step position the chain does not have."""
    if not 1 <= at <= chain.steps:
        raise Refused(f"step {at} is not one of the chain's {chain.steps} step(s)")


def _settled(chain: ChainData) -> State:
    """OPEN or EXTENDING, by whether anyone is still extending the tip."""
    return State.EXTENDING if chain.extenders else State.OPEN


def _request_open(state: State, chain: ChainData, event: ExtensionRequested) -> Goto:
    """Open chain: the tip is extended (counted), a lower step is forked from."""
    _position(chain, event.at)
    if event.at == chain.steps:
        return Goto(State.EXTENDING, evolve(chain, extenders=chain.extenders + 1), [ExtendTip(event.at)])
    return Goto(state, chain, [ForkAt(event.at)])


def _request_closed(state: State, chain: ChainData, event: ExtensionRequested) -> Goto:
    """Closed chain: its tip starts a new segment; a lower step can still be forked from."""
    _position(chain, event.at)
    if event.at == chain.steps:
        return Goto(state, chain, [StartNewSegment(chain.close_reason)])
    return Goto(state, chain, [ForkAt(event.at)])


def _leave(chain: ChainData) -> ChainData:
    """One counted generation ends; refuse if none is counted (the count never goes negative)."""
    if not chain.extenders:
        raise Refused("no generation is extending this chain")
    return evolve(chain, extenders=chain.extenders - 1)


def _commit_extending(state: State, chain: ChainData, event: ExtensionCommitted) -> Goto:
    """A counted generation commits: in place if the tip has not moved since its prepare, else as a fork."""
    _position(chain, event.at)
    left = _leave(chain)
    if event.at < chain.steps:
        return Goto(_settled(left), left, [ForkAt(event.at)])
    advanced = evolve(left, steps=chain.steps + 1)
    if event.close_reason is not None:
        closed = evolve(advanced, close_reason=event.close_reason)
        return Goto(State.CLOSED, closed, [TipAdvanced(advanced.steps)])
    return Goto(_settled(advanced), advanced, [TipAdvanced(advanced.steps)])


def _commit_closed(state: State, chain: ChainData, event: ExtensionCommitted) -> Goto:
    """A counted generation commits after a sibling closed the chain: the tip moved, so it forks."""
    _position(chain, event.at)
    if event.at == chain.steps:
        raise Refused("a closed chain's tip is never extended")
    return Goto(state, _leave(chain), [ForkAt(event.at)])


def _first_step(state: State, chain: ChainData, event: FirstStepCommitted) -> Goto:
    """The chain's first step: open, or closed at once when it cannot be extended."""
    started = ChainData(steps=1, close_reason=event.close_reason)
    return Goto(State.OPEN if event.close_reason is None else State.CLOSED, started, [TipAdvanced(1)])


def _abandon(state: State, chain: ChainData, event: GenerationDropped | ExportRequested) -> Goto:
    """A pending chain whose generation will never commit: nothing to export."""
    return Goto(State.ABANDONED, chain, [DiscardChain()])


def _drop(state: State, chain: ChainData, event: GenerationDropped) -> Goto:
    """A counted generation ends without committing."""
    left = _leave(chain)
    return Goto(state if state is State.CLOSED else _settled(left), left)


def _refresh(state: State, chain: ChainData, event: RefreshRequested) -> Goto:
    """The same answer as step ``at``: replace the tip, shadow a step below it, or decline (it ends differently)."""
    _position(chain, event.at)
    if event.at == chain.steps:
        if event.close_reason == chain.close_reason:
            return Goto(state, chain, [TipRefreshed(event.at)])
    elif event.close_reason is None:
        return Goto(state, chain, [StepShadowed(event.at)])
    return Goto(state, chain, [RefreshDeclined(event.at)])


def _export(state: State, chain: ChainData, event: ExportRequested) -> Goto:
    """Finalize: the chain becomes one segment."""
    return Goto(State.EXPORTED, chain, [ExportSegment(chain.steps)])


# ---- The table: the spec. Pairs not listed are illegal. -----------------------------------------------------------

TABLE = TransitionTable.build(
    machine="ChainMachine",
    states=State,
    events=EVENTS,
    initial=State.PENDING,
    policy=Policy.TRANSACTIONAL,
    check=_check,
    transitions=[
        # PENDING: waits for its one generation; forks pass through here within a single commit.
        on(
            State.PENDING, FirstStepCommitted, _first_step,
            Branch(State.OPEN, [TipAdvanced], when="extendable"),
            Branch(State.CLOSED, [TipAdvanced], when="close_reason"),
        ),
        on(State.PENDING, GenerationDropped, _abandon, Branch(State.ABANDONED, [DiscardChain])),
        on(State.PENDING, ExportRequested, _abandon, Branch(State.ABANDONED, [DiscardChain])),
        # OPEN: nobody extends the tip.
        on(
            State.OPEN, ExtensionRequested, _request_open,
            Branch(State.EXTENDING, [ExtendTip], when="at == steps"),
            Branch(State.OPEN, [ForkAt], when="at < steps"),
        ),
        on(State.OPEN, ExportRequested, _export, Branch(State.EXPORTED, [ExportSegment])),
        on(
            State.OPEN, RefreshRequested, _refresh,
            Branch(State.OPEN, [TipRefreshed], when="at == steps, same close_reason"),
            Branch(State.OPEN, [StepShadowed], when="at < steps, extendable"),
            Branch(State.OPEN, [RefreshDeclined], when="ends differently"),
        ),
        # EXTENDING: counted generations commit (in place while the tip has not moved) or drop.
        on(
            State.EXTENDING, ExtensionRequested, _request_open,
            Branch(State.EXTENDING, [ExtendTip], when="at == steps"),
            Branch(State.EXTENDING, [ForkAt], when="at < steps"),
        ),
        on(
            State.EXTENDING, ExtensionCommitted, _commit_extending,
            Branch(State.EXTENDING, [TipAdvanced], when="at == steps, extendable, others extending"),
            Branch(State.OPEN, [TipAdvanced], when="at == steps, extendable, last extender"),
            Branch(State.CLOSED, [TipAdvanced], when="at == steps, close_reason"),
            Branch(State.EXTENDING, [ForkAt], when="at < steps, others extending"),
            Branch(State.OPEN, [ForkAt], when="at < steps, last extender"),
        ),
        on(
            State.EXTENDING, GenerationDropped, _drop,
            Branch(State.EXTENDING, when="others extending"),
            Branch(State.OPEN, when="last extender"),
        ),
        on(State.EXTENDING, ExportRequested, _export, Branch(State.EXPORTED, [ExportSegment])),
        on(
            State.EXTENDING, RefreshRequested, _refresh,
            Branch(State.EXTENDING, [TipRefreshed], when="at == steps, same close_reason"),
            Branch(State.EXTENDING, [StepShadowed], when="at < steps, extendable"),
            Branch(State.EXTENDING, [RefreshDeclined], when="ends differently"),
        ),
        # CLOSED: the tip starts new segments; generations that were extending it fork or drop.
        on(
            State.CLOSED, ExtensionRequested, _request_closed,
            Branch(State.CLOSED, [StartNewSegment], when="at == steps"),
            Branch(State.CLOSED, [ForkAt], when="at < steps"),
        ),
        on(State.CLOSED, ExtensionCommitted, _commit_closed, Branch(State.CLOSED, [ForkAt], when="at < steps")),
        on(State.CLOSED, GenerationDropped, _drop, Branch(State.CLOSED, when="extenders > 0")),
        on(State.CLOSED, ExportRequested, _export, Branch(State.EXPORTED, [ExportSegment])),
        on(
            State.CLOSED, RefreshRequested, _refresh,
            Branch(State.CLOSED, [TipRefreshed], when="at == steps, same close_reason"),
            Branch(State.CLOSED, [StepShadowed], when="at < steps, extendable"),
            Branch(State.CLOSED, [RefreshDeclined], when="ends differently"),
        ),
    ],
)


@attrs.define(eq=False)
class ChainMachine(Machine):
    """One chain of a session; the session controller (proxy/) feeds it events and carries out its effects."""

    table = TABLE

    @classmethod
    def new(cls) -> ChainMachine:
        """A pending chain, owning nothing yet."""
        return cls(State.PENDING, ChainData())

    def statistics(self) -> ChainStatistics:
        """A frozen report for the debug view."""
        chain: ChainData = self._data
        reason = chain.close_reason.value if chain.close_reason is not None else None
        return ChainStatistics(self._state.name, chain.steps, chain.extenders, reason)


__all__ = [
    "State", "CloseReason", "ExtensionRequested", "ExtensionCommitted", "FirstStepCommitted", "GenerationDropped",
    "ExportRequested", "RefreshRequested", "EVENTS", "ExtendTip", "ForkAt", "StartNewSegment", "TipAdvanced",
    "TipRefreshed", "StepShadowed", "RefreshDeclined", "ExportSegment", "DiscardChain",
    "ChainData", "ChainStatistics", "TABLE", "ChainMachine",
]
