"""SessionMachine: one per session; admits generations, accepts or rejects their commits, and runs finalize.

Theory of operation
-------------------
A session is one agent trajectory (spec section 2). Generations of a session run concurrently; the machine counts
them (``in_flight``: admitted, not yet committed or dropped) and the steps they committed (``steps``).

- ACTIVE: ``GenerationRequested`` admits a generation (``AdmitGeneration``) unless the session already holds
  ``max_steps`` steps, counting the generations in flight as reserved steps (``MaxStepsReached``; spec 5.5:
  refused before any generation, and the session is not finalized). ``CommitRequested`` accepts the commit
  (``AcceptCommit``); ``GenerationDropped`` (upstream failure, client gone) releases the generation's branch
  (``ReleaseBranch``): a failed generation commits nothing. ``TitoFailed`` tells the controller to move the
  generation to a new segment (``RestartSegment``).
- ``FinalizeRequested`` in ACTIVE: FINALIZING, and ``ExportSession``: the controller exports every chain and writes
  the segments to the store, then reports ``ExportCompleted`` (FINALIZED) or ``ExportFailed`` (EXPORT_FAILED).
- **A failed export never discards committed steps.** An export failure is a bug (or a store that could not be
  written), not something the rollout asked for: EXPORT_FAILED keeps the export (``KeepForRetry``), and the next
  ``FinalizeRequested`` runs it again (``RetryExport``, back to FINALIZING). Only an explicit ``AbortRequested`` in
  ACTIVE discards a session; an abort of a session whose export failed is refused like one of a finalizing session.
- Once the session has left ACTIVE, nothing can change its trajectory: a new generation is refused
  (``SessionClosed``), a commit is rejected (``RejectCommit``: the late generation gets a clear error and the
  stored data never changes, architecture invariant 5; field note 11: a straggler must not resurrect a session),
  a drop or a TITO failure has no effect. ``in_flight`` keeps counting so the controller can report stragglers.
- ``SegmentsDrained`` (the store handed out and removed every segment): FINALIZED -> DRAINED.
- ``AbortRequested`` discards an active session without export (ABORTED).
- ``IdleTimeout`` (the session saw no request for ``--session-idle-timeout``; the controller's clock decides that):
  an ACTIVE session with no generation in flight is finalized exactly as by ``FinalizeRequested`` (FINALIZING,
  ``ExportSession``); with generations in flight it stays ACTIVE (``StillGenerating``: an idle finalize never cuts
  a generation, and its commit would be rejected). In any other state it changes nothing: the session was already
  closed by the time the timer fired.

Idempotent events: finalize while FINALIZING (``AlreadyFinalizing``: wait for the export in progress) or once
FINALIZED or DRAINED (``AlreadyFinalized``); abort once ABORTED (``AlreadyAborted``); drained again. Refused, as
effects because they come from outside: finalize of an aborted session, abort of a finalizing one or of one whose
export failed (``FinalizeRefused``, ``AbortRefused``).

Illegal events are controller bugs (a count would go negative, an export result without an export): transactional,
``IllegalTransition`` with nothing changed.
"""

from __future__ import annotations

import attrs

from statemachines.core import Branch, Goto, Machine, MachineState, Policy, Refused, TransitionTable, evolve, on


class State(MachineState):
    """The session's states; each value is its one-line description."""

    ACTIVE = "generations are admitted and commit into the session's trie"
    FINALIZING = "finalize was requested; its segments are being exported; nothing is admitted or committed"
    EXPORT_FAILED = "its export failed; its steps are kept and the next finalize retries the export"
    FINALIZED = "its segments are in the store; late generations are rejected"
    DRAINED = "its segments were drained from the store; late generations are still rejected"
    ABORTED = "discarded without export (aborted while active); late generations are rejected"


# Why a closed session refuses: reported to the caller (the API answers with the code session_finalized).
_CLOSED_REASONS = {
    State.FINALIZING: "the session is being finalized",
    State.EXPORT_FAILED: "the session is being finalized (its export failed; finalize again to retry it)",
    State.FINALIZED: "the session was finalized",
    State.DRAINED: "the session was finalized and drained",
    State.ABORTED: "the session was aborted",
}


