"""The lifecycle controller: one per proxy process; owns the ServiceLifecycle machine and carries out its effects.

Theory of operation (``docs/operations.md`` "Shutdown and signals" has the operator's view)
-----------------------------------------------------------------------------------------
Every generation asks :meth:`LifecycleController.admit` before it prepares (``GenerationController.start``) and
says :meth:`LifecycleController.ended` when its driver ends (or its prepare was refused): the machine counts them,
this controller keeps the members so that it can cut them. ``admit`` raises ``ApiError`` 503 ``shutting_down`` once
a stop was requested.

:meth:`request_stop` (the CLI calls it on SIGTERM and SIGINT) feeds ``StopRequested``. The effects:

- ``StopAccepting``: sets the event hypercorn's ``shutdown_trigger`` waits on (``serving/http_server.py``): the
  listener closes, idle keep-alive connections close, busy ones close after their answer;
- ``StartGraceTimer``: ``--shutdown-grace`` seconds later, ``GraceExpired``;
- ``CutGenerations``: every member is told ``shut_down()`` (``Generation.shut_down``: it ends like a generation
  whose client left, which commits nothing, and answers its client ``shutting_down``);
- ``FlushStore``: ``TrajectoryStore.flush()``, then ``StoreFlushed``; ``Stopped``: :meth:`run` returns.

Effects that need a task (the timer, the flush) are queued to :meth:`run`, which the CLI runs beside the server; the
others are carried out where the event was fed. Nothing here reads the machine's state: :attr:`draining` is the
``StopAccepting`` effect's trace.
"""

from __future__ import annotations

import logging
import math
from typing import Protocol

import attrs
import trio

from proxy.api import ApiError
from proxy.api.errors import ErrorCode
from proxy.trajectory.store import TrajectoryStore
from statemachines import service_lifecycle as sm
from statemachines.service_lifecycle import LifecycleStatistics, ServiceLifecycle

log = logging.getLogger("dressage_proxy.lifecycle")


class Cuttable(Protocol):
    """What the lifecycle needs of a generation (``proxy/controllers/generation_driver.py:Generation``)."""

    def shut_down(self) -> None:
        """The grace ran out: end now with the ``shutting_down`` error, committing nothing (sync, idempotent)."""


def shutting_down_error() -> ApiError:
    """The answer to a request the stopping proxy does not start, and to a generation it cuts."""
    return ApiError.of(
        ErrorCode.SHUTTING_DOWN, "the proxy is shutting down; nothing of this request was recorded: retry elsewhere",
    )


@attrs.define(eq=False)
class LifecycleController:
    """Owns the process's :class:`~statemachines.service_lifecycle.ServiceLifecycle` (module docstring)."""

    #: ``--shutdown-grace``: how long generations in flight may finish after the stop request
    grace: float
    store: TrajectoryStore
    machine: ServiceLifecycle = attrs.field(factory=ServiceLifecycle.new, init=False)
    _members: set[Cuttable] = attrs.field(factory=set, init=False)
    _stop_accepting: trio.Event = attrs.field(factory=trio.Event, init=False)
    # Effects that need a task, for run(): StartGraceTimer, FlushStore, Stopped.
    _work_send: trio.MemorySendChannel[object] = attrs.field(init=False)
    _work_recv: trio.MemoryReceiveChannel[object] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._work_send, self._work_recv = trio.open_memory_channel(math.inf)

    # -- read-only views -----------------------------------------------------------------------------------------

    @property
    def draining(self) -> bool:
        """True from the stop request on (``/ready`` answers not ready): no new generation is admitted."""
        return self._stop_accepting.is_set()

    def statistics(self) -> LifecycleStatistics:
        return self.machine.statistics()

    # -- the generations' calls ----------------------------------------------------------------------------------

    def admit(self, generation: Cuttable) -> None:
        """Count ``generation`` in flight, or raise 503 ``shutting_down`` (nothing was started)."""
        for effect in self._send(sm.GenerationWantsToStart()):
            if isinstance(effect, sm.AdmitGeneration):
                self._members.add(generation)
            elif isinstance(effect, sm.RefuseGeneration):
                raise shutting_down_error()

    def ended(self, generation: Cuttable) -> None:
        """An admitted generation ended (idempotent: a second call, or one never admitted, changes nothing)."""
        if generation in self._members:
            self._members.discard(generation)
            self._send(sm.GenerationEnded())

    # -- the process's calls -------------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop gracefully (SIGTERM, SIGINT); a second call while draining cuts what is left at once."""
        self._send(sm.StopRequested())

    async def wait_stop_accepting(self) -> None:
        """Return once the listener must close: hypercorn's ``shutdown_trigger``."""
        await self._stop_accepting.wait()

    async def run(self) -> None:
        """Carry out the effects that need a task, until ``Stopped`` (the store is flushed)."""
        async with trio.open_nursery() as nursery:
            async for item in self._work_recv:
                if isinstance(item, sm.StartGraceTimer):
                    nursery.start_soon(self._grace_timer)
                elif isinstance(item, sm.FlushStore):
                    nursery.start_soon(self._flush)
                elif isinstance(item, sm.Stopped):
                    break
            # The grace timer, if the last generation ended before it fired.
            nursery.cancel_scope.cancel()

    # -- the machine ---------------------------------------------------------------------------------------------

    def _send(self, event: object) -> list[object]:
        """Feed ``event``; carry out the synchronous effects now, queue the others to :meth:`run`."""
        effects = self.machine.send(event)
        for effect in effects:
            if isinstance(effect, sm.StopAccepting):
                log.info("stop requested: %d generation(s) in flight, grace %.1f s", len(self._members), self.grace,
                         extra={"in_flight": len(self._members), "grace_seconds": self.grace})
                self._stop_accepting.set()
            elif isinstance(effect, sm.CutGenerations):
                log.info("cutting %d generation(s) still in flight", effect.count, extra={"cut": effect.count})
                for member in list(self._members):
                    member.shut_down()
            elif isinstance(effect, (sm.StartGraceTimer, sm.FlushStore, sm.Stopped)):
                self._work_send.send_nowait(effect)
        return effects

    async def _grace_timer(self) -> None:
        await trio.sleep(self.grace)
        self._send(sm.GraceExpired())

    async def _flush(self) -> None:
        await self.store.flush()
        self._send(sm.StoreFlushed())


__all__ = ["Cuttable", "LifecycleController", "shutting_down_error"]
