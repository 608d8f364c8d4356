"""SessionMachine, level 2: hypothesis drives the real session and a small independent model side by side.

The model is written from spec 4 and 5.5 (finalize is idempotent, late generations are rejected, the step limit
counts reservations): a phase name and counters. Illegal events (counts that would go negative, export results
without an export, a drain before finalize) have rules of their own that expect ``IllegalTransition``.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from statemachines.core import IllegalTransition
from statemachines.session import (
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
    SessionMachine,
    StillGenerating,
    TitoFailed,
)

WHY = {
    "FINALIZING": "the session is being finalized",
    "EXPORT_FAILED": "the session is being finalized (its export failed; finalize again to retry it)",
    "FINALIZED": "the session was finalized",
    "DRAINED": "the session was finalized and drained",
    "ABORTED": "the session was aborted",
}


class SessionVersusModel(RuleBasedStateMachine):
    @initialize(limit=st.sampled_from([None, 1, 2, 4]))
    def start(self, limit):
        self.session = SessionMachine.new(limit)
        self.state, self.limit = "ACTIVE", limit
        self.steps = self.in_flight = self.rejected = 0
        self.steps_when_closed: int | None = None

    def send(self, event, expected: list) -> None:
        assert self.session.send(event) == expected

    def send_illegal(self, event) -> None:
        before = self.session.snapshot()
        with pytest.raises(IllegalTransition):
            self.session.send(event)
        assert self.session.snapshot() == before

    @rule()
    def request(self):
        if self.state != "ACTIVE":
            self.send(GenerationRequested(), [SessionClosed(WHY[self.state])])
        elif self.limit is not None and self.steps + self.in_flight >= self.limit:
            self.send(GenerationRequested(), [MaxStepsReached(self.limit, self.steps, self.in_flight)])
        else:
            self.in_flight += 1
            self.send(GenerationRequested(), [AdmitGeneration(self.in_flight)])

    @precondition(lambda self: self.in_flight > 0)
    @rule()
    def tito_failed(self):
        self.send(TitoFailed(), [RestartSegment()] if self.state == "ACTIVE" else [])

    @precondition(lambda self: self.in_flight > 0)
    @rule()
    def commit(self):
        self.in_flight -= 1
        if self.state == "ACTIVE":
            self.steps += 1
            self.send(CommitRequested(), [AcceptCommit(self.steps)])
        else:
            self.rejected += 1
            self.send(CommitRequested(), [RejectCommit(WHY[self.state])])

    @precondition(lambda self: self.in_flight > 0)
    @rule()
    def drop(self):
        self.in_flight -= 1
        self.send(GenerationDropped(), [ReleaseBranch()] if self.state == "ACTIVE" else [])

    @rule()
    def finalize(self):
        if self.state == "ACTIVE":
            self.state, self.steps_when_closed = "FINALIZING", self.steps
            self.send(FinalizeRequested(), [ExportSession(self.steps, self.in_flight)])
        elif self.state == "FINALIZING":
            self.send(FinalizeRequested(), [AlreadyFinalizing()])
        elif self.state == "EXPORT_FAILED":
            self.state = "FINALIZING"
            self.send(FinalizeRequested(), [RetryExport(self.steps, self.in_flight)])
        elif self.state == "ABORTED":
            self.send(FinalizeRequested(), [FinalizeRefused("the session was aborted")])
        else:
            self.send(FinalizeRequested(), [AlreadyFinalized(self.steps)])

    @rule()
    def idle_timeout(self):
        if self.state == "ACTIVE" and self.in_flight:
            self.send(IdleTimeout(), [StillGenerating(self.in_flight)])
        elif self.state == "ACTIVE":
            self.state, self.steps_when_closed = "FINALIZING", self.steps
            self.send(IdleTimeout(), [ExportSession(self.steps, 0)])
        else:
            self.send(IdleTimeout(), [])

    @precondition(lambda self: self.state == "FINALIZING")
    @rule()
    def export_completed(self):
        self.state = "FINALIZED"
        self.send(ExportCompleted(), [Finalized(self.steps)])

    @precondition(lambda self: self.state == "FINALIZING")
    @rule()
    def export_failed(self):
        # The steps are kept (no DiscardSession): the next finalize retries the export.
        self.state = "EXPORT_FAILED"
        self.send(ExportFailed("boom"), [KeepForRetry("export failed: boom")])

    @precondition(lambda self: self.state in ("FINALIZED", "DRAINED"))
    @rule()
    def drained(self):
        self.state = "DRAINED"
        self.send(SegmentsDrained(), [])

    @rule()
    def abort(self):
        if self.state == "ACTIVE":
            self.state, self.steps_when_closed = "ABORTED", self.steps
            self.send(AbortRequested(), [DiscardSession("the session was aborted")])
        elif self.state in ("FINALIZING", "EXPORT_FAILED"):
            self.send(AbortRequested(), [AbortRefused(WHY[self.state])])
        elif self.state == "ABORTED":
            self.send(AbortRequested(), [AlreadyAborted()])
        else:
            self.send(AbortRequested(), [AlreadyFinalized(self.steps)])

    # -- illegal events --------------------------------------------------------------------------------------------

    @precondition(lambda self: self.in_flight == 0)
    @rule(event=st.sampled_from([TitoFailed(), CommitRequested(), GenerationDropped()]))
    def generation_event_with_nothing_in_flight_is_illegal(self, event):
        self.send_illegal(event)

    @precondition(lambda self: self.state != "FINALIZING")
    @rule(event=st.sampled_from([ExportCompleted(), ExportFailed("x")]))
    def export_result_without_an_export_is_illegal(self, event):
        self.send_illegal(event)

    @precondition(lambda self: self.state not in ("FINALIZED", "DRAINED"))
    @rule()
    def drain_before_finalize_is_illegal(self):
        self.send_illegal(SegmentsDrained())

    # -- invariants ------------------------------------------------------------------------------------------------

    @invariant()
    def session_matches_the_model(self):
        stats = self.session.statistics()
        assert (stats.state, stats.steps, stats.in_flight, stats.rejected, stats.max_steps) == (
            self.state, self.steps, self.in_flight, self.rejected, self.limit,
        )

    @invariant()
    def active_session_never_exceeds_its_step_limit(self):
        stats = self.session.statistics()
        assert stats.state != "ACTIVE" or stats.max_steps is None or stats.steps + stats.in_flight <= stats.max_steps

    @invariant()
    def no_step_is_committed_after_the_session_left_active(self):
        assert self.steps_when_closed is None or self.session.statistics().steps == self.steps_when_closed


TestSessionVersusModel = SessionVersusModel.TestCase
TestSessionVersusModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
