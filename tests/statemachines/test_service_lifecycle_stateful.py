"""ServiceLifecycle, level 2: hypothesis drives the real machine and a small independent model side by side.

The model is written from the issue's words (issue 15, item 4), not from the machine's code: a phase name, a count
of generations in flight, whether a grace timer and a flush are pending. Every rule sends one event and compares
the effects with what the model predicts; illegal events have rules of their own (with preconditions) that expect
``IllegalTransition`` and no change at all.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from statemachines.core import IllegalTransition
from statemachines.service_lifecycle import (
    AdmitGeneration,
    CutGenerations,
    FlushStore,
    GenerationEnded,
    GenerationWantsToStart,
    GraceExpired,
    RefuseGeneration,
    ServiceLifecycle,
    StartGraceTimer,
    StopAccepting,
    StopRequested,
    Stopped,
    StoreFlushed,
)


class LifecycleModel:
    """What the process should be: phase, generations in flight, the grace timer and the flush pending."""

    def __init__(self) -> None:
        self.phase = "SERVING"
        self.in_flight = 0
        self.timer = self.flush = False
        # Facts the issue asks for, checked as invariants.
        self.admitted_after_stop = 0
        self.stop_requested = False

    def end_one(self) -> list:
        self.in_flight -= 1
        if self.phase in ("DRAINING", "CLOSING") and self.in_flight == 0:
            self.phase, self.flush = "FLUSHING", True
            return [FlushStore()]
        return []


class LifecycleVersusModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.machine = ServiceLifecycle.new()
        self.model = LifecycleModel()

    def send(self, event, expected: list) -> None:
        assert self.machine.send(event) == expected

    def send_illegal(self, event) -> None:
        before = self.machine.snapshot()
        with pytest.raises(IllegalTransition):
            self.machine.send(event)
        assert self.machine.snapshot() == before

    @rule()
    def start(self):
        m = self.model
        if m.phase == "SERVING":
            m.in_flight += 1
            m.admitted_after_stop += m.stop_requested
            self.send(GenerationWantsToStart(), [AdmitGeneration()])
        else:
            self.send(GenerationWantsToStart(), [RefuseGeneration()])

    @precondition(lambda self: self.model.in_flight > 0)
    @rule()
    def end(self):
        self.send(GenerationEnded(), self.model.end_one())

    @rule()
    def stop(self):
        m = self.model
        first = not m.stop_requested
        m.stop_requested = True
        if first and m.in_flight:
            m.phase, m.timer = "DRAINING", True
            self.send(StopRequested(), [StopAccepting(), StartGraceTimer()])
        elif first:
            m.phase, m.flush = "FLUSHING", True
            self.send(StopRequested(), [StopAccepting(), FlushStore()])
        elif m.phase == "DRAINING":
            # A second signal cuts at once.
            m.phase = "CLOSING"
            self.send(StopRequested(), [CutGenerations(m.in_flight)])
        else:
            self.send(StopRequested(), [])

    @precondition(lambda self: self.model.timer)
    @rule()
    def grace_expires(self):
        m = self.model
        m.timer = False
        if m.phase == "DRAINING":
            m.phase = "CLOSING"
            self.send(GraceExpired(), [CutGenerations(m.in_flight)])
        else:
            self.send(GraceExpired(), [])

    @precondition(lambda self: self.model.flush)
    @rule()
    def store_flushed(self):
        m = self.model
        m.flush, m.phase = False, "STOPPED"
        self.send(StoreFlushed(), [Stopped()])

    @precondition(lambda self: self.model.in_flight == 0)
    @rule()
    def end_with_nothing_in_flight_is_illegal(self):
        self.send_illegal(GenerationEnded())

    @precondition(lambda self: not self.model.flush)
    @rule()
    def flushed_without_a_flush_is_illegal(self):
        self.send_illegal(StoreFlushed())

    @precondition(lambda self: not self.model.stop_requested)
    @rule()
    def grace_expired_before_any_stop_is_illegal(self):
        self.send_illegal(GraceExpired())

    @invariant()
    def machine_matches_the_model(self):
        stats = self.machine.statistics()
        assert (stats.state, stats.in_flight) == (self.model.phase, self.model.in_flight)

    @invariant()
    def nobody_is_admitted_after_the_stop(self):
        assert self.model.admitted_after_stop == 0

    @invariant()
    def stopped_means_nothing_in_flight(self):
        assert self.model.phase != "STOPPED" or self.machine.statistics().in_flight == 0


TestLifecycleVersusModel = LifecycleVersusModel.TestCase
TestLifecycleVersusModel.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
