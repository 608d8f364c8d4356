"""SessionMachine, level 1: every state x event pair with exact outcomes, the guards, and the named behaviours.

Expected outcomes are written out by hand. ``BUSY`` data: five steps allowed, two committed, generations in flight
(and, once the session left ACTIVE, one rejected straggler); extra cases cover the step limit and empty counts.
"""

from __future__ import annotations

import pytest

from statemachines.core import IllegalTransition, Snapshot, TableError
from statemachines.session import (
    EVENTS,
    TABLE,
    AbortRefused,
    AbortRequested,
    AcceptCommit,
    AdmitGeneration,
    AlreadyAborted,
    AlreadyFinalized,
    AlreadyFinalizing,
    CommitRequested,
    DiscardSession,
    ExportCompleted,
    ExportFailed,
    ExportSession,
    Finalized,
    FinalizeRefused,
    FinalizeRequested,
    GenerationDropped,
    GenerationRequested,
    IdleTimeout,
    KeepForRetry,
    MaxStepsReached,
    RejectCommit,
    ReleaseBranch,
    RestartSegment,
    RetryExport,
    SegmentsDrained,
    SessionClosed,
    SessionData,
    SessionMachine,
    SessionStatistics,
    State,
    StillGenerating,
    TitoFailed,
)

ACTIVE, FINALIZING, EXPORT_FAILED, FINALIZED, DRAINED, ABORTED = (
    State.ACTIVE, State.FINALIZING, State.EXPORT_FAILED, State.FINALIZED, State.DRAINED, State.ABORTED,
)
SAMPLE = {
    GenerationRequested: GenerationRequested(),
    TitoFailed: TitoFailed(),
    CommitRequested: CommitRequested(),
    GenerationDropped: GenerationDropped(),
    FinalizeRequested: FinalizeRequested(),
    ExportCompleted: ExportCompleted(),
    ExportFailed: ExportFailed("disk full"),
    SegmentsDrained: SegmentsDrained(),
    AbortRequested: AbortRequested(),
    IdleTimeout: IdleTimeout(),
}


def data(**changes) -> SessionData:
    """Limit 5, two steps, plus ``changes``."""
    return SessionData(**{"max_steps": 5, "steps": 2, **changes})


BUSY = {
    ACTIVE: data(in_flight=2),
    FINALIZING: data(in_flight=1, rejected=1),
    EXPORT_FAILED: data(in_flight=1, rejected=1),
    FINALIZED: data(in_flight=1, rejected=1),
    DRAINED: data(in_flight=1, rejected=1),
    ABORTED: data(in_flight=1, rejected=1),
}
WHY = {
    FINALIZING: "the session is being finalized",
    EXPORT_FAILED: "the session is being finalized (its export failed; finalize again to retry it)",
    FINALIZED: "the session was finalized",
    DRAINED: "the session was finalized and drained",
    ABORTED: "the session was aborted",
}
LATE = data(in_flight=1, rejected=1)
# (state, event type) -> (target, data, effects) from BUSY data; absent -> illegal, nothing changes.
EXPECTED = {
    (ACTIVE, GenerationRequested): (ACTIVE, data(in_flight=3), [AdmitGeneration(3)]),
    (ACTIVE, TitoFailed): (ACTIVE, data(in_flight=2), [RestartSegment()]),
    (ACTIVE, CommitRequested): (ACTIVE, data(steps=3, in_flight=1), [AcceptCommit(3)]),
    (ACTIVE, GenerationDropped): (ACTIVE, data(in_flight=1), [ReleaseBranch()]),
    (ACTIVE, FinalizeRequested): (FINALIZING, data(in_flight=2), [ExportSession(2, 2)]),
    (ACTIVE, AbortRequested): (ABORTED, data(in_flight=2), [DiscardSession("the session was aborted")]),
    # Idle with generations in flight (BUSY): the session stays active; the idle case is tested below.
    (ACTIVE, IdleTimeout): (ACTIVE, data(in_flight=2), [StillGenerating(2)]),
    (FINALIZING, FinalizeRequested): (FINALIZING, LATE, [AlreadyFinalizing()]),
    (FINALIZING, ExportCompleted): (FINALIZED, LATE, [Finalized(2)]),
    (FINALIZING, ExportFailed): (EXPORT_FAILED, LATE, [KeepForRetry("export failed: disk full")]),
    (FINALIZING, AbortRequested): (FINALIZING, LATE, [AbortRefused("the session is being finalized")]),
    (EXPORT_FAILED, FinalizeRequested): (FINALIZING, LATE, [RetryExport(2, 1)]),
    (EXPORT_FAILED, AbortRequested): (EXPORT_FAILED, LATE, [AbortRefused(WHY[EXPORT_FAILED])]),
    (FINALIZED, FinalizeRequested): (FINALIZED, LATE, [AlreadyFinalized(2)]),
    (FINALIZED, AbortRequested): (FINALIZED, LATE, [AlreadyFinalized(2)]),
    (FINALIZED, SegmentsDrained): (DRAINED, LATE, []),
    (DRAINED, FinalizeRequested): (DRAINED, LATE, [AlreadyFinalized(2)]),
    (DRAINED, AbortRequested): (DRAINED, LATE, [AlreadyFinalized(2)]),
    (DRAINED, SegmentsDrained): (DRAINED, LATE, []),
    (ABORTED, FinalizeRequested): (ABORTED, LATE, [FinalizeRefused("the session was aborted")]),
    (ABORTED, AbortRequested): (ABORTED, LATE, [AlreadyAborted()]),
}
# Stragglers in every state that left ACTIVE: refused, counted out, rejected.
for _state in (FINALIZING, EXPORT_FAILED, FINALIZED, DRAINED, ABORTED):
    EXPECTED[(_state, GenerationRequested)] = (_state, LATE, [SessionClosed(WHY[_state])])
    EXPECTED[(_state, TitoFailed)] = (_state, LATE, [])
    EXPECTED[(_state, CommitRequested)] = (_state, data(rejected=2), [RejectCommit(WHY[_state])])
    EXPECTED[(_state, GenerationDropped)] = (_state, data(rejected=1), [])
    EXPECTED[(_state, IdleTimeout)] = (_state, LATE, [])


