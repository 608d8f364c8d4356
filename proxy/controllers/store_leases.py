"""``StoreLeases``: the fleet's :class:`~proxy.controllers.session_leases.SessionLeases`, over a shared store's leases.

Several proxies share one store (PostgreSQL) behind a load balancer that hashes the session header, so a session's
requests normally reach one proxy. When that proxy dies, or the balancer's ring moves, another proxy receives the
session: the lease in the store (``TrajectoryStore.claim_session``) decides who may use it, and its epoch fences the
stale owner's commits (``append_step(fence=epoch)``), so a session never has two writers.

What this proxy keeps per session (:class:`_Held`): the epoch it last held (to say ``changed`` when another proxy
owned the session in between), how many of its generations are in flight (their leases are renewed every
``lease_seconds / 3`` by :meth:`StoreLeases.run_renewal`, a task of the proxy's nursery), and a lock that orders this
proxy's claims and releases of the session.

- ``acquire`` claims the lease. While another proxy holds it, it polls the store (each call does its I/O off the
  event loop) until the holder's lease runs out, at most the holder's ``retry_after`` plus :data:`PATIENCE`; a holder
  that is still alive by then renewed it, and the request is answered 409 ``session_busy`` with ``Retry-After``.
  ``changed`` is True when the epoch moved since this proxy last held the session, and when this proxy has no
  record of holding it (it has no copy of the session it could trust).
- ``generation_ended`` of the session's last generation in flight releases the lease, so the next proxy the ring
  sends the session to takes it at once. This proxy stays the owner in the store, so its own next claim keeps the
  epoch (``changed`` False, the in-memory copy stays). A release never undoes another request's claim: it is
  skipped when an ``acquire`` came after the latest generation started (that request may not have started its
  generation yet).

Why no state machine: the lease's states (free, held and idle, held with generations in flight, lost) live in the
store's record (owner, epoch, expiry), which every proxy changes; this proxy cannot observe them except by asking
the store, and "lost" shows only as the fence's ``LeaseLostError`` in the registry. What is local is a count and a
remembered epoch, each changed in one place; the only ordering question (a release racing a new claim) is settled by
the per-session lock and the acquisition count.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections import OrderedDict

import attrs
import trio

from proxy.controllers.session_leases import LeaseGrant, SessionBusyError, SessionLeases, SoleOwner
from proxy.trajectory.store import TrajectoryStore

log = logging.getLogger("dressage_proxy.fleet")

#: seconds an acquire waits past the holder's lease before it gives up (the holder renewed: it is alive and busy)
PATIENCE = 0.5
#: at most this many seconds between two claims while another proxy holds the lease
POLL_INTERVAL = 0.25
#: sessions remembered with nothing in flight; the oldest are forgotten past this (a forgotten session's next
#: acquire says ``changed``, so the registry reloads it from the store: correct, one load more)
REMEMBERED_SESSIONS = 65_536


def default_proxy_id(host: str, port: int) -> str:
    """``host:port:pid``: unique among the proxies of a fleet (``--proxy-id`` overrides it). With port 0 (an
    ephemeral port, not known yet) a random tag keeps two proxies of one process apart (tests run such fleets)."""
    name = host if host not in ("0.0.0.0", "::", "") else socket.gethostname()
    tag = f":{secrets.token_hex(4)}" if port == 0 else ""
    return f"{name}:{port}:{os.getpid()}{tag}"


@attrs.define(eq=False)
class _Held:
    """What this proxy knows of one session's lease."""

    # The epoch of this proxy's last granted claim (None: never granted here).
    epoch: int | None = None
    # Generations of this proxy using the session now.
    in_flight: int = 0
    # Acquires started so far, and their count at the latest generation_started: when they differ, a request
    # acquired the session after the latest generation started and may not have started its own yet, so the
    # release owed to the last generation's end is skipped (the lease then runs out on its own, or is renewed).
    acquisitions: int = 0
    acquisitions_at_start: int = 0
    lock: trio.Lock = attrs.field(factory=trio.Lock)


