"""The shared core, on a toy turnstile: the table helper, both illegal-event policies, guards, rendering."""

from __future__ import annotations

import enum

import attrs
import pytest

from statemachines.core import (
    Branch,
    Goto,
    IllegalTransition,
    Machine,
    Policy,
    Refused,
    Snapshot,
    TableError,
    TransitionTable,
    on,
    render_dot,
    render_markdown,
)


class State(enum.Enum):
    LOCKED = "a coin unlocks it"
    UNLOCKED = "a push lets one person through"
    BROKEN = "absorbs everything after an illegal event"


@attrs.frozen
class Coin:
    """A coin is inserted."""


@attrs.frozen
class Push:
    """Someone pushes the bar."""


@attrs.frozen
class Unlocked:
    """The latch opened."""


@attrs.frozen
class Passed:
    """One person went through."""

    total: int


def _unlock(state, coins, event):
    return Goto(State.UNLOCKED, coins + 1, [Unlocked()])


def _pass(state, coins, event):
    # A guard that needs the data: the toy refuses a push once 3 people went through.
    if coins > 3:
        raise Refused("out of service")
    return Goto(State.LOCKED, coins, [Passed(coins)])


ROWS = [
    on(State.LOCKED, Coin, _unlock, Branch(State.UNLOCKED, [Unlocked])),
    on(State.UNLOCKED, Push, _pass, Branch(State.LOCKED, [Passed], when="coins <= 3")),
]


def _table(policy=Policy.TRANSACTIONAL, error_state=None, rows=ROWS, check=None):
    return TransitionTable.build(
        machine="Turnstile", states=State, events=(Coin, Push), initial=State.LOCKED,
        transitions=rows, policy=policy, error_state=error_state, check=check,
    )


@attrs.define(eq=False)
class Turnstile(Machine):
    table = _table()


@attrs.define(eq=False)
class FailClosedTurnstile(Machine):
    table = _table(Policy.FAIL_CLOSED, State.BROKEN)


def test_core_send_returns_the_effects_and_moves():
    turnstile = Turnstile(State.LOCKED, 0)
    assert turnstile.send(Coin()) == [Unlocked()]
    assert turnstile.send(Push()) == [Passed(1)]
    assert turnstile.snapshot() == Snapshot(State.LOCKED, 1)


def test_core_missing_pair_is_illegal_and_TRANSACTIONAL_leaves_state_unchanged():
    turnstile = Turnstile(State.LOCKED, 0)
    with pytest.raises(IllegalTransition) as info:
        turnstile.send(Push())
    assert str(info.value) == "Turnstile can't handle event type Push when state=LOCKED"
    assert (info.value.machine, info.value.state, info.value.event) == ("Turnstile", State.LOCKED, Push())
    assert turnstile.snapshot() == Snapshot(State.LOCKED, 0)


def test_core_refused_guard_raises_IllegalTransition_with_the_reason_and_keeps_state():
    turnstile = Turnstile(State.UNLOCKED, 4)
    with pytest.raises(IllegalTransition, match="when state=UNLOCKED: out of service") as info:
        turnstile.send(Push())
    assert info.value.reason == "out of service"
    assert turnstile.snapshot() == Snapshot(State.UNLOCKED, 4)


def test_core_FAIL_CLOSED_moves_to_the_absorbing_error_state_then_raises():
    turnstile = FailClosedTurnstile(State.LOCKED, 0)
    with pytest.raises(IllegalTransition):
        turnstile.send(Push())
    assert turnstile.snapshot() == Snapshot(State.BROKEN, 0)
    # BROKEN absorbs: even the event that was legal before is refused now, and it stays BROKEN.
    with pytest.raises(IllegalTransition, match="when state=BROKEN"):
        turnstile.send(Coin())
    assert turnstile.snapshot().state is State.BROKEN


def test_core_FAIL_CLOSED_also_absorbs_when_an_action_disagrees_with_its_table():
    liar = on(State.LOCKED, Coin, lambda s, d, e: Goto(State.LOCKED, d), Branch(State.UNLOCKED, [Unlocked]))

    @attrs.define(eq=False)
    class Lying(Machine):
        table = _table(Policy.FAIL_CLOSED, State.BROKEN).overriding(liar)

    lying = Lying(State.LOCKED, 0)
    with pytest.raises(TableError):
        lying.send(Coin())
    assert lying.snapshot() == Snapshot(State.BROKEN, 0)