# ---- Events: what the session controller tells the session -------------------------------------------------------


@attrs.frozen
class GenerationRequested:
    """A chat-completions request of this session asks to start a generation (prepare)."""


@attrs.frozen
class TitoFailed:
    """An admitted generation's incremental encode failed; it needs a full encode in a new segment."""


@attrs.frozen
class CommitRequested:
    """An admitted generation finished upstream and asks to commit its step."""


@attrs.frozen
class GenerationDropped:
    """An admitted generation ended without committing: upstream failure, client gone, bad input."""


@attrs.frozen
class FinalizeRequested:
    """The rollout asks to finalize the session (POST /session/finalize)."""


@attrs.frozen
class ExportCompleted:
    """Every segment of the session was written to the store."""


@attrs.frozen
class ExportFailed:
    """Exporting or storing the segments failed."""

    reason: str


@attrs.frozen
class SegmentsDrained:
    """The store handed out and removed the last of the session's segments."""


@attrs.frozen
class AbortRequested:
    """The session is to be discarded without export."""


@attrs.frozen
class IdleTimeout:
    """The session saw no request for the idle timeout: finalize it unless a generation is in flight."""


EVENTS = (
    GenerationRequested,
    TitoFailed,
    CommitRequested,
    GenerationDropped,
    FinalizeRequested,
    ExportCompleted,
    ExportFailed,
    SegmentsDrained,
    AbortRequested,
    IdleTimeout,
)


# ---- Effects: what the session controller must do ----------------------------------------------------------------


@attrs.frozen
class AdmitGeneration:
    """Prepare the generation: walk the trie, attach its prompt, pick its base checkpoint."""

    in_flight: int


@attrs.frozen
class MaxStepsReached:
    """Refuse the generation before it starts (HTTP 400 max_steps_exceeded); the session stays active."""

    limit: int
    steps: int
    in_flight: int


@attrs.frozen
class SessionClosed:
    """Refuse the generation: the session is no longer active (HTTP 400 session_finalized)."""

    reason: str


@attrs.frozen
class RestartSegment:
    """Release the generation's branch and give it a new pending chain with a full encode."""


@attrs.frozen
class AcceptCommit:
    """Commit the step into the trie and its chain; it is the session's step number ``step``."""

    step: int


@attrs.frozen
class RejectCommit:
    """Reject the late commit (the caller gets session_finalized); change nothing."""

    reason: str


@attrs.frozen
class ReleaseBranch:
    """Release what the dropped generation held on its chain; nothing is committed."""


@attrs.frozen
class ExportSession:
    """Export every chain as segments and write them to the store, then report the outcome."""

    steps: int
    in_flight: int


@attrs.frozen
class AlreadyFinalizing:
    """Finalize while the export runs: wait for its outcome."""


@attrs.frozen
class AlreadyFinalized:
    """Finalize (or abort) after finalize: nothing changes; answer with the stored result."""

    steps: int


@attrs.frozen
class FinalizeRefused:
    """Finalize of an aborted session: nothing to export."""

    reason: str


@attrs.frozen
class Finalized:
    """The export is stored: every pending finalize call returns; the trie may be freed."""

    steps: int


@attrs.frozen
class DiscardSession:
    """Drop the session's trie and chains without export; every pending finalize call fails with the reason."""

    reason: str


@attrs.frozen
class KeepForRetry:
    """The export failed: keep it (every committed step) for a retry; pending finalize calls fail with the reason."""

    reason: str


@attrs.frozen
class RetryExport:
    """Run the kept export again and write its segments to the store, then report the outcome."""

    steps: int
    in_flight: int


@attrs.frozen
class StillGenerating:
    """An idle timeout while generations are in flight: the session stays active."""

    in_flight: int


@attrs.frozen
class AlreadyAborted:
    """Abort of an aborted session: nothing changes."""


@attrs.frozen
class AbortRefused:
    """Abort while finalizing or after a failed export: refused, the committed steps are kept."""

    reason: str


# ---- Data ---------------------------------------------------------------------------------------------------------


