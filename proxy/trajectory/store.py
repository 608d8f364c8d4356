"""The trajectory store: the step journal of live sessions, finalized segments, their two-phase reads, and (for a
fleet) session leases and the rollout control state. ``docs/storage.md`` has the schema of the durable back ends.

:class:`TrajectoryStore` is the interface; every call is async (a durable back end does I/O on worker threads,
never on the event loop). Back ends: :class:`~proxy.trajectory.memory_store.InMemoryTrajectoryStore` (``--store
memory``: tests, and programs that build a ``ProxyConfig`` in code), SQLite in WAL mode (the command line's
default) and PostgreSQL (several proxies sharing one store); ``proxy/trajectory/stores/`` opens one from a
``--store`` URL (:func:`proxy.trajectory.stores.open_store`).

**Live sessions** (item 3 of issue 16): ``append_step`` records one committed step's journal record (opaque bytes,
``proxy/trajectory/step_journal.py`` builds and replays them) and is durable when it returns: the registry awaits
it before a commit's response is released. ``load_session`` gives a session's state and, while it is active, its
journal in step order, from which the registry rebuilds the session on first use after a restart.

**Finalize** is ``write``: the segments, the session's state ``finalized`` with its finalize result (the answer
every later finalize gets), and the removal of its journal, in one transaction. ``mark_aborted`` records an
abort. A session's state outlives the process: a finalized or aborted id stays so across restarts, until
``forget_sessions`` (the tombstone TTL) removes its record.

**Reads cannot lose data.** ``read(drain=True)`` leases what it returns (``ReadResult.lease_id``) for
``lease_seconds``: leased segments are skipped by other draining reads; ``acknowledge(lease_id)`` deletes them (and
marks a session whose last segment went ``drained``); an unacknowledged lease expires and its segments are
readable again. A read without drain returns leased segments too and leases nothing.

**Writing is total.** A store must be able to write every segment the proxy builds from accepted input; a write
that fails is a store fault (the registry logs it and keeps the session for a retry, it never drops committed
steps). ``write`` is atomic: it changes nothing unless it stores every segment.

**Fleet** (``shared`` back ends only; single-process stores grant every claim): a session is owned by one proxy at a
time. ``claim_session`` takes or keeps the lease (granted when the session has no owner, the caller owns it, or
the owner's lease ran out; the ``epoch`` grows by one whenever the owner changes); ``append_step`` with ``fence``
(the epoch the caller holds) refuses with :class:`LeaseLostError` once another proxy took the session, so two
owners never both write. ``renew_sessions`` extends the caller's leases of sessions with generations in flight;
``release_session`` ends a lease early (the owner stays, so its next claim keeps the same epoch). ``control`` and
``set_control`` keep the rollout gate's pause state and weight version, so a proxy that joins during a pause
starts paused.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

import attrs

from proxy.api.error_mapping import CodedError
from proxy.api.errors import ErrorCode

#: seconds a draining read's lease lasts before its segments are readable again (``--read-lease-seconds``)
DEFAULT_READ_LEASE_SECONDS = 300.0


class LeaseLostError(CodedError):
    """Another proxy took the session's lease: this proxy's copy of the session is stale and must not be written.
    Answered 503 ``session_moved`` with ``Retry-After: 1`` (the retry reaches the session's owner)."""

    code = ErrorCode.SESSION_MOVED.value
    retry_after = 1.0

    def __init__(self, session_id: str, epoch: int | None = None) -> None:
        super().__init__(f"session {session_id!r} is owned by another proxy now (lease epoch {epoch})")
        self.session_id = session_id
        self.epoch = epoch


@attrs.frozen
class StoreStatistics:
    """A frozen report for ``GET /trajectory/stats``."""

    sessions: int
    segments: int
    tokens: int
    bytes: int
    # Lifetime counters.
    written_sessions: int
    drained_segments: int
    cleaned_sessions: int
    # Segments leased to a draining read and not acknowledged yet (they are still in ``segments``).
    leased_segments: int = 0
    # The registry's export failures (a store reports none itself): failed export attempts since start, and the
    # sessions whose export failed and waits for a finalize to retry it (most recent last, bounded).
    export_failures: int = 0
    export_failed_sessions: tuple[str, ...] = ()
    # The registry's memory (a store reports none itself; docs/operations.md "Memory budget"): sessions it knows
    # (tombstones included), how many of them are tombstones, their approximate bytes, and approximate_bytes: those
    # plus the store's ``bytes``, what --memory-budget bounds. Lifetime counters: sessions finalized for idleness,
    # tombstones expired.
    registry_sessions: int = 0
    registry_tombstones: int = 0
    registry_bytes: int = 0
    approximate_bytes: int = 0
    idle_finalized_sessions: int = 0
    expired_tombstones: int = 0

    def as_json(self) -> dict[str, Any]:
        """The report as a JSON object."""
        return attrs.asdict(self)


@attrs.frozen
class ReadResult:
    """What a read returns: the segments, and for a draining read the lease to acknowledge (None: nothing leased)."""

    segments: tuple[dict[str, Any], ...]
    lease_id: str | None = None
    # Seconds until the lease expires and its segments are readable again.
    lease_seconds: float | None = None
    # A draining read that leased nothing: the selected segments another unexpired lease holds (an empty drain of a
    # session someone else is draining says so, without a second read to tell it from an unknown id); else 0.
    skipped_leased: int = 0


@attrs.frozen
class AckResult:
    """What an acknowledgement deleted: how many segments, and the sessions left with none (now ``drained``)."""

    segments: int
    emptied_sessions: tuple[str, ...] = ()


#: a session's recorded states
ACTIVE, FINALIZED, ABORTED, DRAINED = "active", "finalized", "aborted", "drained"


@attrs.frozen
class StoredSession:
    """What the store knows of one session."""

    session_id: str
    # ACTIVE, FINALIZED, ABORTED or DRAINED.
    state: str
    # Active: the journal records of its committed steps, in step order (empty otherwise).
    steps: tuple[bytes, ...] = ()
    # Finalized or drained: the finalize result (``FinalizeResult`` as JSON). Aborted: ``{"reason": ...}``.
    result: Mapping[str, Any] | None = None


@attrs.frozen
class SessionClaim:
    """The answer to ``claim_session``."""

    granted: bool
    # The lease epoch: the caller's fence for ``append_step`` when granted; the holder's otherwise.
    epoch: int
    # Who holds the lease now (the caller when granted).
    owner: str | None
    # Not granted: seconds until the holder's lease runs out (then a claim can take it).
    retry_after: float = 0.0


@attrs.frozen
class ControlState:
    """The rollout gate's state as the fleet shares it."""

    paused: bool = False
    weight_version: str | None = None


class TrajectoryStore(Protocol):
    """Where the journal of live sessions and finalized segments live (see the module docstring)."""

    #: True when several proxy processes may use the store at once (sessions are then claimed before use)
    shared: bool
    #: True when the segments live in the proxy's memory (the memory store): they count against --memory-budget.
    #: A durable store's segments are on disk, so /health neither counts them nor scans the store to size them.
    in_memory: bool

    # -- live sessions -----------------------------------------------------------------------------------------------

    async def load_session(self, session_id: str) -> StoredSession | None:
        """The session's state and (active) journal; None for a session the store never saw."""

    async def append_step(self, session_id: str, step_id: int, record: bytes, *, fence: int | None = None) -> None:
        """Record a committed step (durable on return); creates the session's record (active) on its first step.
        Raises LeaseLostError when ``fence`` is given and is not the session's lease epoch any more."""

    async def mark_aborted(self, session_id: str, reason: str) -> None:
        """Record that the session was aborted (its journal is dropped)."""

    async def forget_sessions(self, session_ids: Sequence[str]) -> None:
        """Remove the records of sessions whose tombstones expired (their segments, if any, stay)."""

    # -- finalize and reads ------------------------------------------------------------------------------------------

    async def write(
        self, session_id: str, segments: Sequence[dict[str, Any]], *, result: Mapping[str, Any] | None = None
    ) -> int:
        """Finalize in one transaction: store the segments (replacing an earlier write of the session), record the
        session ``finalized`` with ``result`` (``drained`` at once when there is no segment), drop its journal.
        Returns the bytes stored (the segments' JSON size)."""

    async def read(
        self, *, session_id: str | None = None, trajectory_id: str | None = None, drain: bool = False,
        lease_seconds: float = DEFAULT_READ_LEASE_SECONDS,
    ) -> ReadResult:
        """Segments of one session, one segment, or (with neither id) all, in finalize order; ``drain`` leases them
        (skipping segments another unexpired lease holds; when it leased nothing, ``skipped_leased`` counts them,
        the case a caller needs to tell "drained by someone else now" from "nothing there"; 0 otherwise)."""

    async def acknowledge(self, lease_id: str) -> AckResult:
        """Delete the segments of a draining read's lease (an unknown or expired lease deletes nothing)."""

    def segments_since(self, *, since: float | None = None, batch_size: int = 256) -> AsyncIterator[list[dict[str, Any]]]:
        """Every stored segment written at or after ``since`` (seconds since the epoch), in finalize order, in batches
        of at most ``batch_size``, never the whole store in memory (``dressage-proxy export``)."""

    async def cleanup(self, *, max_age_seconds: float | None = None, max_sessions: int | None = None) -> int:
        """Forget the segments of old sessions; returns how many sessions were removed."""

    async def statistics(self) -> StoreStatistics:
        """Sizes and counters."""

    # -- fleet -------------------------------------------------------------------------------------------------------

    async def claim_session(self, session_id: str, owner: str, lease_seconds: float) -> SessionClaim:
        """Take or keep the session's lease for ``lease_seconds``."""

    async def renew_sessions(self, owner: str, session_ids: Sequence[str], lease_seconds: float) -> None:
        """Extend the caller's leases of these sessions (those it still holds)."""

    async def release_session(self, session_id: str, owner: str) -> None:
        """End the caller's lease now (it stays the owner, so a claim of its own keeps the epoch)."""

    async def control(self) -> ControlState:
        """The shared pause state and weight version."""

    async def set_control(self, state: ControlState) -> None:
        """Record the pause state and weight version for every proxy of the fleet."""

    # -- life --------------------------------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Make every write so far durable (the graceful shutdown's last step, ``proxy/controllers/lifecycle.py``)."""

    async def aclose(self) -> None:
        """Release connections and threads (the store is not used afterwards)."""


def json_size(value: Any) -> int:
    """Bytes of ``value`` as UTF-8 JSON (the ``bytes`` statistic). Total on anything the proxy stores: a
    lone surrogate, which the API refuses but a store must never fail on, is counted as the three bytes
    ``surrogatepass`` writes; a value JSON cannot hold is counted as its ``str``."""
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


__all__ = [
    "ABORTED", "ACTIVE", "AckResult", "ControlState", "DEFAULT_READ_LEASE_SECONDS", "DRAINED", "FINALIZED",
    "LeaseLostError", "ReadResult", "SessionClaim", "StoreStatistics", "StoredSession", "TrajectoryStore",
    "json_size",
]
