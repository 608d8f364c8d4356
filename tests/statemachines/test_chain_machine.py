"""ChainMachine, level 1: every state x event pair with exact outcomes, the guards, and the named behaviours.

Expected outcomes are written out by hand, not read from the table. ``BUSY`` data (three steps, extenders where the
state allows) drives the matrix; extra cases cover the other side of every guard (below the tip, the last extender,
a closing commit, positions that do not exist, counts that would go negative).
"""

from __future__ import annotations

import re

import pytest

from statemachines.chain import (
    EVENTS,
    TABLE,
    ChainData,
    ChainMachine,
    ChainStatistics,
    CloseReason,
    DiscardChain,
    ExportRequested,
    ExportSegment,
    ExtendTip,
    ExtensionCommitted,
    ExtensionRequested,
    FirstStepCommitted,
    ForkAt,
    GenerationDropped,
    RefreshDeclined,
    RefreshRequested,
    StartNewSegment,
    State,
    StepShadowed,
    TipAdvanced,
    TipRefreshed,
)
from statemachines.core import IllegalTransition, Snapshot, TableError

PENDING, OPEN, EXTENDING, CLOSED, EXPORTED, ABANDONED = (
    State.PENDING, State.OPEN, State.EXTENDING, State.CLOSED, State.EXPORTED, State.ABANDONED,
)
LENGTH, NO_EOT = CloseReason.LENGTH_EXHAUSTED, CloseReason.NO_END_OF_TURN

BUSY = {
    PENDING: ChainData(),
    OPEN: ChainData(steps=3),
    EXTENDING: ChainData(steps=3, extenders=2),
    CLOSED: ChainData(steps=3, extenders=1, close_reason=LENGTH),
    EXPORTED: ChainData(steps=3),
    ABANDONED: ChainData(),
}
# One sample per event type for the matrix: at the tip (step 3) of a busy chain, extendable.
SAMPLE = {
    ExtensionRequested: ExtensionRequested(3),
    ExtensionCommitted: ExtensionCommitted(3),
    FirstStepCommitted: FirstStepCommitted(),
    GenerationDropped: GenerationDropped(),
    ExportRequested: ExportRequested(),
    RefreshRequested: RefreshRequested(3),
}
# (state, event type) -> (target, data, effects) from BUSY data; absent -> illegal, nothing changes.
EXPECTED = {
    (PENDING, FirstStepCommitted): (OPEN, ChainData(steps=1), [TipAdvanced(1)]),
    (PENDING, GenerationDropped): (ABANDONED, ChainData(), [DiscardChain()]),
    (PENDING, ExportRequested): (ABANDONED, ChainData(), [DiscardChain()]),
    (OPEN, ExtensionRequested): (EXTENDING, ChainData(steps=3, extenders=1), [ExtendTip(3)]),
    (OPEN, ExportRequested): (EXPORTED, ChainData(steps=3), [ExportSegment(3)]),
    (EXTENDING, ExtensionRequested): (EXTENDING, ChainData(steps=3, extenders=3), [ExtendTip(3)]),
    (EXTENDING, ExtensionCommitted): (EXTENDING, ChainData(steps=4, extenders=1), [TipAdvanced(4)]),
    (EXTENDING, GenerationDropped): (EXTENDING, ChainData(steps=3, extenders=1), []),
    (EXTENDING, ExportRequested): (EXPORTED, ChainData(steps=3, extenders=2), [ExportSegment(3)]),
    (CLOSED, ExtensionRequested): (CLOSED, BUSY[CLOSED], [StartNewSegment(LENGTH)]),
    (CLOSED, GenerationDropped): (CLOSED, ChainData(steps=3, close_reason=LENGTH), []),
    (CLOSED, ExportRequested): (EXPORTED, BUSY[CLOSED], [ExportSegment(3)]),
    # A refresh never changes the chain: it says what the refreshing step does to the export.
    (OPEN, RefreshRequested): (OPEN, BUSY[OPEN], [TipRefreshed(3)]),
    (EXTENDING, RefreshRequested): (EXTENDING, BUSY[EXTENDING], [TipRefreshed(3)]),
    # The closed tip ended at the length limit; the sample refresh ends its turn: a step of its own.
    (CLOSED, RefreshRequested): (CLOSED, BUSY[CLOSED], [RefreshDeclined(3)]),
}
# Rows that exist but whose guard refuses the BUSY sample (the reason is in the message).
GUARDED = {(CLOSED, ExtensionCommitted): "a closed chain's tip is never extended"}


