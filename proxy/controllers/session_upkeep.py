"""The registry's upkeep: the memory budget (idle sessions finalized, tombstones expired: ``session_reaper.py`` calls
these) and its reports (``/health``, the debug views, the trajectory viewer).

A mixin of :class:`~proxy.controllers.session_registry.SessionRegistry`, split out to keep that module to its one
job (a step's life, finalize and the store): these methods read the registry's session table and take a
session's lock exactly as its own methods do; the decisions they take are pure and live in ``session_expiry.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from proxy.controllers.session_entries import LockedSession, RegistryStatistics
from proxy.controllers.session_expiry import ExpiryPolicy
from proxy.trajectory.session import Session
from proxy.trajectory.session_memory import TOMBSTONE_BYTES
from proxy.trajectory.session_results import ExportJob, SessionDebugView
from proxy.trajectory.store import TrajectoryStore

log = logging.getLogger("dressage_proxy.sessions")


class SessionUpkeep:
    """The registry's memory budget and reports (see the module docstring)."""

    # Provided by SessionRegistry.
    _sessions: dict[str, LockedSession]
    _idle_finalized: int
    _expired_tombstones: int
    store: TrajectoryStore
    clock: Callable[[], float]
    # The registry's export of a finalized session (SessionRegistry._export): the idle finalize runs it too.
    _export: Callable[[LockedSession, ExportJob], Awaitable[None]]


    # -- the memory budget: idle sessions and tombstones (session_reaper.py calls these) --------------------------

    async def finalize_idle(self, policy: ExpiryPolicy) -> list[str]:
        """Finalize every session idle for ``policy.idle_timeout`` (reason ``idle_timeout``, no reward), as
        ``finalize`` would: its segments wait in the store. A session with a generation in flight is left alone
        (its machine says so); one a request reached since the sweep looked keeps going. Returns the finalized ids
        (an export that fails is counted as finalize counts it, and the session waits for a finalize to retry)."""
        now = self.clock()
        # Sessions still holding their data (ACTIVE, or an export in progress or failed: the machine ignores the
        # idle timer in those), listed first: the loop below awaits, and sessions come and go meanwhile.
        idle = [sid for sid, locked in self._sessions.items()
                if locked.loaded and locked.session.trie is not None and policy.is_idle(locked.last_activity, now)]
        return [sid for sid in idle if await self._finalize_if_idle(sid, policy)]

    async def _finalize_if_idle(self, session_id: str, policy: ExpiryPolicy) -> bool:
        """Finalize one session if it is still idle once its lock is held (no step can arrive in between)."""
        locked = self._sessions.get(session_id)
        if locked is None:
            return False
        async with locked.lock:
            if not policy.is_idle(locked.last_activity, self.clock()):
                return False
            job = locked.session.begin_idle_finalize()
            if job is None:
                return False
            locked.export_done = trio.Event()
        # As in finalize: the export runs to its end (a POST /session/finalize meanwhile waits for it).
        with trio.CancelScope(shield=True):
            await self._export(locked, job)
        if locked.session.result is None:
            return False
        self._idle_finalized += 1
        idle = self.clock() - locked.last_activity
        log.info("session %r finalized after %.0f s without a request (idle_timeout)", session_id, idle,
                 extra={"session_id": session_id, "reason": "idle_timeout", "idle_seconds": round(idle, 3)})
        return True

    async def expire_tombstones(self, policy: ExpiryPolicy) -> int:
        """Forget the tombstones released ``policy.tombstone_ttl`` ago, here and in the store: a late step of such a
        session id then starts a new session. Returns how many were forgotten."""
        now = self.clock()
        # Chosen and removed with no await in between: nothing can interleave.
        expired = [sid for sid, locked in self._sessions.items()
                   if locked.released_at is not None and policy.is_expired(locked.released_at, now)]
        for sid in expired:
            del self._sessions[sid]
        self._expired_tombstones += len(expired)
        if expired:
            await self.store.forget_sessions(expired)
        return len(expired)

    def held_bytes(self) -> int:
        """Approximate bytes the sessions hold: their committed steps, and ``TOMBSTONE_BYTES`` per tombstone."""
        return sum(
            locked.session.held_bytes if locked.session.trie is not None else TOMBSTONE_BYTES
            for locked in self._sessions.values()
        )

    async def approximate_bytes(self) -> int:
        """Approximate bytes held by sessions, and by the store's segments when the store keeps them in memory: what
        ``--memory-budget`` bounds (a durable store's segments are on disk, and sizing them would scan the store)."""
        if not self.store.in_memory:
            return self.held_bytes()
        return self.held_bytes() + (await self.store.statistics()).bytes

    # -- reporting ---------------------------------------------------------------------------------------------------

    def debug_view(self, session_id: str) -> SessionDebugView | None:
        """The session at a glance, or None if unknown."""
        locked = self._sessions.get(session_id)
        return locked.session.debug_view() if locked is not None else None

    def session_ids(self) -> list[str]:
        """Every session the registry knows, tombstones included, oldest first (the trajectory viewer's list)."""
        return list(self._sessions)

    def peek(self, session_id: str) -> Session | None:
        """The session's sync core for read-only reporting (``proxy/ui/registry_source.py``), or None if unknown.
        Callers read it in one go, without an await in between, and change nothing."""
        locked = self._sessions.get(session_id)
        return locked.session if locked is not None else None

    def statistics(self) -> RegistryStatistics:
        """Sessions by state, generations in flight, steps committed."""
        states: dict[str, int] = {}
        in_flight = steps = tombstones = 0
        for locked in self._sessions.values():
            stats = locked.session.machine.statistics()
            states[stats.state] = states.get(stats.state, 0) + 1
            in_flight += stats.in_flight
            steps += stats.steps
            tombstones += locked.session.trie is None
        return RegistryStatistics(
            len(self._sessions), states, in_flight, steps, tombstones, self.held_bytes(), self._idle_finalized,
            self._expired_tombstones,
        )


__all__ = ["SessionUpkeep"]
