"""Trace inclusion: is what the running controllers did something the checked world can do?

The running side is one :class:`~tests.conformance.traces.MachineTrace` per machine instance (the gate, the session,
each chain, each generation). The world side is the world's state graph, walked from its initial state by a
depth-first search that follows only the moves whose machine events are the next recorded ones: a move feeds events
to world roles (``gate``, ``session``, ``c<k>``, ``g<i>``); each role is bound to one recorded machine of its kind
(the gate and the session at once, a chain or a generation at its first event, to any recorded one not bound yet
whose next steps match), and a move fits when, for every role it feeds, its observed steps (event type, state,
data, effect types) are exactly the next unconsumed steps of the bound machine. The run is included when a path
consumes every recorded step.

What this compares is each machine's own sequence, not the global order: the world carries out in one move what
the controllers spread over several tasks (prepare, a commit and its answer), so events of *different* machines may
come in another order on the path than in the run. The search prefers, at every node, the move whose steps came
first in the run, so it follows the run's order wherever the world allows it.

Generations not yet prepared are identical in the world, so a move that would bind one is tried for the first such
generation only. A search that finds no path reports the node that follows the run furthest (its first step not
consumed comes latest in the run): each machine's next recorded step, and the world's moves there with the reason
each does not fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from tests.conformance.traces import GATE, SESSION, MachineTrace, Observed
from tests.conformance.world_adapter import (
    WorldDriver,
    WorldMove,
    is_initial_generation,
    role_generation,
    role_kind,
)

#: Nodes a search may visit before it gives up (a run of a few generations needs hundreds).
MAX_NODES = 20_000


@attrs.frozen
class _Node:
    """A world, how far each recorded machine was consumed, and which recorded machine each world role is."""

    world: Any
    positions: tuple[int, ...]
    binding: frozenset[tuple[str, int]]


@attrs.frozen
class Mismatch:
    """Where the world could not follow the run: the furthest node the search reached."""

    traces: tuple[MachineTrace, ...]
    positions: tuple[int, ...]
    binding: tuple[tuple[str, int], ...]
    path: tuple[str, ...]
    world: str
    # (label, the move's events, why it does not fit) for every move of the world there.
    options: tuple[tuple[str, str, str], ...]
    gave_up: bool = False

    def format(self) -> str:
        """The report: the path the world followed, each machine's next recorded step, the world's options."""
        consumed, total = sum(self.positions), sum(len(t.steps) for t in self.traces)
        names = {index: role for role, index in self.binding}
        lines = [f"the world followed {consumed} of the run's {total} machine steps"
                 + (" (the search gave up)" if self.gave_up else "") + ", along:"]
        lines += [f"  {i:>3}. {label}" for i, label in enumerate(self.path, 1)]
        lines.append(f"world there: {self.world}")
        lines.append("the run's next step of each machine (world role in brackets):")
        for index, trace in enumerate(self.traces):
            position = self.positions[index]
            if position < len(trace.steps):
                step = trace.steps[position]
                lines.append(f"  {trace.name} [{names.get(index, 'unbound')}] step {position + 1}/"
                              f"{len(trace.steps)} (#{trace.order[position]} in the run): {step.describe()}")
        lines.append("the world's moves there:")
        lines += [f"  - {label}: {events or 'no machine event'}\n      {why}" for label, events, why in self.options]
        return "\n".join(lines)


@attrs.frozen
class Inclusion:
    """The outcome: the world's path that reproduces the run, or the mismatch."""

    path: tuple[str, ...] | None
    mismatch: Mismatch | None
    nodes: int


def check_inclusion(traces: Sequence[MachineTrace], driver: WorldDriver, *, max_nodes: int = MAX_NODES) -> Inclusion:
    """Search the world for a path whose events are the recorded ones, machine by machine (module docstring)."""
    traces = tuple(traces)
    binding = frozenset((kind, index) for index, trace in enumerate(traces) for kind in (GATE, SESSION)
                        if trace.kind == kind)
    if len(binding) != sum(trace.kind in (GATE, SESSION) for trace in traces):
        raise ValueError("the world has one gate and one session; the run fed several")
    total = sum(len(trace.steps) for trace in traces)
    start = _Node(driver.initial, (0,) * len(traces), binding)
    stack: list[tuple[_Node, tuple[str, ...]]] = [(start, ())]
    seen = {start}
    best, best_path = start, ()
    nodes = 0
    while stack:
        node, path = stack.pop()
        nodes += 1
        if sum(node.positions) == total:
            return Inclusion(path, None, nodes)
        if _progress(traces, node) > _progress(traces, best):
            best, best_path = node, path
        if nodes >= max_nodes:
            return Inclusion(None, _mismatch(traces, driver, best, best_path, gave_up=True), nodes)
        successors = []
        for move in driver.moves(node.world):
            if move.broken is not None:
                continue
            for positions, bound in _fits(traces, node, move):
                child = _Node(move.world, positions, bound)
                if child not in seen:
                    seen.add(child)
                    successors.append((_first_in_run(traces, node.positions, positions), move.label, child))
        # The move whose steps came first in the run is explored first (pushed last).
        successors.sort(key=lambda entry: entry[0], reverse=True)
        stack.extend((child, (*path, label)) for _, label, child in successors)
    return Inclusion(None, _mismatch(traces, driver, best, best_path, gave_up=False), nodes)


