"""RolloutGate, level 1: every state x event pair with exact outcomes, and the named behaviours of spec section 7.

The expected outcomes below are written out by hand (they are not read from the table), for two kinds of data:
"busy" (several generations in flight or waiting) and "empty" (the fewest the state allows), so every guard is
exercised on both sides.
"""

from __future__ import annotations

import pytest

from statemachines.core import IllegalTransition, Snapshot, TableError
from statemachines.rollout_gate import (
    EVENTS,
    TABLE,
    AbortInFlight,
    Admit,
    AdmitWaiters,
    AlreadyPaused,
    AlreadyPausing,
    AlreadyRunning,
    GateData,
    GateStatistics,
    GenerationAbortAcknowledged,
    GenerationFinished,
    GenerationWantsToStart,
    PauseAcknowledged,
    PauseRequested,
    ResumeRefused,
    ResumeRequested,
    RolloutGate,
    State,
    Wait,
    WaiterCancelled,
    tell,
)

RUNNING, PAUSING, PAUSED = State.RUNNING, State.PAUSING, State.PAUSED
# One instance per event type, as the matrix sends them.
SAMPLE = {
    PauseRequested: PauseRequested(),
    ResumeRequested: ResumeRequested("v4"),
    GenerationWantsToStart: GenerationWantsToStart(),
    GenerationFinished: GenerationFinished(),
    GenerationAbortAcknowledged: GenerationAbortAcknowledged(),
    WaiterCancelled: WaiterCancelled(),
}
REFUSED_NEW_VERSION = ResumeRefused("a new weight version needs a pause first")
REFUSED_PAUSING = ResumeRefused("a pause is in progress; resume after it returns")


def data(**changes) -> GateData:
    """Epoch 3, version v3, plus ``changes``."""
    return GateData(**{"epoch": 3, "weight_version": "v3", **changes})


START = {
    "busy": {RUNNING: data(in_flight=2), PAUSING: data(in_flight=2, waiting=1, aborted=1), PAUSED: data(waiting=2)},
    "empty": {RUNNING: data(), PAUSING: data(in_flight=1), PAUSED: data()},
}
# (kind, state, event type) -> (target, data, effects); absent -> illegal (raises, nothing changes).
EXPECTED = {
    ("busy", RUNNING, PauseRequested): (PAUSING, data(in_flight=2), [AbortInFlight(2, 3)]),
    ("busy", RUNNING, ResumeRequested): (RUNNING, data(in_flight=2), [REFUSED_NEW_VERSION]),
    ("busy", RUNNING, GenerationWantsToStart): (RUNNING, data(in_flight=3), [Admit(3, "v3")]),
    ("busy", RUNNING, GenerationFinished): (RUNNING, data(in_flight=1), []),
    ("busy", PAUSING, PauseRequested): (PAUSING, data(in_flight=2, waiting=1, aborted=1), [AlreadyPausing(3)]),
    ("busy", PAUSING, ResumeRequested): (PAUSING, data(in_flight=2, waiting=1, aborted=1), [REFUSED_PAUSING]),
    ("busy", PAUSING, GenerationWantsToStart): (PAUSING, data(in_flight=2, waiting=2, aborted=1), [Wait(3)]),
    ("busy", PAUSING, GenerationFinished): (PAUSING, data(in_flight=1, waiting=1, aborted=1), []),
    ("busy", PAUSING, GenerationAbortAcknowledged): (PAUSING, data(in_flight=1, waiting=2, aborted=2), []),
    ("busy", PAUSING, WaiterCancelled): (PAUSING, data(in_flight=2, waiting=0, aborted=1), []),
    ("busy", PAUSED, PauseRequested): (PAUSED, data(waiting=2), [AlreadyPaused(3, 2)]),
    ("busy", PAUSED, ResumeRequested): (RUNNING, GateData(4, "v4", in_flight=2), [AdmitWaiters(2, 4, "v4")]),
    ("busy", PAUSED, GenerationWantsToStart): (PAUSED, data(waiting=3), [Wait(3)]),
    ("busy", PAUSED, WaiterCancelled): (PAUSED, data(waiting=1), []),
    ("empty", RUNNING, PauseRequested): (PAUSED, data(), [PauseAcknowledged(3, aborted=0, waiting=0)]),
    ("empty", RUNNING, ResumeRequested): (RUNNING, data(), [REFUSED_NEW_VERSION]),
    ("empty", RUNNING, GenerationWantsToStart): (RUNNING, data(in_flight=1), [Admit(3, "v3")]),
    ("empty", PAUSING, PauseRequested): (PAUSING, data(in_flight=1), [AlreadyPausing(3)]),
    ("empty", PAUSING, ResumeRequested): (PAUSING, data(in_flight=1), [REFUSED_PAUSING]),
    ("empty", PAUSING, GenerationWantsToStart): (PAUSING, data(in_flight=1, waiting=1), [Wait(3)]),
    ("empty", PAUSING, GenerationFinished): (PAUSED, data(), [PauseAcknowledged(3, aborted=0, waiting=0)]),
    ("empty", PAUSING, GenerationAbortAcknowledged): (
        PAUSED, data(waiting=1, aborted=1), [PauseAcknowledged(3, aborted=1, waiting=1)],
    ),
    ("empty", PAUSED, PauseRequested): (PAUSED, data(), [AlreadyPaused(3, 0)]),
    ("empty", PAUSED, ResumeRequested): (RUNNING, GateData(4, "v4"), [AdmitWaiters(0, 4, "v4")]),
    ("empty", PAUSED, GenerationWantsToStart): (PAUSED, data(waiting=1), [Wait(3)]),
}
# The pairs that are legal in the table at all (a refused guard with "empty" data is still a declared row).
LEGAL_PAIRS = {(state, event) for (_, state, event) in EXPECTED}
# Illegal with "empty" data only because a count would go negative: the reason is in the message.
GUARD_REASONS = {
    (RUNNING, GenerationFinished): "no generation is in flight",
    (PAUSING, WaiterCancelled): "no generation is waiting",
    (PAUSED, WaiterCancelled): "no generation is waiting",
}