def test_core_same_state_and_event_declared_twice_is_a_TableError():
    twice = ROWS + [on(State.LOCKED, Coin, _unlock, Branch(State.LOCKED))]
    with pytest.raises(TableError, match=r"\(LOCKED, Coin\) is declared twice"):
        _table(rows=twice)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rows=[on(State.LOCKED, Unlocked, _unlock, Branch(State.LOCKED))]), "not one of the machine's events"),
        (dict(rows=[on(State.LOCKED, Coin, _unlock)]), "at least one branch"),
        (dict(rows=[on(Policy.FAIL_CLOSED, Coin, _unlock, Branch(State.LOCKED))]), "is not a State"),
        (dict(rows=[on(State.LOCKED, Coin, _unlock, Branch("LOCKED"))]), "target 'LOCKED' is not a State"),
        (dict(policy=Policy.FAIL_CLOSED), "error_state is required"),
        (dict(error_state=State.BROKEN), "error_state is required"),
        (
            dict(policy=Policy.FAIL_CLOSED, error_state=State.LOCKED),
            "error state LOCKED must absorb",
        ),
    ],
)
def test_core_malformed_tables_are_refused_at_build_time(kwargs, message):
    with pytest.raises(TableError, match=message):
        _table(**kwargs)


def test_core_action_result_not_declared_by_the_row_is_a_TableError():
    # The row declares LOCKED + Passed; an action that emits Unlocked disagrees with the table.
    liar = on(State.UNLOCKED, Push, lambda s, d, e: Goto(State.LOCKED, d, [Unlocked()]), Branch(State.LOCKED, [Passed]))
    table = _table().overriding(liar)
    with pytest.raises(TableError, match="which no branch of its row declares"):
        table.apply(State.UNLOCKED, 0, Push())


def test_core_action_going_where_no_branch_goes_is_a_TableError_also_without_effects():
    # The row declares LOCKED only; a step to UNLOCKED with no effects is checked like one with effects.
    wanderer = on(State.UNLOCKED, Push, lambda s, d, e: Goto(State.UNLOCKED, d), Branch(State.LOCKED, [Passed]))
    table = _table().overriding(wanderer)
    with pytest.raises(TableError, match="went to UNLOCKED emitting \\[\\], which no branch of its row declares"):
        table.apply(State.UNLOCKED, 0, Push())


def test_core_check_hook_runs_after_every_transition_and_on_restore():
    table = _table(check=lambda state, coins: "too many coins" if coins > 1 else None)
    with pytest.raises(TableError, match="invariant broken after Coin in LOCKED: too many coins"):
        table.apply(State.LOCKED, 1, Coin())

    @attrs.define(eq=False)
    class Checked(Machine):
        pass

    Checked.table = table
    with pytest.raises(TableError, match="in the snapshot to restore"):
        Checked.from_snapshot(Snapshot(State.LOCKED, 2))


def test_core_overriding_replaces_one_row_and_keeps_the_original():
    free = on(State.LOCKED, Push, lambda s, d, e: Goto(State.LOCKED, d, [Passed(d)]), Branch(State.LOCKED, [Passed]))
    variant = _table().overriding(free)
    assert variant.apply(State.LOCKED, 0, Push()).effects == (Passed(0),)
    assert (State.LOCKED, Push) not in _table().rows
    with pytest.raises(TableError, match="overridden twice"):
        _table().overriding(free, free)


def test_core_apply_is_pure_and_snapshots_restore_exactly():
    table = Turnstile.table
    assert table.apply(State.LOCKED, 0, Coin()) == Goto(State.UNLOCKED, 1, (Unlocked(),))
    restored = Turnstile.from_snapshot(Snapshot(State.UNLOCKED, 2))
    assert restored.snapshot() == Snapshot(State.UNLOCKED, 2)
    assert hash(restored.snapshot()) == hash(Snapshot(State.UNLOCKED, 2))


def test_core_render_dot_draws_every_branch_and_marks_the_error_state():
    dot = render_dot(FailClosedTurnstile.table)
    assert "__start -> LOCKED;" in dot
    assert 'LOCKED -> UNLOCKED [label="Coin / Unlocked"];' in dot
    assert 'UNLOCKED -> LOCKED [label="Push [coins <= 3] / Passed"];' in dot
    assert 'BROKEN [tooltip="absorbs everything after an illegal event", style="rounded,bold"];' in dot


def test_core_render_markdown_lists_rows_illegal_pairs_and_policy():
    text = render_markdown(Turnstile.table)
    assert "    LOCKED --> UNLOCKED: Coin / Unlocked" in text
    assert "| `UNLOCKED` | `Push` | coins <= 3 | `LOCKED` | Passed |" in text
    assert "Illegal events (TRANSACTIONAL): raise IllegalTransition; state and data stay unchanged." in text
    assert "`LOCKED` x `Push`" in text and "`BROKEN` x `Coin`" in text


def test_core_render_markdown_escapes_mermaid_separators_in_labels():
    odd = on(State.LOCKED, Coin, _unlock, Branch(State.UNLOCKED, [Unlocked], when="a: b; c"))
    assert "Coin [a#58; b#59; c] / Unlocked" in render_markdown(_table().overriding(odd))