def session_in(state: State, session: SessionData) -> SessionMachine:
    """A session restored in exactly this state."""
    return SessionMachine.from_snapshot(Snapshot(state, session))


def test_session_machine_table_declares_exactly_the_expected_pairs():
    assert set(TABLE.rows) == set(EXPECTED)
    assert set(TABLE.events) == set(SAMPLE) == set(EVENTS)


@pytest.mark.parametrize("state", list(State), ids=lambda s: s.name)
@pytest.mark.parametrize("event_type", EVENTS, ids=lambda e: e.__name__)
def test_session_machine_every_state_x_event(state, event_type):
    session = session_in(state, BUSY[state])
    before = session.snapshot()
    expected = EXPECTED.get((state, event_type))
    if expected is not None:
        target, after, effects = expected
        assert session.send(SAMPLE[event_type]) == effects
        assert session.snapshot() == Snapshot(target, after)
        return
    with pytest.raises(IllegalTransition) as info:
        session.send(SAMPLE[event_type])
    assert f"SessionMachine can't handle event type {event_type.__name__} when state={state.name}" in str(info.value)
    assert info.value.reason is None
    assert session.snapshot() == before


@pytest.mark.parametrize("state", list(State), ids=lambda s: s.name)
@pytest.mark.parametrize(
    "event", [TitoFailed(), CommitRequested(), GenerationDropped()], ids=lambda e: type(e).__name__
)
def test_session_machine_generation_events_with_nothing_in_flight_are_refused(state, event):
    session = session_in(state, data(rejected=0 if state is ACTIVE else 1))
    before = session.snapshot()
    with pytest.raises(IllegalTransition) as info:
        session.send(event)
    assert info.value.reason == "no generation is in flight"
    assert session.snapshot() == before


def test_session_machine_at_the_step_limit_refuses_before_generation_and_stays_active():
    # Two steps committed and one in flight reserve all three allowed steps.
    session = session_in(ACTIVE, SessionData(max_steps=3, steps=2, in_flight=1))
    before = session.snapshot()
    assert session.send(GenerationRequested()) == [MaxStepsReached(limit=3, steps=2, in_flight=1)]
    assert session.snapshot() == before
    # The reservation is released by a drop: the next request is admitted.
    assert session.send(GenerationDropped()) == [ReleaseBranch()]
    assert session.send(GenerationRequested()) == [AdmitGeneration(1)]