def _progress(traces: tuple[MachineTrace, ...], node: _Node) -> tuple[float, int]:
    """How far a node follows the run: the run's position of its first step not consumed, then the steps consumed.
    The furthest node is the one reported (the first step of the run the world could not reach)."""
    pending = [trace.order[position] for trace, position in zip(traces, node.positions) if position < len(trace.steps)]
    return min(pending, default=float("inf")), sum(node.positions)


def _first_in_run(traces: tuple[MachineTrace, ...], before: tuple[int, ...], after: tuple[int, ...]) -> float:
    """The run's position of the earliest step a move consumed (moves that consume nothing come last)."""
    firsts = [traces[i].order[before[i]] for i in range(len(traces)) if after[i] > before[i]]
    return min(firsts, default=float("inf"))


def _grouped(events: Sequence[tuple[str, Observed]]) -> dict[str, list[Observed]]:
    """A move's events per role, each role's in order."""
    grouped: dict[str, list[Observed]] = {}
    for role, observed in events:
        grouped.setdefault(role, []).append(observed)
    return grouped


def _fits(traces: tuple[MachineTrace, ...], node: _Node,
          move: WorldMove) -> list[tuple[tuple[int, ...], frozenset[tuple[str, int]]]]:
    """Every (positions, binding) after ``move`` whose events are the next recorded steps of their machines."""
    return [(tuple(positions), frozenset(bound.items())) for positions, bound in _bindings(traces, node, move)[0]]


def _bindings(traces: tuple[MachineTrace, ...], node: _Node,
              move: WorldMove) -> tuple[list[tuple[list[int], dict[str, int]]], str]:
    """The ways ``move`` fits (positions, role -> recorded machine), and why it does not when there is none."""
    bound = dict(node.binding)
    unprepared = [i for i in range(len(node.world.gens)) if f"g{i}" not in bound
                  and is_initial_generation(node.world, i)]
    # A move of a generation never prepared (its admission feeds only the session and a chain, with
    # ``prepared_in_a_later_step``) is tried for the first such generation only, as a move that binds one.
    mover = move.generation
    if mover is not None and mover in unprepared and mover != unprepared[0]:
        return [], f"g{mover} is a generation like g{unprepared[0]}, tried instead"
    options = [(list(node.positions), bound)]
    for role, steps in _grouped(move.events).items():
        generation = role_generation(role)
        if role not in bound and generation in unprepared and generation != unprepared[0]:
            return [], f"{role} is a generation like g{unprepared[0]}, tried instead"
        widened = []
        why = ""
        for positions, roles in options:
            if role in roles:
                candidates = [roles[role]]
            else:
                taken = set(roles.values())
                candidates = [i for i, trace in enumerate(traces)
                              if trace.kind == role_kind(role) and i not in taken and positions[i] == 0]
                if not candidates:
                    why = f"{role}: no recorded {role_kind(role)} left to be it"
            for index in candidates:
                position = positions[index]
                recorded = traces[index].steps[position:position + len(steps)]
                if tuple(recorded) == tuple(steps):
                    widened.append(([*positions[:index], position + len(steps), *positions[index + 1:]],
                                    {**roles, role: index}))
                elif not why:
                    why = _difference(role, traces[index], position, steps)
        options = widened
        if not options:
            return [], why
    return options, ""


def _difference(role: str, trace: MachineTrace, position: int, steps: Sequence[Observed]) -> str:
    """Why ``steps`` (a world role's) are not the next recorded steps of ``trace``."""
    for offset, step in enumerate(steps):
        index = position + offset
        if index >= len(trace.steps):
            return f"{role} as {trace.name}: the world feeds {step.describe()}; the run fed nothing more"
        if trace.steps[index] != step:
            return (f"{role} as {trace.name} step {index + 1}: the world feeds {step.describe()}; the run fed "
                    f"{trace.steps[index].describe()}")
    return f"{role} as {trace.name}: fits"


def _mismatch(traces: tuple[MachineTrace, ...], driver: WorldDriver, node: _Node, path: tuple[str, ...],
              *, gave_up: bool) -> Mismatch:
    options = []
    for move in driver.moves(node.world):
        events = "; ".join(f"{role} {observed.describe()}" for role, observed in move.events)
        if move.broken is not None:
            why = f"breaks {move.broken[0]}: {move.broken[1]}"
        else:
            fits, why = _bindings(traces, node, move)
            why = why or ("fits (already explored)" if fits else "")
        options.append((move.label, events, why))
    return Mismatch(traces, node.positions, tuple(sorted(node.binding)), path, driver.describe(node.world),
                    tuple(options), gave_up)


__all__ = ["Inclusion", "MAX_NODES", "Mismatch", "check_inclusion"]