def gate_in(state: State, gate: GateData) -> RolloutGate:
    """A gate restored in exactly this state."""
    return RolloutGate.from_snapshot(Snapshot(state, gate))


def test_rollout_gate_table_declares_exactly_the_expected_pairs():
    assert set(TABLE.rows) == LEGAL_PAIRS
    assert set(TABLE.events) == set(SAMPLE) == set(EVENTS)


@pytest.mark.parametrize("kind", ["busy", "empty"])
@pytest.mark.parametrize("state", list(State), ids=lambda s: s.name)
@pytest.mark.parametrize("event_type", EVENTS, ids=lambda e: e.__name__)
def test_rollout_gate_every_state_x_event(kind, state, event_type):
    gate = gate_in(state, START[kind][state])
    before = gate.snapshot()
    expected = EXPECTED.get((kind, state, event_type))
    if expected is not None:
        target, after, effects = expected
        assert gate.send(SAMPLE[event_type]) == effects
        assert gate.snapshot() == Snapshot(target, after)
        return
    # Illegal: IllegalTransition naming the pair; transactional, so state and counts are unchanged.
    with pytest.raises(IllegalTransition) as info:
        gate.send(SAMPLE[event_type])
    assert f"RolloutGate can't handle event type {event_type.__name__} when state={state.name}" in str(info.value)
    # A missing pair has no reason; a declared row whose guard refused says why.
    expected_reason = GUARD_REASONS.get((state, event_type)) if kind == "empty" else None
    assert info.value.reason == expected_reason
    assert gate.snapshot() == before


def test_rollout_gate_new_is_RUNNING_at_epoch_0_with_the_configured_version():
    assert RolloutGate.new("v0").snapshot() == Snapshot(RUNNING, GateData(epoch=0, weight_version="v0"))
    assert RolloutGate.new().snapshot().data.weight_version is None


def test_rollout_gate_start_in_RUNNING_admits_under_the_current_epoch_and_version():
    gate = RolloutGate.new("v0")
    assert gate.send(GenerationWantsToStart()) == [Admit(epoch=0, weight_version="v0")]
    assert gate.statistics() == GateStatistics("RUNNING", 0, "v0", in_flight=1, waiting=0)


def test_rollout_gate_pause_in_RUNNING_with_inflight_aborts():
    gate = RolloutGate.new("v0")
    gate.send(GenerationWantsToStart())
    gate.send(GenerationWantsToStart())
    assert gate.send(PauseRequested()) == [AbortInFlight(count=2, epoch=0)]
    assert gate.statistics().state == "PAUSING"


def test_rollout_gate_pause_in_RUNNING_without_inflight_is_acknowledged_at_once():
    gate = RolloutGate.new("v0")
    assert gate.send(PauseRequested()) == [PauseAcknowledged(epoch=0, aborted=0, waiting=0)]
    assert gate.statistics().state == "PAUSED"