def test_session_machine_without_a_limit_admits_everyone():
    session = SessionMachine.new()
    for expected in range(1, 50):
        assert session.send(GenerationRequested()) == [AdmitGeneration(expected)]


def test_session_machine_commit_after_finalize_is_rejected_and_changes_no_step():
    session = SessionMachine.new(max_steps=None)
    session.send(GenerationRequested())
    session.send(GenerationRequested())
    assert session.send(CommitRequested()) == [AcceptCommit(1)]
    assert session.send(FinalizeRequested()) == [ExportSession(steps=1, in_flight=1)]
    assert session.send(CommitRequested()) == [RejectCommit("the session is being finalized")]
    assert session.send(ExportCompleted()) == [Finalized(1)]
    assert session.statistics() == SessionStatistics("FINALIZED", steps=1, in_flight=0, rejected=1, max_steps=None)


def test_session_machine_idle_timeout_finalizes_only_a_session_with_nothing_in_flight():
    session = SessionMachine.new(max_steps=None)
    session.send(GenerationRequested())
    # A generation in flight: the idle finalize waits (its commit would be rejected otherwise).
    assert session.send(IdleTimeout()) == [StillGenerating(1)]
    assert session.send(CommitRequested()) == [AcceptCommit(1)]
    # Idle: exactly what finalize does, so the export and everything after it is the same.
    assert session.send(IdleTimeout()) == [ExportSession(steps=1, in_flight=0)]
    assert session.send(FinalizeRequested()) == [AlreadyFinalizing()]
    assert session.send(IdleTimeout()) == []
    session.send(ExportCompleted())
    assert session.send(GenerationRequested()) == [SessionClosed("the session was finalized")]


def test_session_machine_finalize_is_idempotent_at_every_stage():
    session = SessionMachine.new()
    assert session.send(FinalizeRequested()) == [ExportSession(0, 0)]
    assert session.send(FinalizeRequested()) == [AlreadyFinalizing()]
    session.send(ExportCompleted())
    assert session.send(FinalizeRequested()) == [AlreadyFinalized(0)]
    session.send(SegmentsDrained())
    assert session.send(FinalizeRequested()) == [AlreadyFinalized(0)]
    assert session.send(GenerationRequested()) == [SessionClosed("the session was finalized and drained")]


def test_session_machine_failed_export_keeps_the_steps_and_finalize_retries_it():
    # A failed export discards nothing: no DiscardSession, the steps stay counted, abort is refused, and the next
    # finalize runs the export again, which can then complete.
    session = SessionMachine.new(max_steps=None)
    session.send(GenerationRequested())
    session.send(CommitRequested())
    assert session.send(FinalizeRequested()) == [ExportSession(steps=1, in_flight=0)]
    assert session.send(ExportFailed("OSError")) == [KeepForRetry("export failed: OSError")]
    assert session.send(AbortRequested()) == [AbortRefused(WHY[EXPORT_FAILED])]
    assert session.send(GenerationRequested()) == [SessionClosed(WHY[EXPORT_FAILED])]
    assert session.send(FinalizeRequested()) == [RetryExport(steps=1, in_flight=0)]
    assert session.send(FinalizeRequested()) == [AlreadyFinalizing()]
    assert session.send(ExportFailed("OSError")) == [KeepForRetry("export failed: OSError")]
    assert session.send(FinalizeRequested()) == [RetryExport(steps=1, in_flight=0)]
    assert session.send(ExportCompleted()) == [Finalized(1)]
    assert session.statistics() == SessionStatistics("FINALIZED", steps=1, in_flight=0, rejected=0, max_steps=None)


@pytest.mark.parametrize(
    "state, session, broken",
    [
        (ACTIVE, SessionData(max_steps=2, steps=2, in_flight=1), "over the limit 2"),
        (ACTIVE, SessionData(rejected=1), "ACTIVE with 1 rejected commit"),
    ],
)
def test_session_machine_from_snapshot_refuses_impossible_states(state, session, broken):
    with pytest.raises(TableError, match=broken):
        SessionMachine.from_snapshot(Snapshot(state, session))


def test_session_machine_counts_never_go_negative_and_the_limit_is_positive():
    with pytest.raises(ValueError):
        SessionData(in_flight=-1)
    with pytest.raises(ValueError):
        SessionData(max_steps=0)
