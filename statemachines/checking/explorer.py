"""A small explicit-state model checker: breadth-first over every interleaving, invariants in every state.

A system to explore is three things: an initial global state (any hashable value, typically an attrs frozen
record holding machine ``Snapshot``s and abstract peers), a ``successors(state)`` function yielding
``(label, next_state)`` for every enabled event, and named ``Invariant``s. ``explore`` visits each distinct state
once, breadth-first, checks every invariant in every newly reached state, and stops at the first violation. BFS
makes the returned counter-example a shortest one: each state is first reached by a shortest path, and the parent
pointers recorded then are that path.

With ``is_final``, a reachable state that has no successor other than itself and is not final is a deadlock (a
lost wake-up, a pause that never completes), reported like a broken invariant named ``deadlock``.

A deadlock check misses a wait that only someone outside the proxy could end (a client that never reads again).
``Progress`` properties say what must stay reachable without them: "from every reachable state where ``pending``
holds, some path of moves that ``relies_on`` accepts reaches a state where ``done`` holds" (a pause is acknowledged
using only the proxy's and the upstream's moves, never a client's). They are checked once the search is complete,
on the recorded graph: a backward search from the ``done`` states over the accepted moves; the first ``pending``
state (in breadth-first order, so with a shortest trace) it does not reach is the violation.

    result = explore(initial, successors, [Invariant("counts are non-negative", lambda s: s.count >= 0)])
    assert result.violation is None, result.violation.format()
    print(result.states, result.transitions)

The worlds of this package build the systems; ``python -m statemachines.checking`` explores them and prints the
counts. This module knows nothing of them (no command line here).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import attrs

# The name under which a deadlock is reported.
DEADLOCK = "deadlock"


@attrs.frozen
class Invariant:
    """A named predicate that must hold in every reachable state."""

    name: str
    holds: Callable[[Any], bool]


@attrs.frozen
class Progress:
    """A liveness property (module docstring): ``done`` stays reachable from every ``pending`` state through moves
    whose label ``relies_on`` accepts."""

    name: str
    pending: Callable[[Any], bool]
    done: Callable[[Any], bool]
    relies_on: Callable[[str], bool]


@attrs.frozen
class TraceStep:
    """One step of a counter-example: the event's label and the state it led to."""

    label: str
    state: Any


@attrs.frozen
class Counterexample:
    """A shortest path from the initial state to a state that breaks ``invariant`` (or deadlocks)."""

    invariant: str
    initial: Any
    steps: tuple[TraceStep, ...]

    def __len__(self) -> int:
        """The number of events in the trace."""
        return len(self.steps)

    @property
    def labels(self) -> tuple[str, ...]:
        """The events of the trace, in order."""
        return tuple(step.label for step in self.steps)

    @property
    def final(self) -> Any:
        """The offending state."""
        return self.steps[-1].state if self.steps else self.initial

    def format(self, describe: Callable[[Any], str] = repr) -> str:
        """The trace as text, one line per step, ending with the broken invariant."""
        lines = [f"   initial: {describe(self.initial)}"]
        lines += [f"{i:>3}. {step.label}\n      -> {describe(step.state)}" for i, step in enumerate(self.steps, 1)]
        lines.append(f"violated after {len(self)} step(s): {self.invariant}")
        return "\n".join(lines)


@attrs.frozen
class ExplorationResult:
    """What ``explore`` saw: distinct states, transitions taken, the deepest level, and the first violation."""

    states: int
    transitions: int
    depth: int
    # False when max_depth or max_states cut the search short (a clean result then proves less).
    complete: bool
    violation: Counterexample | None


def explore(
    initial: Hashable,
    successors: Callable[[Any], Iterable[tuple[str, Any]]],
    invariants: Sequence[Invariant],
    *,
    is_final: Callable[[Any], bool] | None = None,
    max_depth: int | None = None,
    max_states: int | None = None,
    progress: Sequence[Progress] = (),
) -> ExplorationResult:
    """Breadth-first search over every reachable state; the first violation comes with a shortest trace."""
    # parent[state] = (previous state, label of the event that first reached it); None for the initial state.
    parent: dict[Any, tuple[Any, str] | None] = {initial: None}
    # For each progress property: target -> the states that reach it by an accepted move (its reversed graph).
    backward: list[dict[Any, list[Any]]] = [{} for _ in progress]
    transitions = 0
    depth = 0
    complete = True

    def result(broken: str | None, state: Any) -> ExplorationResult:
        # Walk the parent pointers back to the initial state to build the trace.
        violation = None
        if broken is not None:
            steps = []
            while parent[state] is not None:
                previous, label = parent[state]
                steps.append(TraceStep(label, state))
                state = previous
            violation = Counterexample(broken, initial, tuple(reversed(steps)))
        return ExplorationResult(len(parent), transitions, depth, complete, violation)

    broken = _first_broken(invariants, initial)
    if broken is not None:
        return result(broken, initial)
    frontier = [initial]
    while frontier:
        # Every state in the frontier is at distance `depth` from the initial state.
        if max_depth is not None and depth >= max_depth:
            complete = False
            break
        next_frontier = []
        for state in frontier:
            moved = False
            for label, target in successors(state):
                transitions += 1
                moved = moved or target != state
                for prop, edges in zip(progress, backward):
                    if target != state and prop.relies_on(label):
                        edges.setdefault(target, []).append(state)
                if target in parent:
                    continue
                if max_states is not None and len(parent) >= max_states:
                    complete = False
                    continue
                parent[target] = (state, label)
                broken = _first_broken(invariants, target)
                if broken is not None:
                    depth += 1
                    return result(broken, target)
                next_frontier.append(target)
            # Nothing left to do but stay: fine only in a final state.
            if not moved and is_final is not None and not is_final(state):
                return result(DEADLOCK, state)
        if next_frontier:
            depth += 1
        frontier = next_frontier
    if complete:
        for prop, edges in zip(progress, backward):
            stuck = _first_stuck(prop, parent, edges)
            if stuck is not None:
                return result(prop.name, stuck)
    return result(None, initial)


def _first_stuck(prop: Progress, states: Iterable[Any], edges: dict[Any, list[Any]]) -> Any:
    """The first state (in discovery order) where ``prop`` is pending and ``done`` is out of reach, or None."""
    states = list(states)
    reach = [state for state in states if prop.done(state)]
    can = set(reach)
    while reach:
        for source in edges.get(reach.pop(), ()):
            if source not in can:
                can.add(source)
                reach.append(source)
    return next((state for state in states if prop.pending(state) and state not in can), None)


def _first_broken(invariants: Sequence[Invariant], state: Any) -> str | None:
    """The name of the first invariant (in declared order) that ``state`` breaks."""
    for invariant in invariants:
        if not invariant.holds(state):
            return invariant.name
    return None


@attrs.frozen
class Composition:
    """A system ready to explore: what ``explore`` needs, plus a name and a compact state printer."""

    name: str
    initial: Hashable
    successors: Callable[[Any], Iterable[tuple[str, Any]]]
    invariants: tuple[Invariant, ...]
    is_final: Callable[[Any], bool] | None = None
    describe: Callable[[Any], str] = repr
    progress: tuple[Progress, ...] = ()

    def explore(self, *, max_depth: int | None = None, max_states: int | None = None) -> ExplorationResult:
        """``explore`` this system within the bounds."""
        return explore(
            self.initial, self.successors, self.invariants,
            is_final=self.is_final, max_depth=max_depth, max_states=max_states, progress=self.progress,
        )
