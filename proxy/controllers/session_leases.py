"""Which proxy of a fleet owns a session: the registry asks here before it uses its copy of a session.

With a store only one process uses (memory, SQLite) every session is this proxy's: :class:`SoleOwner` grants at once,
with no I/O. With a shared store (PostgreSQL) the fleet's implementation (``StoreLeases``, issue 16 item 5) takes
the session's lease in the store (``TrajectoryStore.claim_session``), waits a bounded time while another live proxy
holds it, renews the leases of sessions with generations in flight, and releases a lease when its session's last
generation ended.

The registry's side of the contract:

- ``grant = await leases.acquire(session_id)`` before a request uses the session (prepare, finalize, abort). When
  ``grant.changed`` the in-memory copy is stale (another proxy owned the session since): drop it and load the
  session from the store again. Raises :class:`SessionBusyError` when another proxy kept it past the wait.
- ``append_step(..., fence=grant.epoch)`` on commit (None: no fence); a ``LeaseLostError`` from it means the copy is
  stale: the commit fails (the agent retries on the session's owner) and the copy is dropped.
- ``leases.generation_started(session_id)`` / ``await leases.generation_ended(session_id)`` around each
  generation (renewal, and the release when none is left). ``generation_ended`` is awaited from cleanup paths,
  often in a task being cancelled: an implementation runs to its end regardless, shielding whatever it waits for
  (``StoreLeases`` shields its release; ``SoleOwner`` never waits). The registry adds no shield of its own: the
  usual implementation waits for nothing, and a scope is a cost on every request (issue 21 item 2).
"""

from __future__ import annotations

from typing import Protocol

import attrs

from proxy.api.error_mapping import CodedError
from proxy.api.errors import ErrorCode


class SessionBusyError(CodedError):
    """Another proxy of the fleet holds the session's lease (answered 409 ``session_busy`` with Retry-After)."""

    code = ErrorCode.SESSION_BUSY.value

    def __init__(self, session_id: str, owner: str | None, retry_after: float) -> None:
        # The holder's name (host:port:pid) is for the log, not for the client.
        super().__init__(f"session {session_id!r} is being served by another proxy of the fleet for up to "
                         f"{retry_after:.1f} s more; retry after that")
        self.session_id = session_id
        self.owner = owner
        self.retry_after = retry_after


@attrs.frozen
class LeaseGrant:
    """This proxy may use the session: its fence (None when the store is not shared) and whether the owner changed
    since this proxy last held it (the in-memory copy must then be reloaded; ``StoreLeases`` also says so when it
    has no record of holding the session, so a copy it cannot vouch for is never trusted)."""

    epoch: int | None = None
    changed: bool = False


class SessionLeases(Protocol):
    """See the module docstring."""

    async def acquire(self, session_id: str) -> LeaseGrant: ...

    def generation_started(self, session_id: str) -> None: ...

    async def generation_ended(self, session_id: str) -> None: ...


@attrs.define(eq=False)
class SoleOwner:
    """One proxy owns every session (its store is not shared): every call is free."""

    async def acquire(self, session_id: str) -> LeaseGrant:
        return LeaseGrant()

    def generation_started(self, session_id: str) -> None:
        pass

    async def generation_ended(self, session_id: str) -> None:
        pass


__all__ = ["LeaseGrant", "SessionBusyError", "SessionLeases", "SoleOwner"]
