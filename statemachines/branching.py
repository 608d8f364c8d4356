"""The session's branching rule, once: where a generation's step attaches among the chains, and what a commit, a
drop, a TITO failure and a finalize tell the chains.

The running session (``proxy/trajectory/session.py``) and the model-checked worlds
(``statemachines/checking/session_world.py``, ``statemachines/checking/full_world.py``) all call these functions,
so the rule the explorer checks is the rule the proxy runs. The functions are pure: they talk to the chains only through a
:class:`ChainPort` (send one event to one chain and get its effects; make a new chain; forget a discarded one), which
the session implements over its ``ChainMachine`` objects and a world over the snapshots in its records. They never
read a chain's state: they act on the effects the ``ChainMachine`` returns (``statemachines/chain.py`` has the
theory of chains, forks and refreshes).

The rule, one function per moment of a generation's life:

- :func:`attach` (prepare, after the session admitted the generation): no base checkpoint -> a new pending chain
  (a new segment); else ``ExtensionRequested`` on the base's chain: ``ExtendTip`` (counted on that chain),
  ``ForkAt`` (it will commit into a new chain forked at its base) or ``StartNewSegment`` (the tip is closed: a new
  pending chain, with the close reason as the segment's boundary reason);
- :func:`restart_segment` (the incremental encode failed): the session's ``RestartSegment`` moves the generation to
  a new pending chain (leaving the chain it extended); without it (the session left ACTIVE) it is detached;
- :func:`commit` (after the session's ``AcceptCommit``): a refresh of the same answer over the same checkpoint
  position (:func:`same_checkpoint`) asks the refreshed step's chain (``RefreshRequested``): ``TipRefreshed`` or
  ``StepShadowed`` place the step there and release the generation's own chain; ``RefreshDeclined`` commits as
  usual. Usually: ``ExtensionCommitted`` (extending a tip) or ``FirstStepCommitted`` (a pending chain's first step)
  on the generation's chain, and a fork when the chain answers ``ForkAt`` (a sibling moved the tip first) or the
  generation forked at prepare: a new chain whose ``FirstStepCommitted`` places the step;
- :func:`release` (the generation ends without committing): on the session's ``ReleaseBranch``, the chain it was
  counted on or created hears ``GenerationDropped`` (a pending chain is discarded);
- :func:`export` (finalize, on the session's ``ExportSession``): ``ExportRequested`` to every chain: segments, and
  the pending chains discarded.

An answer the chain's table cannot give (a bug in a variant machine, say) raises :class:`UnexpectedAnswer`; the
worlds report it as a broken world, the session lets it propagate.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Generic, Protocol, TypeVar

import attrs

from statemachines import chain as chain_sm
from statemachines import session as session_sm

#: A chain, as the caller knows it (the session's chain object, a world's chain index).
C = TypeVar("C")
#: A base checkpoint, as the caller knows it (the session's ``Step``, a world's step id).
B = TypeVar("B")


class ChainPort(Protocol[C, B]):
    """What the rule needs from the caller's chains."""

    def send(self, chain: C, event: object) -> Sequence[object]:
        """Feed ``event`` to the chain's ``ChainMachine``; its effects (an illegal event raises, as ``send`` does)."""

    def new_chain(self, base: B | None) -> C:
        """A new chain (a fresh ``ChainMachine``) whose first step will extend ``base`` (None: a new segment)."""

    def forget(self, chain: C) -> None:
        """The chain answered ``DiscardChain``: it owns no step and never will; drop it."""


class UnexpectedAnswer(Exception):
    """A chain answered an event with effects its rule has no case for."""


class Mode(enum.Enum):
    """How a generation's step relates to the chains (what the base's chain said at prepare)."""

    NEW_SEGMENT = "full encode; commits the first step of its own pending chain"
    EXTEND_TIP = "extends a chain's tip; counted on that chain; commits in place unless a sibling moved the tip"
    FORK = "extends a checkpoint below a chain's tip; commits the first step of a new chain"


