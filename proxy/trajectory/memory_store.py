"""``--store memory``: every call of :class:`~proxy.trajectory.store.TrajectoryStore` in process memory, lost on exit.

The reference back end: the store contract tests (``tests/trajectory/store_contract/``) run every back end against
the same expectations, this one included. Dicts keep insertion order, so reads return sessions in finalize order
and segments in export order. ``shared`` is False: one process, so every claim is granted, but leases and fences are
kept exactly as a shared store keeps them (tests of the fleet logic run on it).

A drain frees at once here too: an acknowledged segment leaves the store (its session's record too once it is
empty), and ``bytes`` returns to what it was before the session's write.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import attrs

from proxy.trajectory.store import (
    ABORTED,
    ACTIVE,
    DEFAULT_READ_LEASE_SECONDS,
    DRAINED,
    FINALIZED,
    AckResult,
    ControlState,
    LeaseLostError,
    ReadResult,
    SessionClaim,
    StoredSession,
    StoreStatistics,
    json_size,
)


@attrs.define(eq=False)
class _Segments:
    """One finalized session's segments and their sizes."""

    written_at: float
    # Seconds since the epoch, for ``segments_since``.
    written_wall: float
    # trajectory_id -> segment, in export order.
    segments: dict[str, dict[str, Any]]
    tokens: dict[str, int]
    sizes: dict[str, int]


@attrs.define(eq=False)
class _Record:
    """One session's state, journal and lease."""

    state: str = ACTIVE
    steps: dict[int, bytes] = attrs.field(factory=dict)
    result: Mapping[str, Any] | None = None
    owner: str | None = None
    epoch: int = 0
    lease_until: float = 0.0


@attrs.define(eq=False)
class _Lease:
    """A draining read's lease: its segments (session id, trajectory id) until ``until``."""

    until: float
    segments: list[tuple[str, str]]


