"""The checked world as the conformance check drives it; the one module of ``tests/conformance`` that knows the
world's internals (``statemachines/full_composition.py`` and ``generation_world.py``).

The world is the full composition (the real gate, session, chains and generation machines, with an abstract
trainer, SGLang and clients), without its reductions (no symmetry, no data reductions), so that its generations keep
their positions and its machines their whole data. For each world, :meth:`WorldDriver.moves` runs the world's own
successor function and tells, for each move, every machine event it fed, in order: the world's choke point
``Config.send`` (every event of every machine goes through it, labelled with the machine's role: ``gate``,
``session``, ``c<k>``, ``g<i>``) is observed while the moves run (``gw.take``, which runs them one after the other,
marks where each begins).

Two differences of timing are taken out of the world's way (``DEFERRED``): the world carries out a
``StartUpstream`` and a ``DropFromSession`` in the step that emits them, while the controller queues them to the
generation's driver task, so other events can come in between: a pause (``AbortRequested`` before
``UpstreamStarted``), a client leaving before the request went out, another generation's prepare or commit before
the session counts a failed or cancelled one out. The adapter holds both back for moves of their own, the driver's:
a start in the world's own ``start_pending`` record (its ``client reads`` move carries it out), a drop as the
attachment the session still counts on a generation that has ended (``driver drops it from the session``). Without
that the world never feeds ``UpstreamStarted`` in ``ABORTING``, a row the controller takes whenever a pause lands
before the driver sent its request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import attrs

from statemachines import full_composition as fc
from statemachines import generation as gen_sm
from statemachines import generation_world as gw
from statemachines.explorer import Composition
from tests.conformance.traces import CHAIN, GATE, GENERATION, SESSION, Observed, observe_step

#: The world's request starts and session drops wait for moves of their own (the driver's), as the controller's do.
DEFERRED = True
# The world's label of the move that carries out a held-back start, and what it means here.
_HELD_START_LABEL = ": client reads"
_DRIVER_START_LABEL = ": driver starts the request"
_DRIVER_DROP_LABEL = "driver drops it from the session"


def conformance_world(generations: int, *, budget: int, pauses: int, partial_rollout: bool,
                      **machines: type) -> Composition:
    """The full composition with ``generations`` generation machines, every choice of the environment on (clients
    leaving, upstream failures, stragglers, pause-wait timeouts, resumes keeping the weights, splices) and no
    reduction. ``machines``: variant machine classes (``gate=``, ``session=``, ``chain=``, ``generation=``)."""
    return fc.gate_session_generations(
        generations, budget=budget, pauses=pauses, partial_rollout=partial_rollout, clients_may_leave=True,
        upstream_failures=True, stragglers=True, timeouts=True, same_weights_resumes=True, splices=True,
        symmetry=False, data_reductions=False, **machines,
    )


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


@attrs.frozen
class WorldMove:
    """One move of the world: its label, the next world, and each machine event it fed, in order."""

    label: str
    world: Any
    events: tuple[tuple[str, Observed], ...]

    @property
    def broken(self) -> tuple[str, str] | None:
        """The invariant the move broke (or the refusal it met), if any: the world stops there."""
        return self.world.broken


@attrs.define
class WorldDriver:
    """Runs a composition's moves and tells the events each one fed."""

    composition: Composition
    deferred: bool = DEFERRED

    @property
    def initial(self) -> Any:
        return self.composition.initial

    def moves(self, world: Any) -> list[WorldMove]:
        """Every move enabled in ``world``, with its events."""
        with _observing(self.deferred) as (log, starts):
            results = list(self.composition.successors(world))
        bounds = [*starts, len(log)]
        moves = []
        for index, (label, after) in enumerate(results):
            events = tuple(log[bounds[index]:bounds[index + 1]])
            if self.deferred:
                label = label.replace(_HELD_START_LABEL, _DRIVER_START_LABEL)
            moves.append(WorldMove(label, after, events))
        return moves

    def describe(self, world: Any) -> str:
        return self.composition.describe(world)


@contextlib.contextmanager
def _observing(deferred: bool) -> Iterator[tuple[list[tuple[str, Observed]], list[int]]]:
    """While the world's moves run: every machine event they feed (``log``), where each move's begin (``starts``),
    and, with ``deferred``, the driver's work held back for moves of their own (module docstring)."""
    log: list[tuple[str, Observed]] = []
    starts: list[int] = []
    send, take, carry_out, generation_moves = gw.Config.send, gw.take, gw.GenerationStep.carry_out, gw.generation_moves

    def observed_send(config: gw.Config, cls: type, snapshot: Any, event: object, who: str) -> tuple:
        try:
            after, effects = send(config, cls, snapshot, event, who)
        except gw.Broken as refused:
            log.append((who, Observed(type(event).__name__, snapshot.state.name, (), (), refused.detail)))
            raise
        log.extend((who, observed) for observed in observe_step(snapshot, event, after, effects))
        return after, effects

    def marked_take(world: Any, moves: list, new_step: Any, symmetry: bool) -> list:
        def marked(move: Any) -> Any:
            def run(step: gw.GenerationStep) -> object:
                starts.append(len(log))
                return move(step)
            return run
        return take(world, [(label, marked(move)) for label, move in moves], new_step, symmetry)

    def deferring_carry_out(step: gw.GenerationStep, i: int, effect: object) -> None:
        if isinstance(effect, gen_sm.StartUpstream) and step.gens[i].client is gw.Client.WAITING:
            step.set(i, start_pending=effect)
        elif not isinstance(effect, gen_sm.DropFromSession):
            carry_out(step, i, effect)
        # A DropFromSession is held: the generation keeps the attachment the session counts until its driver drops it.

    def with_driver_drops(world: Any, config: gw.Config, prepares: Any) -> list:
        moves = generation_moves(world, config, prepares)
        for i, g in enumerate(world.gens):
            if g.attachment is not None and g.machine.state in gen_sm.ABSORBING and not g.commits:
                moves.append((f"g{i}: {_DRIVER_DROP_LABEL}", lambda run, i=i: run.drop(i)))
        return moves

    gw.Config.send, gw.take = observed_send, marked_take
    if deferred:
        gw.GenerationStep.carry_out, gw.generation_moves = deferring_carry_out, with_driver_drops
    try:
        yield log, starts
    finally:
        gw.Config.send, gw.take, gw.GenerationStep.carry_out, gw.generation_moves = (
            send, take, carry_out, generation_moves)


__all__ = ["DEFERRED", "WorldDriver", "WorldMove", "conformance_world", "is_initial_generation",
           "role_generation", "role_kind"]