@attrs.frozen
class BranchClaim(Generic[C, B]):
    """Where a prepared generation's step will attach: what prepare decided, what commit and drop take back."""

    mode: Mode
    # The chain it is counted on (EXTEND_TIP) or created (NEW_SEGMENT); None for a fork, or once detached.
    chain: C | None
    # The checkpoint it extends (EXTEND_TIP, FORK) and that checkpoint's 1-based position in its chain; a new
    # segment extends none (None, 0).
    base: B | None = None
    at: int = 0
    # A new segment because the base's chain tip was closed: why (it becomes the segment's boundary reason).
    closed_tip: chain_sm.CloseReason | None = None


class Placed(enum.Enum):
    """How a committed step was placed."""

    EXTENDED = "the new tip of the chain whose tip it extended"
    FIRST_STEP = "the first step of the generation's pending chain"
    FORKED = "the first step of a new chain forked at its base (forked at prepare, or a sibling moved the tip)"
    TIP_REFRESHED = "a refresh: it replaces its chain's tip at the same position"
    SHADOWED = "a refresh below its chain's tip: the node's newest checkpoint, in no segment"


@attrs.frozen
class Placement(Generic[C]):
    """Where a committed step sits: its chain and 1-based position, and how it got there."""

    chain: C
    position: int
    placed: Placed

    @property
    def forked(self) -> bool:
        """The step started a new chain that shares its base's prefix."""
        return self.placed is Placed.FORKED

    @property
    def is_tip(self) -> bool:
        """The step is its chain's tip now (every placement but a shadowed refresh)."""
        return self.placed is not Placed.SHADOWED


@attrs.frozen
class Refresh(Generic[C]):
    """A committed step the new answer may refresh: its chain and its position there."""

    chain: C
    at: int


@attrs.frozen
class ExportedChain(Generic[C]):
    """A chain exported as one segment of ``steps`` owned steps."""

    chain: C
    steps: int


@attrs.frozen
class ChainExport(Generic[C]):
    """What finalize's export did to the chains: the segments, and the pending chains it discarded."""

    segments: tuple[ExportedChain[C], ...]
    discarded: tuple[C, ...]


def detached() -> BranchClaim:
    """A claim on no chain: a new segment whose chain was never created (its commit will be rejected)."""
    return BranchClaim(Mode.NEW_SEGMENT, None)


def _new_segment(port: ChainPort[C, B], closed_tip: chain_sm.CloseReason | None = None) -> BranchClaim[C, B]:
    """A new pending chain of the generation's own: its step starts a segment (full encode)."""
    return BranchClaim(Mode.NEW_SEGMENT, port.new_chain(None), closed_tip=closed_tip)


def attach(port: ChainPort[C, B], base: B | None, chain: C | None = None, at: int = 0) -> BranchClaim[C, B]:
    """Prepare: attach a generation whose nearest checkpoint is ``base`` (step ``at`` of ``chain``; None: there is
    none, a new segment)."""
    if base is None:
        return _new_segment(port)
    effects = port.send(chain, chain_sm.ExtensionRequested(at))
    for effect in effects:
        if isinstance(effect, chain_sm.ExtendTip):
            return BranchClaim(Mode.EXTEND_TIP, chain, base, at)
        if isinstance(effect, chain_sm.ForkAt):
            return BranchClaim(Mode.FORK, None, base, at)
        if isinstance(effect, chain_sm.StartNewSegment):
            return _new_segment(port, effect.reason)
    raise UnexpectedAnswer(f"ExtensionRequested({at}) answered {list(effects)}")


def restart_segment(
    port: ChainPort[C, B], claim: BranchClaim[C, B], session_answer: Iterable[object]
) -> BranchClaim[C, B]:
    """The incremental encode failed (``session_answer``: the session's effects for ``TitoFailed``): with
    ``RestartSegment`` the generation leaves the tip it extended for a new pending chain; otherwise the session left
    ACTIVE and the generation is detached (its commit will be rejected)."""
    if not any(isinstance(effect, session_sm.RestartSegment) for effect in session_answer):
        return detached()
    if claim.mode is Mode.EXTEND_TIP:
        _drop_from(port, claim.chain)
    return _new_segment(port)


def same_checkpoint(a: object, b: object) -> bool:
    """Does a committed answer over checkpoint position ``a`` refresh one over ``b``? Only over the same position:
    both full encodes (None), or both extending the same position (chain, step) of the same chain. Steps over
    different positions are different samples, even with the same answer (spec 5.2)."""
    return a == b