@attrs.frozen
class SessionData:
    """The session's counters; replaced on every transition, never mutated."""

    # DRESSAGE_PROXY_MAX_STEPS_PER_SESSION; None means unlimited. In ACTIVE, steps + in_flight <= max_steps.
    max_steps: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.ge(1)))
    # Committed steps; only ever increases, and only in ACTIVE.
    steps: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    # Admitted generations that have not committed or dropped (late ones included once the session left ACTIVE).
    in_flight: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    # Commits rejected because the session had left ACTIVE (reporting).
    rejected: int = attrs.field(default=0, validator=attrs.validators.ge(0))


@attrs.frozen
class SessionStatistics:
    """A frozen report for the debug view and /health (reporting only, never for decisions)."""

    state: str
    steps: int
    in_flight: int
    rejected: int
    max_steps: int | None


def _check(state: State, session: SessionData) -> str | None:
    """The (state, data) invariants, checked after every transition and on restore."""
    limit = session.max_steps
    if state is State.ACTIVE and limit is not None and session.steps + session.in_flight > limit:
        return f"ACTIVE with {session.steps} step(s) + {session.in_flight} in flight over the limit {limit}"
    if state is State.ACTIVE and session.rejected:
        return f"ACTIVE with {session.rejected} rejected commit(s)"
    return None


# ---- Actions: the code behind the rows; guards that need the data live here --------------------------------------


def _admit(state: State, session: SessionData, event: GenerationRequested) -> Goto:
    """Admit a generation unless the steps held and reserved reach the limit."""
    limit = session.max_steps
    if limit is not None and session.steps + session.in_flight >= limit:
        return Goto(state, session, [MaxStepsReached(limit, session.steps, session.in_flight)])
    admitted = evolve(session, in_flight=session.in_flight + 1)
    return Goto(state, admitted, [AdmitGeneration(admitted.in_flight)])


def _closed(state: State, session: SessionData, event: GenerationRequested) -> Goto:
    """A session that left ACTIVE admits nobody."""
    return Goto(state, session, [SessionClosed(_CLOSED_REASONS[state])])


def _leave(session: SessionData) -> SessionData:
    """One admitted generation ends; refuse if none is in flight (the count never goes negative)."""
    if not session.in_flight:
        raise Refused("no generation is in flight")
    return evolve(session, in_flight=session.in_flight - 1)


def _restart(state: State, session: SessionData, event: TitoFailed) -> Goto:
    """A TITO failure in ACTIVE: the generation moves to a new segment (still in flight)."""
    if not session.in_flight:
        raise Refused("no generation is in flight")
    return Goto(state, session, [RestartSegment()])


def _late_restart(state: State, session: SessionData, event: TitoFailed) -> Goto:
    """A TITO failure after the session left ACTIVE: nothing to move; the commit will be rejected."""
    if not session.in_flight:
        raise Refused("no generation is in flight")
    return Goto(state, session)


def _accept(state: State, session: SessionData, event: CommitRequested) -> Goto:
    """An active session accepts the commit: one more step."""
    left = _leave(session)
    committed = evolve(left, steps=left.steps + 1)
    return Goto(state, committed, [AcceptCommit(committed.steps)])


def _reject(state: State, session: SessionData, event: CommitRequested) -> Goto:
    """A session that left ACTIVE rejects every commit and changes nothing but its counters."""
    left = _leave(session)
    return Goto(state, evolve(left, rejected=left.rejected + 1), [RejectCommit(_CLOSED_REASONS[state])])


def _drop(state: State, session: SessionData, event: GenerationDropped) -> Goto:
    """A generation ends without committing; in ACTIVE its branch is released."""
    left = _leave(session)
    return Goto(state, left, [ReleaseBranch()] if state is State.ACTIVE else [])


def _finalize(state: State, session: SessionData, event: FinalizeRequested) -> Goto:
    """Start the export; from now on nothing is admitted or committed."""
    return Goto(State.FINALIZING, session, [ExportSession(session.steps, session.in_flight)])


def _already_finalizing(state: State, session: SessionData, event: FinalizeRequested) -> Goto:
    """A second finalize joins the export in progress."""
    return Goto(state, session, [AlreadyFinalizing()])