@attrs.define(eq=False)
class InMemoryTrajectoryStore:
    """Everything in process memory, lost on restart (see the module docstring)."""

    # Seconds since an arbitrary origin, for cleanup by age and lease expiry; injectable for tests.
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    # True only in tests of the fleet logic: two registries over one store stand for two proxies.
    shared: bool = False
    in_memory: bool = attrs.field(default=True, init=False)
    _sessions: dict[str, _Segments] = attrs.field(factory=dict, init=False)
    # trajectory_id -> session_id, for reads of one segment.
    _owners: dict[str, str] = attrs.field(factory=dict, init=False)
    _records: dict[str, _Record] = attrs.field(factory=dict, init=False)
    _leases: dict[str, _Lease] = attrs.field(factory=dict, init=False)
    # trajectory_id -> the lease holding it
    _leased: dict[str, str] = attrs.field(factory=dict, init=False)
    _lease_ids: Any = attrs.field(factory=itertools.count, init=False)
    _control: ControlState = attrs.field(factory=ControlState, init=False)
    _written: int = attrs.field(default=0, init=False)
    _drained: int = attrs.field(default=0, init=False)
    _cleaned: int = attrs.field(default=0, init=False)

    # -- live sessions -----------------------------------------------------------------------------------------------

    async def load_session(self, session_id: str) -> StoredSession | None:
        record = self._records.get(session_id)
        if record is None:
            return None
        steps = tuple(record.steps[k] for k in sorted(record.steps)) if record.state == ACTIVE else ()
        return StoredSession(session_id, record.state, steps, record.result)

    async def append_step(self, session_id: str, step_id: int, record: bytes, *, fence: int | None = None) -> None:
        stored = self._records.setdefault(session_id, _Record())
        if fence is not None and stored.epoch != fence:
            raise LeaseLostError(session_id, stored.epoch)
        if stored.state != ACTIVE:
            raise ValueError(f"session {session_id!r} is {stored.state}: no step can be recorded")
        stored.steps[step_id] = bytes(record)

    async def mark_aborted(self, session_id: str, reason: str) -> None:
        stored = self._records.setdefault(session_id, _Record())
        stored.state, stored.steps, stored.result = ABORTED, {}, {"reason": reason}

    async def forget_sessions(self, session_ids: Sequence[str]) -> None:
        for session_id in session_ids:
            self._records.pop(session_id, None)

    # -- finalize and reads ------------------------------------------------------------------------------------------

    async def write(
        self, session_id: str, segments: Sequence[dict[str, Any]], *, result: Mapping[str, Any] | None = None
    ) -> int:
        # Everything that could fail comes first: the store changes only once every segment is measured.
        stored = _Segments(self.clock(), self.wall_clock(), {}, {}, {})
        for segment in segments:
            tid = segment["trajectory_id"]
            stored.segments[tid] = segment
            stored.tokens[tid] = len(segment.get("token_ids") or ())
            stored.sizes[tid] = json_size(segment)
        self._remove_segments(session_id)
        record = self._records.setdefault(session_id, _Record())
        record.state, record.steps, record.result = (FINALIZED if segments else DRAINED), {}, result
        if segments:
            for tid in stored.segments:
                self._owners[tid] = session_id
            self._sessions[session_id] = stored
        self._written += 1
        return sum(stored.sizes.values())

    async def read(
        self, *, session_id: str | None = None, trajectory_id: str | None = None, drain: bool = False,
        lease_seconds: float = DEFAULT_READ_LEASE_SECONDS,
    ) -> ReadResult:
        if trajectory_id is not None:
            owner = self._owners.get(trajectory_id)
            if owner is None or (session_id is not None and owner != session_id):
                return ReadResult(())
            selected = [(owner, trajectory_id)]
        elif session_id is not None:
            stored = self._sessions.get(session_id)
            selected = [(session_id, tid) for tid in stored.segments] if stored else []
        else:
            selected = [(sid, tid) for sid, stored in self._sessions.items() for tid in stored.segments]
        if not drain:
            return ReadResult(tuple(self._sessions[sid].segments[tid] for sid, tid in selected))
        self._expire_leases()
        free = [(sid, tid) for sid, tid in selected if tid not in self._leased]
        skipped, selected = len(selected) - len(free), free
        if not selected:
            return ReadResult((), skipped_leased=skipped)
        lease_id = f"lease-{next(self._lease_ids)}-{id(self):x}"
        self._leases[lease_id] = _Lease(self.clock() + lease_seconds, selected)
        for _, tid in selected:
            self._leased[tid] = lease_id
        segments = tuple(self._sessions[sid].segments[tid] for sid, tid in selected)
        return ReadResult(segments, lease_id, lease_seconds)

    async def acknowledge(self, lease_id: str) -> AckResult:
        self._expire_leases()
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return AckResult(0)
        emptied: list[str] = []
        for sid, tid in lease.segments:
            del self._leased[tid]
            stored = self._sessions[sid]
            for table in (stored.segments, stored.tokens, stored.sizes):
                del table[tid]
            del self._owners[tid]
            self._drained += 1
            if not stored.segments:
                del self._sessions[sid]
                emptied.append(sid)
                record = self._records.get(sid)
                if record is not None:
                    record.state = DRAINED
        return AckResult(len(lease.segments), tuple(emptied))

    async def segments_since(
        self, *, since: float | None = None, batch_size: int = 256
    ) -> AsyncIterator[list[dict[str, Any]]]:
        batch: list[dict[str, Any]] = []
        for stored in list(self._sessions.values()):
            if since is not None and stored.written_wall < since:
                continue
            for segment in list(stored.segments.values()):
                batch.append(segment)
                if len(batch) >= batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch

    async def cleanup(self, *, max_age_seconds: float | None = None, max_sessions: int | None = None) -> int:
        doomed = []
        if max_age_seconds is not None:
            now = self.clock()
            doomed += [sid for sid, stored in self._sessions.items() if now - stored.written_at > max_age_seconds]
        if max_sessions is not None and len(self._sessions) > max_sessions:
            # Oldest first: dicts keep insertion (write) order.
            doomed += list(self._sessions)[: len(self._sessions) - max_sessions]
        removed = 0
        for sid in dict.fromkeys(doomed):
            removed += self._remove_segments(sid)
        self._cleaned += removed
        return removed

    async def statistics(self) -> StoreStatistics:
        self._expire_leases()
        stored = self._sessions.values()
        return StoreStatistics(
            sessions=len(self._sessions),
            segments=sum(len(s.segments) for s in stored),
            tokens=sum(sum(s.tokens.values()) for s in stored),
            bytes=sum(sum(s.sizes.values()) for s in stored),
            written_sessions=self._written,
            drained_segments=self._drained,
            cleaned_sessions=self._cleaned,
            leased_segments=len(self._leased),
        )

    # -- fleet -------------------------------------------------------------------------------------------------------

    async def claim_session(self, session_id: str, owner: str, lease_seconds: float) -> SessionClaim:
        record = self._records.setdefault(session_id, _Record())
        now = self.clock()
        if record.owner not in (None, owner) and record.lease_until > now:
            return SessionClaim(False, record.epoch, record.owner, record.lease_until - now)
        if record.owner != owner:
            record.owner, record.epoch = owner, record.epoch + 1
        record.lease_until = now + lease_seconds
        return SessionClaim(True, record.epoch, owner)

    async def renew_sessions(self, owner: str, session_ids: Sequence[str], lease_seconds: float) -> None:
        until = self.clock() + lease_seconds
        for session_id in session_ids:
            record = self._records.get(session_id)
            if record is not None and record.owner == owner:
                record.lease_until = until

    async def release_session(self, session_id: str, owner: str) -> None:
        record = self._records.get(session_id)
        if record is not None and record.owner == owner:
            record.lease_until = 0.0

    async def control(self) -> ControlState:
        return self._control

    async def set_control(self, state: ControlState) -> None:
        self._control = state

    # -- life --------------------------------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Nothing to do: memory is all this store has (it is lost on exit whatever happens)."""

    async def aclose(self) -> None:
        """Nothing to release."""

    def _expire_leases(self) -> None:
        """Give the segments of leases that ran out back to draining reads."""
        now = self.clock()
        for lease_id in [lid for lid, lease in self._leases.items() if lease.until <= now]:
            for _, tid in self._leases.pop(lease_id).segments:
                self._leased.pop(tid, None)

    def _remove_segments(self, session_id: str) -> int:
        """Forget one session's segments; 1 if it had any stored."""
        stored = self._sessions.pop(session_id, None)
        if stored is None:
            return 0
        for tid in stored.segments:
            self._owners.pop(tid, None)
            lease_id = self._leased.pop(tid, None)
            if lease_id is not None and lease_id in self._leases:
                lease = self._leases[lease_id]
                lease.segments = [(s, t) for s, t in lease.segments if t != tid]
        return 1


__all__ = ["InMemoryTrajectoryStore"]
