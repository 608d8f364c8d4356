"""The explorer on toy systems whose answers are known by hand: counts, shortest traces, deadlocks, bounds."""

from __future__ import annotations

from statemachines.checking.explorer import DEADLOCK, Composition, Invariant, Progress, explore


def steps_of_one_or_two(limit: int):
    """Integers from 0: `+1` and `+2` while below ``limit``."""

    def successors(n):
        return [(f"+{k}", n + k) for k in (1, 2) if n + k <= limit]

    return successors


def test_explorer_counts_every_state_once_and_every_transition():
    # 0..4 with +1 and +2: 5 states; edges: 0,1,2 have two each, 3 has one, 4 none = 7 transitions.
    result = explore(0, steps_of_one_or_two(4), [])
    assert (result.states, result.transitions, result.depth, result.complete) == (5, 7, 2, True)
    assert result.violation is None


def test_explorer_returns_the_shortest_counterexample():
    # 7 is reachable in 7 steps of +1, but BFS must find a 4-step trace (three +2 and one +1).
    result = explore(0, steps_of_one_or_two(10), [Invariant("never seven", lambda n: n != 7)])
    violation = result.violation
    assert violation is not None and violation.invariant == "never seven"
    assert len(violation) == 4
    assert sorted(violation.labels) == ["+1", "+2", "+2", "+2"]
    assert violation.final == 7 and [step.state for step in violation.steps][-1] == 7


def test_explorer_reports_the_first_broken_invariant_in_declared_order():
    invariants = [Invariant("below three", lambda n: n < 3), Invariant("below four", lambda n: n < 4)]
    assert explore(0, steps_of_one_or_two(10), invariants).violation.invariant == "below three"


def test_explorer_initial_state_violation_has_an_empty_trace():
    violation = explore(0, steps_of_one_or_two(3), [Invariant("positive", lambda n: n > 0)]).violation
    assert violation is not None and len(violation) == 0 and violation.final == 0


def test_explorer_finds_a_deadlock_only_outside_final_states():
    # 0 -> 1 -> 2 (stuck: only a self-loop), 0 -> 3 (final, no successors).
    graph = {0: [("a", 1), ("b", 3)], 1: [("c", 2)], 2: [("wait", 2)], 3: []}
    result = explore(0, graph.__getitem__, [], is_final=lambda s: s == 3)
    assert result.violation is not None and result.violation.invariant == DEADLOCK
    assert result.violation.labels == ("a", "c")
    # Without is_final, nothing is a deadlock.
    assert explore(0, graph.__getitem__, []).violation is None


def test_explorer_bounds_make_the_result_incomplete():
    by_states = explore(0, steps_of_one_or_two(100), [], max_states=10)
    assert by_states.states == 10 and not by_states.complete
    by_depth = explore(0, steps_of_one_or_two(100), [], max_depth=3)
    assert by_depth.depth == 3 and by_depth.states == 7 and not by_depth.complete


def test_explorer_counterexample_format_shows_every_step_and_the_invariant():
    system = Composition("toy", 0, steps_of_one_or_two(4), (Invariant("never three", lambda n: n != 3),),
                         describe=lambda n: f"n={n}")
    text = system.explore().violation.format(system.describe)
    assert text.splitlines()[0] == "   initial: n=0"
    assert "-> n=3" in text and text.endswith("violated after 2 step(s): never three")


def _door(n: int):
    """States 0..3: 0 -> 1 ("work"); 1 -> 2 by "client: knocks" only; 2 -> 3 ("work"); 3 is done; 1 -> 0 ("work")."""
    edges = {0: [("work", 1)], 1: [("client: knocks", 2), ("work", 0)], 2: [("work", 3)], 3: []}
    return edges[n]


def test_progress_holds_when_done_is_reachable_through_the_moves_relied_on():
    reach = Progress("reaches three", pending=lambda n: n < 3, done=lambda n: n == 3, relies_on=lambda label: True)
    assert explore(0, _door, [], progress=[reach]).violation is None


def test_progress_fails_at_the_first_pending_state_that_needs_an_excluded_move_with_a_shortest_trace():
    # Without the client's move, 0 and 1 can never reach 3: the first such state in BFS order is 0 (empty trace).
    needs_client = Progress("reaches three", pending=lambda n: n in (1, 2), done=lambda n: n == 3,
                            relies_on=lambda label: not label.startswith("client"))
    violation = explore(0, _door, [], progress=[needs_client]).violation
    assert violation is not None and violation.invariant == "reaches three"
    assert (violation.labels, violation.final) == (("work",), 1)


def test_progress_is_checked_only_after_a_complete_search():
    never = Progress("never", pending=lambda n: True, done=lambda n: False, relies_on=lambda label: True)
    result = explore(0, _door, [], progress=[never], max_depth=1)
    assert not result.complete and result.violation is None
    assert explore(0, _door, [], progress=[never]).violation.final == 0