def test_rollout_gate_start_in_PAUSING_waits_and_is_not_counted_in_flight():
    gate = RolloutGate.new("v0")
    gate.send(GenerationWantsToStart())
    gate.send(PauseRequested())
    assert gate.send(GenerationWantsToStart()) == [Wait(epoch=0)]
    assert gate.statistics() == GateStatistics("PAUSING", 0, "v0", in_flight=1, waiting=1)


def test_rollout_gate_pause_is_acknowledged_only_by_the_last_in_flight_answer():
    gate = RolloutGate.new("v0")
    for _ in range(3):
        gate.send(GenerationWantsToStart())
    gate.send(PauseRequested())
    assert gate.send(GenerationAbortAcknowledged()) == []
    assert gate.send(GenerationFinished()) == []
    assert gate.statistics().state == "PAUSING"
    # The third answer completes the pause: two generations were interrupted, and they wait.
    assert gate.send(GenerationAbortAcknowledged()) == [PauseAcknowledged(epoch=0, aborted=2, waiting=2)]
    assert gate.statistics() == GateStatistics("PAUSED", 0, "v0", in_flight=0, waiting=2)


def test_rollout_gate_pause_in_PAUSING_is_idempotent_and_the_caller_waits_for_the_ack():
    gate = RolloutGate.new("v0")
    gate.send(GenerationWantsToStart())
    gate.send(PauseRequested())
    before = gate.snapshot()
    assert gate.send(PauseRequested()) == [AlreadyPausing(epoch=0)]
    assert gate.snapshot() == before
    # The one acknowledgement answers both pause calls.
    assert gate.send(GenerationAbortAcknowledged()) == [PauseAcknowledged(epoch=0, aborted=1, waiting=1)]


def test_rollout_gate_pause_in_PAUSED_is_idempotent_and_returns_at_once():
    gate = RolloutGate.new("v0")
    gate.send(PauseRequested())
    gate.send(GenerationWantsToStart())
    before = gate.snapshot()
    assert gate.send(PauseRequested()) == [AlreadyPaused(epoch=0, waiting=1)]
    assert gate.snapshot() == before


def test_rollout_gate_resume_in_PAUSED_bumps_epoch_sets_version_and_admits_every_waiter():
    gate = RolloutGate.new("v0")
    gate.send(GenerationWantsToStart())
    gate.send(PauseRequested())
    gate.send(GenerationAbortAcknowledged())
    gate.send(GenerationWantsToStart())
    assert gate.send(ResumeRequested("v1")) == [AdmitWaiters(count=2, epoch=1, weight_version="v1")]
    # The admitted waiters are in flight at once, under the new epoch.
    assert gate.statistics() == GateStatistics("RUNNING", 1, "v1", in_flight=2, waiting=0)
    assert gate.send(GenerationWantsToStart()) == [Admit(epoch=1, weight_version="v1")]


def test_rollout_gate_resume_in_PAUSED_without_version_keeps_the_version():
    gate = RolloutGate.new("v0")
    gate.send(PauseRequested())
    assert gate.send(ResumeRequested()) == [AdmitWaiters(count=0, epoch=1, weight_version="v0")]


@pytest.mark.parametrize("version", [None, "v0"])
def test_rollout_gate_resume_in_RUNNING_is_a_noop_without_epoch_bump(version):
    gate = RolloutGate.new("v0")
    gate.send(GenerationWantsToStart())
    before = gate.snapshot()
    assert gate.send(ResumeRequested(version)) == [AlreadyRunning(epoch=0, weight_version="v0")]
    assert gate.snapshot() == before


def test_rollout_gate_resume_in_RUNNING_with_a_new_version_is_refused():
    gate = RolloutGate.new("v0")
    before = gate.snapshot()
    assert gate.send(ResumeRequested("v1")) == [REFUSED_NEW_VERSION]
    assert gate.snapshot() == before


def test_rollout_gate_resume_in_PAUSING_is_refused_and_the_pause_goes_on():
    gate = RolloutGate.new("v0")
    gate.send(GenerationWantsToStart())
    gate.send(PauseRequested())
    assert gate.send(ResumeRequested("v1")) == [REFUSED_PAUSING]
    assert gate.send(GenerationFinished()) == [PauseAcknowledged(epoch=0, aborted=0, waiting=0)]


