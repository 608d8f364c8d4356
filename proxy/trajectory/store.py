"""The trajectory store: finalized segments, written once per finalize, read by session or trajectory id, drained.

:class:`TrajectoryStore` is the interface (async: a durable implementation does I/O; ``statistics`` is cheap and
sync-safe but async for the same reason). :class:`InMemoryTrajectoryStore` is the default: a dict per session,
insertion-ordered, so reads return sessions in finalize order and segments in export order. A durable SQLite store
(one transaction per finalize) is a later issue and implements the same five calls.

- ``write(session_id, segments)``: store a finalized session's segments, replacing any earlier write of it; returns
  the bytes it stored (their JSON size: the metrics' ``dressage_store_write_bytes_total``).
- ``read(session_id=None, trajectory_id=None, drain=False)``: the session's segments, or the one segment, or with
  neither every segment; ``drain`` removes what it returns. The result also names the sessions that the read left
  without any segment, so the registry can move them to DRAINED.
- ``cleanup(max_age_seconds=None, max_sessions=None)``: forget sessions written too long ago, or the oldest beyond a
  count; returns how many sessions it removed.
- ``statistics()``: sessions, segments, tokens, bytes (the segments' JSON size), plus lifetime counters.

**Writing is total.** A store must be able to write every segment the proxy builds from accepted input; a write
that fails is a bug (the registry logs it and keeps the session for a retry, it never drops committed steps). The
API refuses strings UTF-8 cannot encode (lone surrogates) at the edge, and the in-memory store's only
serialization (the JSON size) is total anyway: :func:`json_size` counts such a string rather than failing on it.
``write`` is atomic: it changes nothing unless it stores every segment.

**A drain frees at once.** A drained segment leaves the store in the read that drains it (its session's record
too once it is empty): a drained record holds no memory here, and ``bytes`` returns to what it was before the
session's write. Only the registry keeps something after a drain (the session's tombstone, until
``--tombstone-ttl``). Undrained segments are never evicted behind the trainer's back: they are the training data;
``/health`` reports them against ``--memory-budget`` instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs


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
    """What a read returns: the segments, and the sessions it left with no segment (drain only)."""

    segments: tuple[dict[str, Any], ...]
    emptied_sessions: tuple[str, ...] = ()


class TrajectoryStore(Protocol):
    """Where finalized segments live until the trainer drains them."""

    async def write(self, session_id: str, segments: Sequence[dict[str, Any]]) -> int:
        """Store a finalized session's segments (replacing an earlier write of the same session); the bytes stored."""

    async def read(
        self, *, session_id: str | None = None, trajectory_id: str | None = None, drain: bool = False
    ) -> ReadResult:
        """Segments of one session, one segment, or (with neither id) all; ``drain`` removes them."""

    async def cleanup(self, *, max_age_seconds: float | None = None, max_sessions: int | None = None) -> int:
        """Forget old sessions; returns how many were removed."""

    async def statistics(self) -> StoreStatistics:
        """Sizes and counters."""

    async def flush(self) -> None:
        """Make every write so far durable (the graceful shutdown's last step, ``proxy/controllers/lifecycle.py``)."""


@attrs.define(eq=False)
class _Stored:
    """One session's segments and their sizes."""

    written_at: float
    # trajectory_id -> segment, in export order.
    segments: dict[str, dict[str, Any]]
    tokens: dict[str, int]
    sizes: dict[str, int]


@attrs.define(eq=False)
class InMemoryTrajectoryStore:
    """The default store: everything in process memory, lost on restart."""

    # Seconds since an arbitrary origin; injectable for tests of cleanup by age.
    clock: Callable[[], float] = time.monotonic
    _sessions: dict[str, _Stored] = attrs.field(factory=dict, init=False)
    # trajectory_id -> session_id, for reads of one segment.
    _owners: dict[str, str] = attrs.field(factory=dict, init=False)
    _written: int = attrs.field(default=0, init=False)
    _drained: int = attrs.field(default=0, init=False)
    _cleaned: int = attrs.field(default=0, init=False)

    async def write(self, session_id: str, segments: Sequence[dict[str, Any]]) -> int:
        # Everything that could fail comes first: the store changes only once every segment is measured.
        stored = _Stored(self.clock(), {}, {}, {})
        for segment in segments:
            tid = segment["trajectory_id"]
            stored.segments[tid] = segment
            stored.tokens[tid] = len(segment.get("token_ids") or ())
            stored.sizes[tid] = json_size(segment)
        self._remove_session(session_id)
        for tid in stored.segments:
            self._owners[tid] = session_id
        self._sessions[session_id] = stored
        self._written += 1
        return sum(stored.sizes.values())

    async def read(
        self, *, session_id: str | None = None, trajectory_id: str | None = None, drain: bool = False
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
        segments = tuple(self._sessions[sid].segments[tid] for sid, tid in selected)
        emptied: list[str] = []
        if drain:
            for sid, tid in selected:
                stored = self._sessions[sid]
                for table in (stored.segments, stored.tokens, stored.sizes):
                    del table[tid]
                del self._owners[tid]
                self._drained += 1
                if not stored.segments:
                    del self._sessions[sid]
                    emptied.append(sid)
        return ReadResult(segments, tuple(emptied))

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
            removed += self._remove_session(sid)
        self._cleaned += removed
        return removed

    async def flush(self) -> None:
        """Nothing to do: memory is all this store has (it is lost on exit whatever happens)."""

    async def statistics(self) -> StoreStatistics:
        stored = self._sessions.values()
        return StoreStatistics(
            sessions=len(self._sessions),
            segments=sum(len(s.segments) for s in stored),
            tokens=sum(sum(s.tokens.values()) for s in stored),
            bytes=sum(sum(s.sizes.values()) for s in stored),
            written_sessions=self._written,
            drained_segments=self._drained,
            cleaned_sessions=self._cleaned,
        )

    def _remove_session(self, session_id: str) -> int:
        """Forget one session entirely; 1 if it was stored."""
        stored = self._sessions.pop(session_id, None)
        if stored is None:
            return 0
        for tid in stored.segments:
            self._owners.pop(tid, None)
        return 1


def json_size(value: Any) -> int:
    """Bytes of ``value`` as UTF-8 JSON (the ``bytes`` statistic). Total on anything the proxy stores: a
    lone surrogate, which the API refuses but a store must never fail on, is counted as the three bytes
    ``surrogatepass`` writes; a value JSON cannot hold is counted as its ``str``."""
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


__all__ = ["InMemoryTrajectoryStore", "json_size", "ReadResult", "StoreStatistics", "TrajectoryStore"]