def _already_finalized(state: State, session: SessionData, event: FinalizeRequested | AbortRequested) -> Goto:
    """Finalize or abort after finalize: idempotent."""
    return Goto(state, session, [AlreadyFinalized(session.steps)])


def _finalize_refused(state: State, session: SessionData, event: FinalizeRequested) -> Goto:
    """Finalize of an aborted session."""
    return Goto(state, session, [FinalizeRefused("the session was aborted")])


def _export_completed(state: State, session: SessionData, event: ExportCompleted) -> Goto:
    """The segments are stored."""
    return Goto(State.FINALIZED, session, [Finalized(session.steps)])


def _export_failed(state: State, session: SessionData, event: ExportFailed) -> Goto:
    """The export failed: its steps are kept for a retry, and pending finalize calls fail with the reason."""
    return Goto(State.EXPORT_FAILED, session, [KeepForRetry(f"export failed: {event.reason}")])


def _retry_export(state: State, session: SessionData, event: FinalizeRequested) -> Goto:
    """Finalize after a failed export: run the kept export again."""
    return Goto(State.FINALIZING, session, [RetryExport(session.steps, session.in_flight)])


def _drained(state: State, session: SessionData, event: SegmentsDrained) -> Goto:
    """Every segment was drained from the store (idempotent)."""
    return Goto(State.DRAINED, session)


def _abort(state: State, session: SessionData, event: AbortRequested) -> Goto:
    """Discard an active session without export."""
    return Goto(State.ABORTED, session, [DiscardSession("the session was aborted")])


def _idle(state: State, session: SessionData, event: IdleTimeout) -> Goto:
    """Idle: finalize like FinalizeRequested, unless a generation is still in flight."""
    if session.in_flight:
        return Goto(state, session, [StillGenerating(session.in_flight)])
    return _finalize(state, session, FinalizeRequested())


def _idle_closed(state: State, session: SessionData, event: IdleTimeout) -> Goto:
    """An idle timer that fires after the session left ACTIVE: nothing to do."""
    return Goto(state, session)


def _already_aborted(state: State, session: SessionData, event: AbortRequested) -> Goto:
    """A second abort."""
    return Goto(state, session, [AlreadyAborted()])


def _abort_refused(state: State, session: SessionData, event: AbortRequested) -> Goto:
    """Abort while the export runs, or after it failed: refused, the committed steps are kept."""
    return Goto(state, session, [AbortRefused(_CLOSED_REASONS[state])])


# ---- The table: the spec. Pairs not listed are illegal. -----------------------------------------------------------

_LEFT_ACTIVE = (State.FINALIZING, State.EXPORT_FAILED, State.FINALIZED, State.DRAINED, State.ABORTED)