@attrs.define(eq=False)
class StoreLeases:
    """Session leases in a shared store (see the module docstring)."""

    store: TrajectoryStore
    #: this proxy's name in the store's lease records
    owner: str
    #: seconds a lease lasts without renewal (``--session-lease-seconds``)
    lease_seconds: float = 15.0
    patience: float = PATIENCE
    poll_interval: float = POLL_INTERVAL
    _sessions: OrderedDict[str, _Held] = attrs.field(factory=OrderedDict, init=False)

    # -- the registry's side (proxy/controllers/session_leases.py) -----------------------------------------------

    async def acquire(self, session_id: str) -> LeaseGrant:
        held = self._held(session_id)
        held.acquisitions += 1
        deadline: float | None = None
        async with held.lock:
            while True:
                claim = await self.store.claim_session(session_id, self.owner, self.lease_seconds)
                if claim.granted:
                    break
                now = trio.current_time()
                if deadline is None:
                    deadline = now + max(0.0, claim.retry_after) + self.patience
                if now >= deadline:
                    log.info("session %s: still held by %s after %.1f s; answered session_busy", session_id,
                             claim.owner, self.patience + claim.retry_after,
                             extra={"session_id": session_id, "holder": claim.owner})
                    raise SessionBusyError(session_id, claim.owner, claim.retry_after)
                # Just past the holder's expiry, or the next poll, whichever comes first.
                await trio.sleep(min(self.poll_interval, deadline - now, max(0.0, claim.retry_after) + 0.01))
        changed = held.epoch != claim.epoch
        if changed and held.epoch is not None:
            log.info("session %s: taken back at epoch %d (another proxy held it since epoch %d)", session_id,
                     claim.epoch, held.epoch, extra={"session_id": session_id, "epoch": claim.epoch})
        held.epoch = claim.epoch
        return LeaseGrant(claim.epoch, changed)

    def generation_started(self, session_id: str) -> None:
        held = self._held(session_id)
        held.in_flight += 1
        held.acquisitions_at_start = held.acquisitions

    async def generation_ended(self, session_id: str) -> None:
        held = self._sessions.get(session_id)
        if held is None or held.in_flight == 0:
            log.error("session %s: generation_ended without a generation in flight; ignored", session_id)
            return
        held.in_flight -= 1
        if held.in_flight:
            return
        # Shielded and bounded: a release is owed even when the request that ended is being cancelled, and a store
        # that does not answer only delays the hand-over until the lease runs out.
        with trio.CancelScope(shield=True), trio.move_on_after(self.lease_seconds):
            async with held.lock:
                if held.in_flight or held.acquisitions != held.acquisitions_at_start:
                    return  # acquired again since: the new user keeps the lease
                try:
                    await self.store.release_session(session_id, self.owner)
                except Exception:
                    log.warning("session %s: releasing its lease failed; it runs out in %.0f s", session_id,
                                self.lease_seconds, exc_info=True, extra={"session_id": session_id})
        self._forget_idle()

    # -- the proxy's side ----------------------------------------------------------------------------------------

    def busy_sessions(self) -> list[str]:
        """Sessions with generations in flight here (their leases are renewed)."""
        return [session_id for session_id, held in self._sessions.items() if held.in_flight]

    async def renew_once(self) -> int:
        """Renew the leases of the sessions with generations in flight; returns how many were asked for."""
        busy = self.busy_sessions()
        if busy:
            await self.store.renew_sessions(self.owner, busy, self.lease_seconds)
        return len(busy)

    async def run_renewal(self) -> None:
        """Renew every ``lease_seconds / 3`` until cancelled (a task of the proxy's nursery). A renewal that fails
        is logged and tried again at the next tick: two ticks fit in a lease."""
        while True:
            await trio.sleep(self.lease_seconds / 3)
            try:
                await self.renew_once()
            except Exception:
                log.warning("renewing %d session lease(s) failed; retrying in %.1f s", len(self.busy_sessions()),
                            self.lease_seconds / 3, exc_info=True)

    # -- plumbing ------------------------------------------------------------------------------------------------

    def _held(self, session_id: str) -> _Held:
        held = self._sessions.get(session_id)
        if held is None:
            held = self._sessions[session_id] = _Held()
        else:
            self._sessions.move_to_end(session_id)
        return held

    def _forget_idle(self) -> None:
        """Forget the least recently used idle sessions past :data:`REMEMBERED_SESSIONS`."""
        excess = len(self._sessions) - REMEMBERED_SESSIONS
        if excess <= 0:
            return
        for session_id in list(self._sessions)[:excess]:
            held = self._sessions[session_id]
            if not held.in_flight and not held.lock.locked():
                del self._sessions[session_id]


async def run_lease_renewal(leases: SessionLeases) -> None:
    """The proxy's renewal task (``proxy/cli.py:run_proxy``): renews while ``leases`` are a shared store's, returns
    at once for a :class:`SoleOwner`."""
    if isinstance(leases, StoreLeases):
        await leases.run_renewal()


def session_leases_for(store: TrajectoryStore, owner: str, lease_seconds: float) -> SessionLeases:
    """``StoreLeases`` over a shared store, else :class:`SoleOwner` (nothing to claim: one process uses it)."""
    if getattr(store, "shared", False):
        return StoreLeases(store, owner, lease_seconds)
    return SoleOwner()


__all__ = ["PATIENCE", "StoreLeases", "default_proxy_id", "run_lease_renewal", "session_leases_for"]
