"""RolloutGate, level 2: hypothesis drives the real gate and a small independent model side by side.

The model is written from spec section 7, not from the gate's code: plain counters and a state name. Every rule
sends one event to the gate and compares the effects with what the model predicts; illegal events have rules of
their own (with preconditions, never ``assume``) that expect ``IllegalTransition`` and no change at all.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from statemachines.core import IllegalTransition
from statemachines.rollout_gate import (
    AbortInFlight,
    Admit,
    AdmitWaiters,
    AlreadyPaused,
    AlreadyPausing,
    AlreadyRunning,
    GenerationAbortAcknowledged,
    GenerationFinished,
    GenerationWantsToStart,
    PauseAcknowledged,
    PauseRequested,
    ResumeRefused,
    ResumeRequested,
    RolloutGate,
    Wait,
    WaiterCancelled,
)

VERSIONS = st.sampled_from([None, "v0", "v1", "v2"])


class GateModel:
    """What the gate should be, as counters: state name, epoch, version, in flight, waiting, aborted this pause."""

    def __init__(self) -> None:
        self.state, self.epoch, self.version = "RUNNING", 0, "v0"
        self.in_flight = self.waiting = self.aborted = 0

    def settle(self) -> list:
        """While pausing, the last in-flight answer completes the pause."""
        if self.state == "PAUSING" and self.in_flight == 0:
            self.state = "PAUSED"
            return [PauseAcknowledged(self.epoch, self.aborted, self.waiting)]
        return []


class RolloutGateVersusModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.gate = RolloutGate.new("v0")
        self.model = GateModel()
        self.last_epoch = 0

    def send(self, event, expected: list) -> None:
        assert self.gate.send(event) == expected

    def send_illegal(self, event) -> None:
        before = self.gate.snapshot()
        with pytest.raises(IllegalTransition):
            self.gate.send(event)
        assert self.gate.snapshot() == before

    @rule()
    def start(self):
        m = self.model
        if m.state == "RUNNING":
            m.in_flight += 1
            self.send(GenerationWantsToStart(), [Admit(m.epoch, m.version)])
        else:
            m.waiting += 1
            self.send(GenerationWantsToStart(), [Wait(m.epoch)])

    @precondition(lambda self: self.model.in_flight > 0)
    @rule()
    def finish(self):
        self.model.in_flight -= 1
        self.send(GenerationFinished(), self.model.settle())

    @precondition(lambda self: self.model.state == "PAUSING")
    @rule()
    def abort_acknowledged(self):
        m = self.model
        m.in_flight, m.waiting, m.aborted = m.in_flight - 1, m.waiting + 1, m.aborted + 1
        self.send(GenerationAbortAcknowledged(), m.settle())

    @precondition(lambda self: self.model.waiting > 0)
    @rule()
    def waiter_cancelled(self):
        self.model.waiting -= 1
        self.send(WaiterCancelled(), [])

    @rule()
    def pause(self):
        m = self.model
        if m.state == "PAUSING":
            self.send(PauseRequested(), [AlreadyPausing(m.epoch)])
        elif m.state == "PAUSED":
            self.send(PauseRequested(), [AlreadyPaused(m.epoch, m.waiting)])
        elif m.in_flight:
            m.state, m.aborted = "PAUSING", 0
            self.send(PauseRequested(), [AbortInFlight(m.in_flight, m.epoch)])
        else:
            m.state, m.aborted = "PAUSED", 0
            self.send(PauseRequested(), [PauseAcknowledged(m.epoch, 0, m.waiting)])

    @rule(version=VERSIONS)
    def resume(self, version):
        m = self.model
        if m.state == "PAUSED":
            m.state, m.epoch, m.aborted = "RUNNING", m.epoch + 1, 0
            m.version = version if version is not None else m.version
            admitted, m.in_flight, m.waiting = m.waiting, m.waiting, 0
            self.send(ResumeRequested(version), [AdmitWaiters(admitted, m.epoch, m.version)])
        elif m.state == "PAUSING":
            self.send(ResumeRequested(version), [ResumeRefused("a pause is in progress; resume after it returns")])
        elif version in (None, m.version):
            self.send(ResumeRequested(version), [AlreadyRunning(m.epoch, m.version)])
        else:
            self.send(ResumeRequested(version), [ResumeRefused("a new weight version needs a pause first")])

    @precondition(lambda self: self.model.in_flight == 0)
    @rule()
    def finish_with_nothing_in_flight_is_illegal(self):
        self.send_illegal(GenerationFinished())

    @precondition(lambda self: self.model.state != "PAUSING")
    @rule()
    def abort_acknowledged_outside_a_pause_is_illegal(self):
        self.send_illegal(GenerationAbortAcknowledged())

    @precondition(lambda self: self.model.waiting == 0)
    @rule()
    def waiter_cancelled_with_nobody_waiting_is_illegal(self):
        self.send_illegal(WaiterCancelled())

    @invariant()
    def gate_matches_the_model(self):
        m = self.model
        stats = self.gate.statistics()
        assert (stats.state, stats.epoch, stats.weight_version) == (m.state, m.epoch, m.version)
        assert (stats.in_flight, stats.waiting) == (m.in_flight, m.waiting)

    @invariant()
    def counts_are_never_negative(self):
        stats = self.gate.statistics()
        assert stats.in_flight >= 0 and stats.waiting >= 0

    @invariant()
    def paused_means_nothing_in_flight_and_pausing_means_something(self):
        stats = self.gate.statistics()
        assert stats.state != "PAUSED" or stats.in_flight == 0
        assert stats.state != "PAUSING" or stats.in_flight > 0

    @invariant()
    def running_means_nobody_waits(self):
        stats = self.gate.statistics()
        assert stats.state != "RUNNING" or stats.waiting == 0

    @invariant()
    def epoch_never_decreases(self):
        epoch = self.gate.statistics().epoch
        assert epoch >= self.last_epoch
        self.last_epoch = epoch


TestRolloutGateVersusModel = RolloutGateVersusModel.TestCase
TestRolloutGateVersusModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