TABLE = TransitionTable.build(
    machine="SessionMachine",
    states=State,
    events=EVENTS,
    initial=State.ACTIVE,
    policy=Policy.TRANSACTIONAL,
    check=_check,
    transitions=[
        # ACTIVE: generations are admitted (up to the step limit), commit, drop; finalize starts the export.
        on(
            State.ACTIVE, GenerationRequested, _admit,
            Branch(State.ACTIVE, [AdmitGeneration], when="steps + in_flight < max_steps"),
            Branch(State.ACTIVE, [MaxStepsReached], when="steps + in_flight >= max_steps"),
        ),
        on(State.ACTIVE, TitoFailed, _restart, Branch(State.ACTIVE, [RestartSegment], when="in_flight > 0")),
        on(State.ACTIVE, CommitRequested, _accept, Branch(State.ACTIVE, [AcceptCommit], when="in_flight > 0")),
        on(State.ACTIVE, GenerationDropped, _drop, Branch(State.ACTIVE, [ReleaseBranch], when="in_flight > 0")),
        on(State.ACTIVE, FinalizeRequested, _finalize, Branch(State.FINALIZING, [ExportSession])),
        on(State.ACTIVE, AbortRequested, _abort, Branch(State.ABORTED, [DiscardSession])),
        on(
            State.ACTIVE, IdleTimeout, _idle,
            Branch(State.FINALIZING, [ExportSession], when="in_flight == 0"),
            Branch(State.ACTIVE, [StillGenerating], when="in_flight > 0"),
        ),
        # FINALIZING: the export runs; everything else is refused or rejected.
        on(State.FINALIZING, FinalizeRequested, _already_finalizing, Branch(State.FINALIZING, [AlreadyFinalizing])),
        on(State.FINALIZING, ExportCompleted, _export_completed, Branch(State.FINALIZED, [Finalized])),
        on(State.FINALIZING, ExportFailed, _export_failed, Branch(State.EXPORT_FAILED, [KeepForRetry])),
        on(State.FINALIZING, AbortRequested, _abort_refused, Branch(State.FINALIZING, [AbortRefused])),
        # EXPORT_FAILED: the steps are kept; finalize retries the export, abort is refused.
        on(State.EXPORT_FAILED, FinalizeRequested, _retry_export, Branch(State.FINALIZING, [RetryExport])),
        on(State.EXPORT_FAILED, AbortRequested, _abort_refused, Branch(State.EXPORT_FAILED, [AbortRefused])),
        # FINALIZED and DRAINED: idempotent finalize; draining.
        on(State.FINALIZED, FinalizeRequested, _already_finalized, Branch(State.FINALIZED, [AlreadyFinalized])),
        on(State.FINALIZED, AbortRequested, _already_finalized, Branch(State.FINALIZED, [AlreadyFinalized])),
        on(State.FINALIZED, SegmentsDrained, _drained, Branch(State.DRAINED)),
        on(State.DRAINED, FinalizeRequested, _already_finalized, Branch(State.DRAINED, [AlreadyFinalized])),
        on(State.DRAINED, AbortRequested, _already_finalized, Branch(State.DRAINED, [AlreadyFinalized])),
        on(State.DRAINED, SegmentsDrained, _drained, Branch(State.DRAINED)),
        # ABORTED: nothing to export.
        on(State.ABORTED, FinalizeRequested, _finalize_refused, Branch(State.ABORTED, [FinalizeRefused])),
        on(State.ABORTED, AbortRequested, _already_aborted, Branch(State.ABORTED, [AlreadyAborted])),
    ]
    # Every state that left ACTIVE: stragglers are refused, rejected, or simply counted out.
    + [on(state, GenerationRequested, _closed, Branch(state, [SessionClosed])) for state in _LEFT_ACTIVE]
    + [on(state, TitoFailed, _late_restart, Branch(state, when="in_flight > 0")) for state in _LEFT_ACTIVE]
    + [on(state, CommitRequested, _reject, Branch(state, [RejectCommit], when="in_flight > 0"))
       for state in _LEFT_ACTIVE]
    + [on(state, GenerationDropped, _drop, Branch(state, when="in_flight > 0")) for state in _LEFT_ACTIVE]
    + [on(state, IdleTimeout, _idle_closed, Branch(state)) for state in _LEFT_ACTIVE],
)


@attrs.define(eq=False)
class SessionMachine(Machine):
    """One session; the session controller (proxy/) feeds it events and carries out its effects."""

    table = TABLE

    @classmethod
    def new(cls, max_steps: int | None = None) -> SessionMachine:
        """An active session with no step, limited to ``max_steps`` steps (None: unlimited)."""
        return cls(State.ACTIVE, SessionData(max_steps=max_steps))

    def statistics(self) -> SessionStatistics:
        """A frozen report for the debug view."""
        session: SessionData = self._data
        return SessionStatistics(self._state.name, session.steps, session.in_flight, session.rejected,
                                 session.max_steps)


__all__ = [
    "State", "GenerationRequested", "TitoFailed", "CommitRequested", "GenerationDropped", "FinalizeRequested",
    "ExportCompleted", "ExportFailed", "SegmentsDrained", "AbortRequested", "IdleTimeout", "EVENTS",
    "AdmitGeneration", "MaxStepsReached", "SessionClosed", "RestartSegment", "AcceptCommit", "RejectCommit",
    "ReleaseBranch", "ExportSession", "AlreadyFinalizing", "AlreadyFinalized", "FinalizeRefused", "Finalized",
    "DiscardSession", "KeepForRetry", "RetryExport", "StillGenerating", "AlreadyAborted", "AbortRefused",
    "SessionData", "SessionStatistics", "TABLE", "SessionMachine",
]