def chain_in(state: State, data: ChainData) -> ChainMachine:
    """A chain restored in exactly this state."""
    return ChainMachine.from_snapshot(Snapshot(state, data))


def test_chain_machine_table_declares_exactly_the_expected_pairs():
    assert set(TABLE.rows) == set(EXPECTED) | set(GUARDED)
    assert set(TABLE.events) == set(SAMPLE) == set(EVENTS)


@pytest.mark.parametrize("state", list(State), ids=lambda s: s.name)
@pytest.mark.parametrize("event_type", EVENTS, ids=lambda e: e.__name__)
def test_chain_machine_every_state_x_event(state, event_type):
    chain = chain_in(state, BUSY[state])
    before = chain.snapshot()
    expected = EXPECTED.get((state, event_type))
    if expected is not None:
        target, after, effects = expected
        assert chain.send(SAMPLE[event_type]) == effects
        assert chain.snapshot() == Snapshot(target, after)
        return
    with pytest.raises(IllegalTransition) as info:
        chain.send(SAMPLE[event_type])
    assert f"ChainMachine can't handle event type {event_type.__name__} when state={state.name}" in str(info.value)
    assert info.value.reason == GUARDED.get((state, event_type))
    assert chain.snapshot() == before


# The other side of every guard: (state, data, event) -> (target, data, effects).
GUARD_CASES = {
    "open_request_below_tip_forks": (
        OPEN, ChainData(steps=3), ExtensionRequested(1), OPEN, ChainData(steps=3), [ForkAt(1)],
    ),
    "extending_request_below_tip_forks_uncounted": (
        EXTENDING, ChainData(steps=3, extenders=2), ExtensionRequested(2),
        EXTENDING, ChainData(steps=3, extenders=2), [ForkAt(2)],
    ),
    "closed_request_below_tip_forks": (
        CLOSED, ChainData(steps=3, close_reason=NO_EOT), ExtensionRequested(1),
        CLOSED, ChainData(steps=3, close_reason=NO_EOT), [ForkAt(1)],
    ),
    "last_extender_commit_at_tip_reopens": (
        EXTENDING, ChainData(steps=1, extenders=1), ExtensionCommitted(1), OPEN, ChainData(steps=2), [TipAdvanced(2)],
    ),
    "commit_at_tip_that_cannot_be_extended_closes": (
        EXTENDING, ChainData(steps=1, extenders=2), ExtensionCommitted(1, LENGTH),
        CLOSED, ChainData(steps=2, extenders=1, close_reason=LENGTH), [TipAdvanced(2)],
    ),
    "commit_after_a_sibling_moved_the_tip_forks": (
        EXTENDING, ChainData(steps=3, extenders=2), ExtensionCommitted(2),
        EXTENDING, ChainData(steps=3, extenders=1), [ForkAt(2)],
    ),
    "last_extender_commit_below_tip_forks_and_reopens": (
        EXTENDING, ChainData(steps=3, extenders=1), ExtensionCommitted(2), OPEN, ChainData(steps=3), [ForkAt(2)],
    ),
    "commit_after_a_sibling_closed_the_chain_forks": (
        CLOSED, ChainData(steps=3, extenders=1, close_reason=LENGTH), ExtensionCommitted(2),
        CLOSED, ChainData(steps=3, close_reason=LENGTH), [ForkAt(2)],
    ),
    "last_extender_drop_reopens": (
        EXTENDING, ChainData(steps=2, extenders=1), GenerationDropped(), OPEN, ChainData(steps=2), [],
    ),
    "refresh_below_the_tip_is_shadowed": (
        OPEN, ChainData(steps=3), RefreshRequested(1), OPEN, ChainData(steps=3), [StepShadowed(1)],
    ),
    "refresh_below_a_closed_tip_is_shadowed": (
        CLOSED, ChainData(steps=3, close_reason=LENGTH), RefreshRequested(2),
        CLOSED, ChainData(steps=3, close_reason=LENGTH), [StepShadowed(2)],
    ),
    "refresh_of_a_closed_tip_ending_the_same_way_replaces_it": (
        CLOSED, ChainData(steps=3, extenders=1, close_reason=LENGTH), RefreshRequested(3, LENGTH),
        CLOSED, ChainData(steps=3, extenders=1, close_reason=LENGTH), [TipRefreshed(3)],
    ),
    "refresh_of_a_closed_tip_ending_otherwise_is_declined": (
        CLOSED, ChainData(steps=3, close_reason=LENGTH), RefreshRequested(3, NO_EOT),
        CLOSED, ChainData(steps=3, close_reason=LENGTH), [RefreshDeclined(3)],
    ),
    "refresh_of_an_open_tip_that_cannot_be_extended_is_declined": (
        EXTENDING, ChainData(steps=2, extenders=1), RefreshRequested(2, LENGTH),
        EXTENDING, ChainData(steps=2, extenders=1), [RefreshDeclined(2)],
    ),
    "refresh_below_the_tip_that_cannot_be_extended_is_declined": (
        OPEN, ChainData(steps=3), RefreshRequested(2, NO_EOT), OPEN, ChainData(steps=3), [RefreshDeclined(2)],
    ),
    "first_step_that_cannot_be_extended_closes": (
        PENDING, ChainData(), FirstStepCommitted(NO_EOT), CLOSED, ChainData(steps=1, close_reason=NO_EOT),
        [TipAdvanced(1)],
    ),
}


