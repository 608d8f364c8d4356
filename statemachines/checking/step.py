"""The one step mechanism of every world: a move runs on a fresh ``Step`` of a world and the step builds the next one.

A world is a frozen, hashable record (the explorer's state). Its successors are *moves*: functions of a ``Step``,
each labelled for traces. ``take`` runs each move on a fresh step of the world; the step holds mutable copies of the
world's records while the move feeds the real machines and carries out their effects, and ``Step.world()`` freezes
them into the next world. A violation noticed while a step runs (a machine refuses an event, an effect does not fit
the world, a per-step fact such as a token accepted too late) is raised as ``Broken``: the next world then records
it in its ``broken`` field (what the step did up to it is kept for the trace), and an invariant built with
``invariants.not_broken`` reports it.

The machines are fed through ``WorldConfig.send``: ``cls.from_snapshot(snapshot).send(event)``, which is a pure
function of (table, snapshot, event), memoized per distinct triple; that changes the run time, never the states.

A ``StepObserver`` in ``WorldConfig.observer`` (None unless a test sets it) is told where each move begins (``take``)
and every machine event the move feeds (``WorldConfig.send``, the one choke point every event of every machine goes
through): the conformance test (``tests/conformance/``) compares those events with the running controllers'. The
observer only watches; it never changes what a step does.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs

from statemachines.checking.invariants import ACCEPTS
from statemachines.core import IllegalTransition, Machine, Snapshot, TableError


class Broken(Exception):
    """A per-step violation: the step's world is recorded with ``broken`` = (invariant, detail)."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(detail)
        self.invariant = invariant
        self.detail = detail


class StepObserver(Protocol):
    """Watches a world's moves (module docstring): where each begins, and each machine event it feeds."""

    def move_begins(self, label: str) -> None:
        """``take`` is about to run the move labelled ``label``."""

    def sent(self, who: str, before: Snapshot, event: object, outcome: tuple[Snapshot, tuple] | str) -> None:
        """The machine ``who`` (``gate``, ``session``, ``c<k>``, ``g<i>``) was fed ``event`` in ``before``:
        ``outcome`` is (snapshot after, effects), or why it refused."""


@attrs.frozen(kw_only=True)
class WorldConfig:
    """What every world's configuration has: the memo of the machines' pure step. A world subclasses it with its
    bounds, its modelling choices and its machine classes (variants for planted bugs)."""

    # (class, snapshot, event) -> (snapshot, effects), or the refusal's text.
    sent: dict[tuple[type, Snapshot, object], tuple[Snapshot, tuple] | str] = attrs.field(factory=dict, eq=False)
    # Told of every move and machine event (module docstring); None: nobody watches.
    observer: StepObserver | None = attrs.field(default=None, eq=False)

    def send(self, cls: type[Machine], snapshot: Snapshot, event: object, who: str) -> tuple[Snapshot, tuple]:
        """``cls.from_snapshot(snapshot).send(event)`` as a pure function, memoized; a refusal is ``Broken``."""
        key = (cls, snapshot, event)
        found = self.sent.get(key)
        if found is None:
            try:
                machine = cls.from_snapshot(snapshot)
                effects = tuple(machine.send(event))
                found = (machine.snapshot(), effects)
            except (IllegalTransition, TableError) as error:
                found = f"{type(error).__name__}: {error}"
            self.sent[key] = found
        if self.observer is not None:
            self.observer.sent(who, snapshot, event, found)
        if isinstance(found, str):
            raise Broken(ACCEPTS, f"{who}: {found}")
        return found


class Step(abc.ABC):
    """One step of a world: a move changes the step's copies of the world's records; ``world()`` freezes them."""

    def __init__(self, config: WorldConfig) -> None:
        self.config = config

    @abc.abstractmethod
    def world(self, broken: tuple[str, str] | None = None, *, symmetry: bool = True) -> Any:
        """The next world, with ``broken`` when the step broke an invariant (``symmetry``: the world may put its
        identical members in a canonical order)."""


Move = Callable[[Step], object]


def take(world: Any, moves: Sequence[tuple[str, Move]], new_step: Callable[[Any], Step],
         symmetry: bool = True) -> list[tuple[str, Any]]:
    """Run each move on a fresh step of ``world``: (label, next world). A move may return a note, which joins its
    label; a ``Broken`` becomes the next world's ``broken``, with what the step did up to it."""
    out = []
    for label, move in moves:
        run = new_step(world)
        if run.config.observer is not None:
            run.config.observer.move_begins(label)
        try:
            note = move(run)
        except Broken as broken:
            out.append((label, run.world((broken.invariant, broken.detail))))
            continue
        out.append((f"{label} ({note})" if note else label, run.world(symmetry=symmetry)))
    return out
