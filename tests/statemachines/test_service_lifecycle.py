"""ServiceLifecycle, level 1: every state x event pair with exact outcomes, written out by hand (not read from the
table), for two kinds of data: "busy" (two generations in flight where the state allows it) and "last" (the fewest
the state allows: one in DRAINING and CLOSING, none elsewhere), so every guard is exercised on both sides."""

from __future__ import annotations

import pytest

from statemachines.core import IllegalTransition, Snapshot
from statemachines.service_lifecycle import (
    EVENTS,
    TABLE,
    AdmitGeneration,
    CutGenerations,
    FlushStore,
    GenerationEnded,
    GenerationWantsToStart,
    GraceExpired,
    LifecycleData,
    LifecycleStatistics,
    RefuseGeneration,
    ServiceLifecycle,
    StartGraceTimer,
    State,
    StopAccepting,
    StopRequested,
    Stopped,
    StoreFlushed,
)

SERVING, DRAINING, CLOSING, FLUSHING, STOPPED = State
SAMPLE = {event: event() for event in EVENTS}


def n(in_flight: int) -> LifecycleData:
    return LifecycleData(in_flight)


START = {
    "busy": {SERVING: n(2), DRAINING: n(2), CLOSING: n(2), FLUSHING: n(0), STOPPED: n(0)},
    "last": {SERVING: n(0), DRAINING: n(1), CLOSING: n(1), FLUSHING: n(0), STOPPED: n(0)},
}
# (kind, state, event type) -> (target, data, effects); absent -> illegal (raises, nothing changes).
EXPECTED = {
    ("busy", SERVING, GenerationWantsToStart): (SERVING, n(3), [AdmitGeneration()]),
    ("busy", SERVING, GenerationEnded): (SERVING, n(1), []),
    ("busy", SERVING, StopRequested): (DRAINING, n(2), [StopAccepting(), StartGraceTimer()]),
    ("busy", DRAINING, GenerationWantsToStart): (DRAINING, n(2), [RefuseGeneration()]),
    ("busy", DRAINING, GenerationEnded): (DRAINING, n(1), []),
    ("busy", DRAINING, GraceExpired): (CLOSING, n(2), [CutGenerations(2)]),
    ("busy", DRAINING, StopRequested): (CLOSING, n(2), [CutGenerations(2)]),
    ("busy", CLOSING, GenerationWantsToStart): (CLOSING, n(2), [RefuseGeneration()]),
    ("busy", CLOSING, GenerationEnded): (CLOSING, n(1), []),
    ("busy", CLOSING, GraceExpired): (CLOSING, n(2), []),
    ("busy", CLOSING, StopRequested): (CLOSING, n(2), []),
    ("last", SERVING, GenerationWantsToStart): (SERVING, n(1), [AdmitGeneration()]),
    ("last", SERVING, StopRequested): (FLUSHING, n(0), [StopAccepting(), FlushStore()]),
    ("last", DRAINING, GenerationWantsToStart): (DRAINING, n(1), [RefuseGeneration()]),
    ("last", DRAINING, GenerationEnded): (FLUSHING, n(0), [FlushStore()]),
    ("last", DRAINING, GraceExpired): (CLOSING, n(1), [CutGenerations(1)]),
    ("last", DRAINING, StopRequested): (CLOSING, n(1), [CutGenerations(1)]),
    ("last", CLOSING, GenerationWantsToStart): (CLOSING, n(1), [RefuseGeneration()]),
    ("last", CLOSING, GenerationEnded): (FLUSHING, n(0), [FlushStore()]),
    ("last", CLOSING, GraceExpired): (CLOSING, n(1), []),
    ("last", CLOSING, StopRequested): (CLOSING, n(1), []),
}
for kind in ("busy", "last"):
    # FLUSHING and STOPPED hold nothing in flight: both kinds are the same there.
    EXPECTED.update({
        (kind, FLUSHING, GenerationWantsToStart): (FLUSHING, n(0), [RefuseGeneration()]),
        (kind, FLUSHING, GraceExpired): (FLUSHING, n(0), []),
        (kind, FLUSHING, StopRequested): (FLUSHING, n(0), []),
        (kind, FLUSHING, StoreFlushed): (STOPPED, n(0), [Stopped()]),
        (kind, STOPPED, GenerationWantsToStart): (STOPPED, n(0), [RefuseGeneration()]),
        (kind, STOPPED, GraceExpired): (STOPPED, n(0), []),
        (kind, STOPPED, StopRequested): (STOPPED, n(0), []),
    })