@pytest.mark.parametrize("case", sorted(GUARD_CASES))
def test_chain_machine_guard_branches(case):
    state, data, event, target, after, effects = GUARD_CASES[case]
    chain = chain_in(state, data)
    assert chain.send(event) == effects
    assert chain.snapshot() == Snapshot(target, after)


@pytest.mark.parametrize(
    "state, data, event, reason",
    [
        (OPEN, ChainData(steps=3), ExtensionRequested(4), "step 4 is not one of the chain's 3 step(s)"),
        (OPEN, ChainData(steps=3), ExtensionRequested(0), "step 0 is not one of the chain's 3 step(s)"),
        (EXTENDING, ChainData(steps=3, extenders=1), ExtensionCommitted(5),
         "step 5 is not one of the chain's 3 step(s)"),
        (CLOSED, ChainData(steps=3, close_reason=LENGTH), GenerationDropped(), "no generation is extending this chain"),
        (CLOSED, ChainData(steps=3, close_reason=LENGTH), ExtensionCommitted(2),
         "no generation is extending this chain"),
        (CLOSED, ChainData(steps=3, close_reason=LENGTH), ExtensionRequested(9),
         "step 9 is not one of the chain's 3 step(s)"),
        (OPEN, ChainData(steps=3), RefreshRequested(4), "step 4 is not one of the chain's 3 step(s)"),
        (EXTENDING, ChainData(steps=3, extenders=1), RefreshRequested(0),
         "step 0 is not one of the chain's 3 step(s)"),
    ],
    ids=["beyond_tip", "zero", "commit_beyond_tip", "closed_drop_uncounted", "closed_commit_uncounted",
         "closed_beyond", "refresh_beyond_tip", "refresh_zero"],
)
def test_chain_machine_guards_refuse_and_change_nothing(state, data, event, reason):
    chain = chain_in(state, data)
    before = chain.snapshot()
    with pytest.raises(IllegalTransition) as info:
        chain.send(event)
    assert info.value.reason == reason
    assert chain.snapshot() == before