def commit(
    port: ChainPort[C, B],
    claim: BranchClaim[C, B],
    close: chain_sm.CloseReason | None,
    refresh: Refresh[C] | None = None,
) -> Placement[C]:
    """Commit (after the session's ``AcceptCommit``): place the step. ``close`` is set when the step cannot be
    extended; ``refresh``, the committed step of the same answer over the same checkpoint position, if any."""
    if refresh is not None:
        effects = port.send(refresh.chain, chain_sm.RefreshRequested(refresh.at, close))
        for effect in effects:
            if isinstance(effect, (chain_sm.TipRefreshed, chain_sm.StepShadowed)):
                # The same answer over the same checkpoint (an idempotent retry): the step takes the position of the
                # step it refreshes, and the generation's own chain bookkeeping ends without a step.
                _drop_from(port, claim.chain)
                placed = Placed.TIP_REFRESHED if isinstance(effect, chain_sm.TipRefreshed) else Placed.SHADOWED
                return Placement(refresh.chain, effect.step, placed)
        if not any(isinstance(effect, chain_sm.RefreshDeclined) for effect in effects):
            raise UnexpectedAnswer(f"RefreshRequested({refresh.at}) answered {list(effects)}")
    if claim.chain is None:
        chain, effects, placed = _fork(port, claim, close)
    else:
        chain = claim.chain
        if claim.mode is Mode.EXTEND_TIP:
            effects, placed = port.send(chain, chain_sm.ExtensionCommitted(claim.at, close)), Placed.EXTENDED
        else:
            effects, placed = port.send(chain, chain_sm.FirstStepCommitted(close)), Placed.FIRST_STEP
        if any(isinstance(effect, chain_sm.ForkAt) for effect in effects):
            # A sibling moved (or closed) the tip since this generation's prepare: commit into a new chain.
            chain, effects, placed = _fork(port, claim, close)
    for effect in effects:
        if isinstance(effect, chain_sm.TipAdvanced):
            return Placement(chain, effect.step, placed)
    raise UnexpectedAnswer(f"the commit's chain answered {list(effects)}")


def _fork(
    port: ChainPort[C, B], claim: BranchClaim[C, B], close: chain_sm.CloseReason | None
) -> tuple[C, Sequence[object], Placed]:
    """A new chain forked at the claim's base, whose first step is being committed: the chain and its answer."""
    chain = port.new_chain(claim.base)
    return chain, port.send(chain, chain_sm.FirstStepCommitted(close)), Placed.FORKED


def release(port: ChainPort[C, B], claim: BranchClaim[C, B], session_answer: Iterable[object]) -> bool:
    """The generation ends without committing (``session_answer``: the session's effects for its
    ``GenerationDropped``): on ``ReleaseBranch`` its chain lets it go. True when the branch was released (outside
    ACTIVE nothing is: the chains are frozen for, or gone after, the export)."""
    if not any(isinstance(effect, session_sm.ReleaseBranch) for effect in session_answer):
        return False
    _drop_from(port, claim.chain)
    return True


def _drop_from(port: ChainPort[C, B], chain: C | None) -> None:
    """The generation counted on (or the pending chain created for it by) ``chain`` ends without a step there."""
    if chain is None:
        return
    if any(isinstance(effect, chain_sm.DiscardChain) for effect in port.send(chain, chain_sm.GenerationDropped())):
        port.forget(chain)


def export(port: ChainPort[C, B], chains: Iterable[C]) -> ChainExport[C]:
    """Finalize (on the session's ``ExportSession``): every chain becomes a segment, or is discarded (pending)."""
    segments, discarded = [], []
    for chain in chains:
        for effect in port.send(chain, chain_sm.ExportRequested()):
            if isinstance(effect, chain_sm.ExportSegment):
                segments.append(ExportedChain(chain, effect.steps))
            elif isinstance(effect, chain_sm.DiscardChain):
                port.forget(chain)
                discarded.append(chain)
    return ChainExport(tuple(segments), tuple(discarded))


__all__ = [
    "BranchClaim", "ChainExport", "ChainPort", "ExportedChain", "Mode", "Placed", "Placement", "Refresh",
    "UnexpectedAnswer", "attach", "commit", "detached", "export", "release", "restart_segment", "same_checkpoint",
]
