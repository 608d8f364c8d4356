"""A generation's side of a session, from prepare to its commit or drop: its opaque handle, what the session knows
of its step meanwhile, and the session's counters at each of its critical sections (the step journal records them).

Data only: :class:`~proxy.trajectory.session.Session` creates and changes these inside its critical sections.
"""

from __future__ import annotations

import attrs

from proxy.trajectory.boundaries import BoundaryReason
from proxy.trajectory.prefix_trie import FULL_ENCODE, EncodingSignature, TrieNode
from proxy.trajectory.session_chains import SessionChain
from proxy.trajectory.tokens import Step, TokenSpan
from statemachines import branching


@attrs.frozen
class Moment:
    """The session's counters just before one of a generation's critical sections (prepare, restart, commit): the
    step journal records them so a replay runs the critical sections of committed generations in their live order
    and hands out the ids they got live (``session_replay.py``)."""

    # Critical sections (prepares, restarts, commits) before this one: the replay's order.
    events: int
    # Generations prepared before (the generation id's counter) and the newest chain id.
    generations: int
    chains: int


@attrs.define(eq=False)
class PendingStep:
    """What the session knows of a generation's step from prepare to its commit or drop; reached only through the
    generation's handle."""

    # The session's n-th generation, and its id (``tokens.py:generation_id``).
    generation: int
    generation_id: str
    attach: TrieNode
    # Where its step will attach among the chains (the branching rule's decision at prepare).
    claim: branching.BranchClaim[SessionChain, Step]
    boundary_reason: BoundaryReason | None
    boundary_detail: str | None
    turn_id: str | None
    tito_failed: bool = False
    # The request's instance id: the session takes it when the step commits (a failed request leaves nothing).
    instance_id: str | None = None
    # The context tokens this step adds (set after tokenization), and the shared-encoding entry they are held in on
    # the attach node (its signature), given back if the generation fails.
    context: TokenSpan | None = None
    encoding: EncodingSignature | None = None
    # Committed or dropped: a handle ends exactly once (architecture invariant 4).
    finished: bool = False
    # The step it committed (None: not committed).
    step_id: int | None = None
    # The session's counters before its prepare, its restart (a TITO failure) and its commit (the step journal).
    prepared: Moment | None = None
    restarted: Moment | None = None
    committed: Moment | None = None
    # The newest checkpoint on the prompt's path at prepare, and its depth: the prompt's first ``depth`` messages
    # are that step's prompt and answer (by trie key), so its journal record keeps only the messages after them.
    prefix_step: int | None = None
    prefix_depth: int = 0


@attrs.frozen(eq=False)
class BranchHandle:
    """Opaque: what prepare hands a generation and commit or drop takes back. Never inspect it."""

    session_id: str
    generation_id: str
    _pending: PendingStep = attrs.field(repr=False)


__all__ = ["FULL_ENCODE", "BranchHandle", "EncodingSignature", "Moment", "PendingStep"]
