"""The checked world as the conformance check drives it; the one module of ``tests/conformance`` that knows the
world (``statemachines/checking/full_world.py`` and its step mechanism, ``statemachines/checking/step.py``).

The world is the full composition (the real gate, session, chains and generation machines, with an abstract
trainer, SGLang and clients), without its reductions (no symmetry, no data reductions), so that its generations keep
their positions and its machines their whole data. For each world, :meth:`WorldDriver.moves` runs the world's own
successor function and tells, for each move, every machine event it fed, in order. It watches through the world's
observer hook (``statemachines/checking/step.py:StepObserver``, in the world's config): ``take`` says where each
move begins, and ``WorldConfig.send``, the choke point every event of every machine goes through, tells each event
with the machine's role (``gate``, ``session``, ``c<k>``, ``g<i>``) and its outcome. Nothing of the world is patched.

The world has the controller's timing (``DEFERRED``): the controller queues a ``StartUpstream`` and a
``DropFromSession`` to the generation's driver task, so other events can come in between (a pause:
``AbortRequested`` before ``UpstreamStarted``; a client leaving before the request went out; another generation's
prepare or commit before the session counts a failed or cancelled one out). The world models that gap with two of its
own modelling choices, ``rid_in_a_later_step`` and ``drop_in_a_later_step`` (``statemachines/checking/
generation_step.py``): each is carried out in a move of its own, the driver's (``driver sends the request``,
``driver drops it from the session``). Without them the world never feeds ``UpstreamStarted`` in ``ABORTING``, a row
the controller takes whenever a pause lands before the driver sent its request. A third, ``prepared_in_a_later_step``,
splits prepare where the registry awaits the encode after admitting: another generation may be admitted in between,
and a client that leaves then is dropped from the session before its machine hears ``ClientDisconnected`` in RECEIVED.
"""

from __future__ import annotations

from typing import Any

import attrs

from statemachines.checking.explorer import Composition
from statemachines.checking.full_world import gate_session_generations
from statemachines.core import Snapshot
from tests.conformance.traces import CHAIN, GATE, GENERATION, SESSION, Observed, observe_step

#: The world's request starts and session drops wait for moves of their own (the driver's), as the controller's do.
DEFERRED = True


@attrs.frozen
class WorldMove:
    """One move of the world: its label, the next world, and each machine event it fed, in order."""

    label: str
    world: Any
    events: tuple[tuple[str, Observed], ...]

    @property
    def generation(self) -> int | None:
        """The generation whose move it is (the world labels them ``g<i>: ...``), None for the trainer's."""
        head = self.label.split(":", 1)[0]
        return int(head[1:]) if head[:1] == "g" and head[1:].isdigit() else None

    @property
    def broken(self) -> tuple[str, str] | None:
        """The invariant the move broke (or the refusal it met), if any: the world stops there."""
        return self.world.broken


@attrs.define
class _MoveLog:
    """The world's observer (``step.StepObserver``): the machine events its moves feed, and where each move begins."""

    events: list[tuple[str, Observed]] = attrs.field(factory=list)
    starts: list[int] = attrs.field(factory=list)

    def move_begins(self, label: str) -> None:
        self.starts.append(len(self.events))

    def sent(self, who: str, before: Snapshot, event: object, outcome: tuple[Snapshot, tuple] | str) -> None:
        if isinstance(outcome, str):
            # A refusal: the world stops there (the move is broken); recorded for the mismatch report.
            self.events.append((who, Observed(type(event).__name__, before.state.name, (), (), outcome)))
        else:
            after, effects = outcome
            self.events.extend((who, observed) for observed in observe_step(before, event, after, effects))


@attrs.define
class WorldDriver:
    """Runs a composition's moves and tells the events each one fed (its observer is ``log``)."""

    composition: Composition
    log: _MoveLog

    @property
    def initial(self) -> Any:
        return self.composition.initial

    def moves(self, world: Any) -> list[WorldMove]:
        """Every move enabled in ``world``, with its events."""
        self.log.events.clear()
        self.log.starts.clear()
        results = list(self.composition.successors(world))
        if len(self.log.starts) != len(results):
            raise AssertionError(f"{len(results)} moves but {len(self.log.starts)} began: is the observer set?")
        bounds = [*self.log.starts, len(self.log.events)]
        return [WorldMove(label, after, tuple(self.log.events[bounds[index]:bounds[index + 1]]))
                for index, (label, after) in enumerate(results)]

    def describe(self, world: Any) -> str:
        return self.composition.describe(world)


def conformance_world(generations: int, *, budget: int, pauses: int, partial_rollout: bool,
                      deferred: bool = DEFERRED, prepared_in_a_later_step: bool | None = None,
                      **machines: type) -> WorldDriver:
    """The full composition with ``generations`` generation machines, every choice of the environment on (clients
    leaving, upstream failures, stragglers, pause-wait timeouts, resumes keeping the weights, splices, a reply that
    hits its length on the end-of-turn token), no reduction,
    and with ``deferred`` the controller's timing (module docstring), driven and watched; ``prepared_in_a_later_step``
    overrides that one of the three (None: as ``deferred``). ``machines``: variant machine classes (``gate=``,
    ``session=``, ``chain=``, ``generation=``)."""
    log = _MoveLog()
    composition = gate_session_generations(
        generations, budget=budget, pauses=pauses, partial_rollout=partial_rollout, clients_may_leave=True,
        upstream_failures=True, stragglers=True, timeouts=True, same_weights_resumes=True, splices=True,
        symmetry=False, data_reductions=False, length_may_end_turn=True, rid_in_a_later_step=deferred,
        drop_in_a_later_step=deferred,
        prepared_in_a_later_step=deferred if prepared_in_a_later_step is None else prepared_in_a_later_step,
        observer=log, **machines,
    )
    return WorldDriver(composition, log)


def role_kind(role: str) -> str:
    """The machine kind of a world role: ``gate``, ``session``, ``c<k>`` (a chain), ``g<i>`` (a generation)."""
    if role in (GATE, SESSION):
        return role
    return {"c": CHAIN, "g": GENERATION}[role[0]]


def role_generation(role: str) -> int | None:
    """The generation's position of a ``g<i>`` role, else None."""
    return int(role[1:]) if role_kind(role) == GENERATION else None


def is_initial_generation(world: Any, index: int) -> bool:
    """Generation ``index`` of ``world`` was never prepared (every such generation is the same)."""
    return not world.gens[index].prepared


__all__ = ["DEFERRED", "WorldDriver", "WorldMove", "conformance_world", "is_initial_generation",
           "role_generation", "role_kind"]