def test_rollout_gate_resumed_waiters_are_aborted_by_an_immediate_second_pause():
    # Resume admits waiters before any of them runs; a pause right after must count and abort them.
    gate = RolloutGate.new("v0")
    gate.send(PauseRequested())
    gate.send(GenerationWantsToStart())
    gate.send(GenerationWantsToStart())
    gate.send(ResumeRequested("v1"))
    assert gate.send(PauseRequested()) == [AbortInFlight(count=2, epoch=1)]


def test_rollout_gate_cancelled_waiter_is_not_admitted_by_resume():
    gate = RolloutGate.new("v0")
    gate.send(PauseRequested())
    gate.send(GenerationWantsToStart())
    gate.send(GenerationWantsToStart())
    assert gate.send(WaiterCancelled()) == []
    assert gate.send(ResumeRequested("v1")) == [AdmitWaiters(count=1, epoch=1, weight_version="v1")]


def test_rollout_gate_abort_ack_in_RUNNING_is_illegal_and_changes_nothing():
    gate = RolloutGate.new("v0")
    gate.send(GenerationWantsToStart())
    before = gate.snapshot()
    with pytest.raises(IllegalTransition, match="GenerationAbortAcknowledged when state=RUNNING"):
        gate.send(GenerationAbortAcknowledged())
    assert gate.snapshot() == before


def test_rollout_gate_counts_never_go_negative():
    with pytest.raises(ValueError):
        GateData(in_flight=-1)
    gate = RolloutGate.new("v0")
    with pytest.raises(IllegalTransition, match="no generation is in flight"):
        gate.send(GenerationFinished())
    assert gate.statistics().in_flight == 0


@pytest.mark.parametrize(
    "state, gate, broken",
    [
        (PAUSED, GateData(in_flight=1), "PAUSED with 1 in flight"),
        (PAUSING, GateData(waiting=1), "PAUSING with nothing in flight"),
        (RUNNING, GateData(waiting=1), "RUNNING with 1 waiting"),
    ],
)
def test_rollout_gate_from_snapshot_refuses_impossible_states(state, gate, broken):
    with pytest.raises(TableError, match=broken):
        RolloutGate.from_snapshot(Snapshot(state, gate))


def test_rollout_gate_snapshot_is_frozen_hashable_and_restores_the_same_gate():
    gate = RolloutGate.new("v0")
    gate.send(GenerationWantsToStart())
    gate.send(PauseRequested())
    snapshot = gate.snapshot()
    assert {snapshot: 1}[Snapshot(PAUSING, GateData(weight_version="v0", in_flight=1))] == 1
    restored = RolloutGate.from_snapshot(snapshot)
    assert restored.send(GenerationAbortAcknowledged()) == gate.send(GenerationAbortAcknowledged())


# ---- The broadcast rule (``tell``): who is told what ---------------------------------------------------------------


def test_tell_abort_in_flight_reaches_every_in_flight_member_and_no_waiter():
    told = tell(AbortInFlight(2, 3), ["a", "b"], ["w"])
    assert (told.abort, told.resume, told.resumed, told.acknowledged, told.mismatch) == (("a", "b"), (), None, None, None)


def test_tell_admit_waiters_resumes_every_waiter_under_the_new_epoch_and_version():
    effect = AdmitWaiters(2, 4, "v4")
    told = tell(effect, ["a"], ["w1", "w2"])
    assert (told.abort, told.resume, told.resumed, told.mismatch) == ((), ("w1", "w2"), effect, None)


def test_tell_pause_acknowledged_returns_the_pause_calls_and_tells_no_member():
    effect = PauseAcknowledged(1, 2, 2)
    told = tell(effect, [], ["w1", "w2"])
    assert (told.abort, told.resume, told.acknowledged) == ((), (), effect)


@pytest.mark.parametrize("answer", [Admit(0, "v0"), Wait(0), AlreadyPausing(0), AlreadyPaused(0, 1),
                                    AlreadyRunning(0, "v0"), ResumeRefused("no")], ids=lambda e: type(e).__name__)
def test_tell_an_answer_to_the_caller_tells_nobody_else(answer):
    assert tell(answer, ["a"], ["w"]) == tell(answer, [], [])
    assert tell(answer, ["a"], ["w"]).abort == () and tell(answer, ["a"], ["w"]).resume == ()


def test_tell_reports_members_that_disagree_with_the_count_and_still_tells_them():
    told = tell(AbortInFlight(3, 0), ["a"], [])
    assert told.abort == ("a",) and "1 member(s) in flight" in told.mismatch
    told = tell(AdmitWaiters(0, 1, None), [], ["w"])
    assert told.resume == ("w",) and "1 member(s) wait" in told.mismatch