LEGAL_PAIRS = {(state, event) for (_, state, event) in EXPECTED} | {(SERVING, GenerationEnded)}
# Declared rows whose guard refuses with "last" data: a count would go negative.
GUARD_REASONS = {(SERVING, GenerationEnded): "no generation in flight"}


def machine_in(state: State, data: LifecycleData) -> ServiceLifecycle:
    return ServiceLifecycle.from_snapshot(Snapshot(state, data))


def test_service_lifecycle_table_declares_exactly_the_expected_pairs():
    assert set(TABLE.rows) == LEGAL_PAIRS
    assert set(TABLE.events) == set(SAMPLE)


@pytest.mark.parametrize("kind", ["busy", "last"])
@pytest.mark.parametrize("state", list(State), ids=lambda s: s.name)
@pytest.mark.parametrize("event_type", EVENTS, ids=lambda e: e.__name__)
def test_service_lifecycle_every_state_x_event(kind, state, event_type):
    machine = machine_in(state, START[kind][state])
    before = machine.snapshot()
    expected = EXPECTED.get((kind, state, event_type))
    if expected is not None:
        target, after, effects = expected
        assert machine.send(SAMPLE[event_type]) == effects
        assert machine.snapshot() == Snapshot(target, after)
        return
    # Illegal: IllegalTransition naming the pair; transactional, so state and count are unchanged.
    with pytest.raises(IllegalTransition) as info:
        machine.send(SAMPLE[event_type])
    assert f"ServiceLifecycle can't handle event type {event_type.__name__} when state={state.name}" in str(info.value)
    assert info.value.reason == (GUARD_REASONS.get((state, event_type)) if kind == "last" else None)
    assert machine.snapshot() == before


def test_service_lifecycle_new_is_SERVING_with_nothing_in_flight():
    machine = ServiceLifecycle.new()
    assert machine.snapshot() == Snapshot(SERVING, n(0))
    assert machine.statistics() == LifecycleStatistics("SERVING", 0)


@pytest.mark.parametrize("state", [FLUSHING, STOPPED], ids=lambda s: s.name)
def test_service_lifecycle_refuses_a_snapshot_with_generations_in_flight_after_draining(state):
    with pytest.raises(Exception, match="in flight"):
        machine_in(state, n(1))


def test_service_lifecycle_a_whole_shutdown_admits_nobody_after_the_stop_and_ends_stopped():
    machine = ServiceLifecycle.new()
    assert machine.send(GenerationWantsToStart()) == [AdmitGeneration()]
    assert machine.send(GenerationWantsToStart()) == [AdmitGeneration()]
    assert machine.send(StopRequested()) == [StopAccepting(), StartGraceTimer()]
    assert machine.send(GenerationWantsToStart()) == [RefuseGeneration()]
    assert machine.send(GenerationEnded()) == []  # one finished within the grace
    assert machine.send(GraceExpired()) == [CutGenerations(1)]
    assert machine.send(GenerationEnded()) == [FlushStore()]  # the cut one answered
    assert machine.send(GraceExpired()) == []  # a late timer changes nothing
    assert machine.send(StoreFlushed()) == [Stopped()]
    assert machine.snapshot() == Snapshot(STOPPED, n(0))
