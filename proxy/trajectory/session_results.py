"""What the session's calls answer: a commit's outcome, finalize's job, wait or stored result, and the debug view."""

from __future__ import annotations

import attrs

from proxy.trajectory.export import SessionExport
from proxy.trajectory.prefix_trie import TrieStatistics


@attrs.frozen
class CommitResult:
    """What a commit did."""

    step_id: int
    chain_id: int
    # The assistant node already held a checkpoint with the same message (an idempotent retry refreshed it).
    refreshed: bool
    # The step started a new chain that shares its base's prefix (a sibling committed on the base first, or the
    # base was below a chain's tip).
    forked: bool
    # False when the step did not end with the end-of-turn token: a continuation will start a new segment.
    extendable: bool
    # A refresh that replaced its chain's tip: the step it replaced (exported no more; this step is, in its place).
    replaced_step: int | None = None
    # A refresh of a checkpoint its chain had continued past: this step is the node's newest checkpoint (later
    # continuations fork from it) but no segment holds it; the chain keeps the step it was continued from, until a
    # retry of the next turn built on this step replaces the chain's tip (the path then runs through this step).
    shadowed: bool = False


@attrs.frozen
class FinalizeResult:
    """What finalize stored (the same answer for every finalize call of the session)."""

    session_id: str
    segments: int
    steps: int
    trajectory_ids: tuple[str, ...]
    # Why the session was finalized (``FinalizeReason``'s value: ``requested`` or ``idle_timeout``).
    reason: str = "requested"


@attrs.frozen
class ExportJob:
    """Finalize started: export these chains, then report with export_completed or export_failed."""

    export: SessionExport
    # Steps the session committed (every one of them is in exactly one exported chain).
    steps: int


@attrs.frozen
class WaitForExport:
    """Finalize is already exporting: wait for its outcome."""


@attrs.frozen
class HeadView:
    """The session's most recent commit."""

    step_id: int
    chain_id: int
    generation_id: str
    finish_reason: str
    # Messages of its conversation (request plus answer), and its tokens.
    messages: int
    tokens: int


@attrs.frozen
class SessionDebugView:
    """A session at a glance (spec 5.5's debug view): reporting only."""

    session_id: str
    state: str
    instance_id: str | None
    steps: int
    in_flight: int
    rejected_commits: int
    max_steps: int | None
    head: HeadView | None
    # Chains that own a step (or are pending for an in-flight generation), and how many of them can be extended.
    branches: int
    open_branches: int
    # None once the trie was freed (finalized, aborted).
    trie: TrieStatistics | None
    segments: int | None
    # Why it was finalized (``requested``, ``idle_timeout``), once its segments are stored.
    finalize_reason: str | None = None
    # Approximate bytes its committed steps hold (proxy/trajectory/session_memory.py); 0 once freed.
    held_bytes: int = 0


__all__ = ["CommitResult", "ExportJob", "FinalizeResult", "HeadView", "SessionDebugView", "WaitForExport"]