def test_chain_machine_new_is_PENDING_owning_nothing():
    assert ChainMachine.new().snapshot() == Snapshot(PENDING, ChainData())
    assert ChainMachine.new().statistics() == ChainStatistics("PENDING", 0, 0, None)


def test_chain_machine_concurrent_siblings_first_commit_extends_the_others_fork():
    # Best-of-3 on one tip: each is counted; the first commit moves the tip, so the other two fork.
    chain = chain_in(OPEN, ChainData(steps=1))
    assert [chain.send(ExtensionRequested(1)) for _ in range(3)] == [[ExtendTip(1)]] * 3
    assert chain.send(ExtensionCommitted(1)) == [TipAdvanced(2)]
    assert chain.send(ExtensionCommitted(1)) == [ForkAt(1)]
    assert chain.send(ExtensionCommitted(1)) == [ForkAt(1)]
    assert chain.statistics() == ChainStatistics("OPEN", 2, 0, None)


def test_chain_machine_length_exhausted_tip_starts_a_new_segment_but_lower_steps_still_fork():
    chain = chain_in(OPEN, ChainData(steps=1))
    chain.send(ExtensionRequested(1))
    assert chain.send(ExtensionCommitted(1, LENGTH)) == [TipAdvanced(2)]
    assert chain.statistics() == ChainStatistics("CLOSED", 2, 0, "length_exhausted")
    assert chain.send(ExtensionRequested(2)) == [StartNewSegment(LENGTH)]
    assert chain.send(ExtensionRequested(1)) == [ForkAt(1)]


def test_chain_machine_a_refreshed_tip_is_still_extended_in_place_by_the_generations_extending_it():
    # Two generations extend the tip; the same answer as the tip commits (a retry) and replaces it at position 2;
    # the extenders still commit in place (their tokens continue position 2), then the refresh is below the tip.
    chain = chain_in(OPEN, ChainData(steps=2))
    assert chain.send(ExtensionRequested(2)) == [ExtendTip(2)]
    assert chain.send(RefreshRequested(2)) == [TipRefreshed(2)]
    assert chain.send(ExtensionCommitted(2)) == [TipAdvanced(3)]
    assert chain.send(RefreshRequested(2)) == [StepShadowed(2)]
    assert chain.statistics() == ChainStatistics("OPEN", 3, 0, None)


def test_chain_machine_export_while_extending_ignores_the_extenders_which_the_session_rejects():
    chain = chain_in(EXTENDING, ChainData(steps=2, extenders=1))
    assert chain.send(ExportRequested()) == [ExportSegment(2)]
    # Exported absorbs: a straggler's commit would be a controller bug.
    with pytest.raises(IllegalTransition):
        chain.send(ExtensionCommitted(2))
    assert chain.snapshot().state is EXPORTED


@pytest.mark.parametrize(
    "state, data, broken",
    [
        (PENDING, ChainData(steps=1), "PENDING owning 1 step(s)"),
        (OPEN, ChainData(), "OPEN owning no step"),
        (OPEN, ChainData(steps=1, extenders=1), "OPEN with 1 extender(s)"),
        (EXTENDING, ChainData(steps=1), "EXTENDING with no extender"),
        (CLOSED, ChainData(steps=1), "CLOSED with close_reason None"),
        (OPEN, ChainData(steps=1, close_reason=LENGTH), "OPEN with close_reason"),
    ],
)
def test_chain_machine_from_snapshot_refuses_impossible_states(state, data, broken):
    with pytest.raises(TableError, match=re.escape(broken)):
        ChainMachine.from_snapshot(Snapshot(state, data))


def test_chain_machine_counts_never_go_negative():
    with pytest.raises(ValueError):
        ChainData(extenders=-1)
    with pytest.raises(ValueError):
        ChainData(steps=-1)
