"""Every call of :class:`~proxy.trajectory.store.TrajectoryStore` in SQL, for SQLite and PostgreSQL alike.

The memory store (``proxy/trajectory/memory_store.py``) is the reference: each call here does what it does, in one
transaction. Writes run on the store's :class:`~proxy.trajectory.stores.workers.TransactionWriter` (one write
connection, group commit), reads on its :class:`~proxy.trajectory.stores.workers.ReaderPool`; nothing touches the
database on the event loop. The back ends (``sqlite_store.py``, ``postgres_store.py``) open the connections, run the
migrations and build this class; what differs between them is in :class:`~proxy.trajectory.stores.sql.Dialect`.

**Time.** Leases (sessions' and reads') and ``written_at`` are seconds since the epoch, stored, so they mean the same
after a restart. ``clock`` gives them; ``None`` (PostgreSQL's default) reads the database server's clock in the
transaction, so the proxies of a fleet compare leases on one clock rather than on each host's. Tests inject a clock
to expire leases without waiting.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import attrs
import trio

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
)
from proxy.trajectory.stores import rows, sql
from proxy.trajectory.stores.crash_points import crash_point
from proxy.trajectory.stores.sql import Dialect
from proxy.trajectory.stores.workers import ReaderPool, Refused, TransactionWriter

Connection = Any


@attrs.define(eq=False)
class SqlTrajectoryStore:
    """A durable store over one database (see the module docstring)."""

    dialect: Dialect
    writer: TransactionWriter
    readers: ReaderPool
    # True when several proxy processes may use the store at once (PostgreSQL).
    shared: bool
    # What the store is, for messages and logs (``StoreUrl.describe()``: never a password).
    description: str
    clock: Callable[[], float] | None = None
    # The segments are on disk: they do not count against --memory-budget (TrajectoryStore.in_memory).
    in_memory: bool = attrs.field(default=False, init=False)
    # Run by flush() on a worker thread after the writer drained (SQLite: a checkpoint on a connection of its own,
    # which syncs the WAL's content into the database file; PostgreSQL: nothing, its commits are durable).
    sync: Callable[[], None] | None = None
    # Run by aclose() last (SQLite: let go of the file's exclusive lock).
    release: Callable[[], None] | None = None

    def _now(self, connection: Connection) -> float:
        if self.clock is not None:
            return self.clock()
        assert self.dialect.server_now is not None, "a store without a server clock needs a clock"
        return float(connection.execute(self.dialect.server_now).fetchone()[0])

    def _x(self, connection: Connection, text: str, params: Mapping[str, Any] | None = None) -> Any:
        return connection.execute(self.dialect.sql(text), params or {})

    def _add(self, connection: Connection, counter: str, by: int) -> None:
        if by:
            self._x(connection, sql.COUNTER_ADD, {"name": counter, "by": by})

    def _session(self, connection: Connection, session_id: str, lock: str = "") -> tuple[Any, ...] | None:
        return self._x(connection, sql.SESSION_ROW + lock, {"sid": session_id}).fetchone()

    # -- live sessions -----------------------------------------------------------------------------------------------

    async def load_session(self, session_id: str) -> StoredSession | None:
        def load(connection: Connection) -> StoredSession | None:
            row = self._session(connection, session_id)
            if row is None:
                return None
            state, result = row[0], rows.decode_json(row[1])
            steps: tuple[bytes, ...] = ()
            if state == ACTIVE:
                steps = tuple(bytes(r[0]) for r in self._x(connection, sql.STEPS_OF, {"sid": session_id}).fetchall())
            return StoredSession(session_id, state, steps, result)

        return await self.readers.run(load)

    async def append_step(self, session_id: str, step_id: int, record: bytes, *, fence: int | None = None) -> None:
        record = bytes(record)

        def append(connection: Connection) -> Refused[Any] | None:
            row = self._session(connection, session_id, self.dialect.lock_for_share)
            if row is None:  # the first step: one statement more, every later step saves it
                self._x(connection, sql.SESSION_ENSURE, {"sid": session_id})
                row = self._session(connection, session_id, self.dialect.lock_for_share)
            state, _, _, epoch, _ = row
            if fence is not None and epoch != fence:
                return Refused(LeaseLostError(session_id, epoch))
            if state != ACTIVE:
                return Refused(ValueError(f"session {session_id!r} is {state}: no step can be recorded"))
            self._x(connection, sql.STEP_PUT, {"sid": session_id, "step_id": step_id, "record": record})
            return None

        crash_point("append_step.before")
        await self.writer.run(append)
        crash_point("append_step.after")

    async def mark_aborted(self, session_id: str, reason: str) -> None:
        def abort(connection: Connection) -> None:
            self._x(connection, sql.SESSION_ENSURE, {"sid": session_id})
            self._x(connection, sql.SESSION_SET_STATE,
                    {"sid": session_id, "state": ABORTED, "result": rows.encode_json({"reason": reason})})
            self._x(connection, sql.STEPS_DROP, {"sid": session_id})

        await self.writer.run(abort)

    async def forget_sessions(self, session_ids: Sequence[str]) -> None:
        params = [{"sid": session_id} for session_id in dict.fromkeys(session_ids)]
        if not params:
            return

        def forget(connection: Connection) -> None:
            cursor = connection.cursor()
            cursor.executemany(self.dialect.sql(sql.SESSION_FORGET), params)
            cursor.executemany(self.dialect.sql(sql.STEPS_DROP), params)

        await self.writer.run(forget)

    # -- finalize and reads ------------------------------------------------------------------------------------------

    async def write(
        self, session_id: str, segments: Sequence[dict[str, Any]], *, result: Mapping[str, Any] | None = None
    ) -> int:
        # Encoded first, on a worker thread: a segment JSON cannot hold fails here, before the transaction.
        encoded = await trio.to_thread.run_sync(rows.segment_rows, segments)
        result_json = rows.encode_json(dict(result) if result is not None else None)

        def finalize(connection: Connection) -> int:
            now = self._now(connection)
            self._x(connection, sql.SEGMENTS_DROP, {"sid": session_id})
            self._x(connection, sql.SESSION_ENSURE, {"sid": session_id})
            state = FINALIZED if encoded else DRAINED
            self._x(connection, sql.SESSION_SET_STATE, {"sid": session_id, "state": state, "result": result_json})
            self._x(connection, sql.STEPS_DROP, {"sid": session_id})
            if encoded:
                connection.cursor().executemany(self.dialect.sql(sql.SEGMENT_PUT), [
                    {"sid": session_id, "tid": row.trajectory_id, "segment": row.segment, "written_at": now,
                     "tokens": row.tokens, "bytes": row.size}
                    for row in encoded
                ])
            self._add(connection, "written_sessions", 1)
            return sum(row.size for row in encoded)

        crash_point("write.before")
        size = await self.writer.run(finalize)
        crash_point("write.after")
        return size

    async def read(
        self, *, session_id: str | None = None, trajectory_id: str | None = None, drain: bool = False,
        lease_seconds: float = DEFAULT_READ_LEASE_SECONDS,
    ) -> ReadResult:
        where, params = sql.segment_filter(session_id, trajectory_id)
        if not drain:
            def select(connection: Connection) -> ReadResult:
                found = self._x(connection, sql.select_segments(where), params).fetchall()
                return ReadResult(tuple(rows.decode_segment(r[0]) for r in found))

            return await self.readers.run(select)
        lease_id = f"lease-{uuid.uuid4().hex}"

        def lease(connection: Connection) -> ReadResult:
            now = self._now(connection)
            leased = self._x(connection, sql.lease_segments(where, self.dialect.lock_skip_locked),
                             {**params, "lease_id": lease_id, "until": now + lease_seconds, "now": now})
            if leased.rowcount == 0:
                # Nothing leased: what was asked for (if anything) is another reader's (same transaction).
                held = self._x(connection, sql.count_picked(where), params).fetchone()[0]
                return ReadResult((), skipped_leased=int(held))
            found = self._x(connection, sql.SEGMENTS_OF_LEASE, {"lease_id": lease_id}).fetchall()
            return ReadResult(tuple(rows.decode_segment(r[0]) for r in found), lease_id, lease_seconds)

        return await self.writer.run(lease)

    async def acknowledge(self, lease_id: str) -> AckResult:
        def acknowledge(connection: Connection) -> AckResult:
            now = self._now(connection)
            held = [r[0] for r in self._x(connection, sql.LEASE_HELD, {"lease_id": lease_id, "now": now}).fetchall()]
            if not held:
                return AckResult(0)
            sessions = sorted(set(held))
            # PostgreSQL: lock the sessions before looking for what is left of them, so two proxies acknowledging
            # the last two leases of one session at once cannot both miss that it emptied.
            for sid in sessions:
                self._session(connection, sid, self.dialect.lock_for_update)
            self._x(connection, sql.LEASE_DELETE, {"lease_id": lease_id, "now": now})
            emptied = [sid for sid in dict.fromkeys(held)
                       if self._x(connection, sql.SESSION_HAS_SEGMENTS, {"sid": sid}).fetchone() is None]
            for sid in emptied:
                self._x(connection, sql.SESSION_MARK_DRAINED, {"sid": sid})
            self._add(connection, "drained_segments", len(held))
            return AckResult(len(held), tuple(emptied))

        acknowledged = await self.writer.run(acknowledge)
        crash_point("acknowledge.after")
        return acknowledged

    async def segments_since(
        self, *, since: float | None = None, batch_size: int = 256
    ) -> AsyncIterator[list[dict[str, Any]]]:
        # Keyset pagination on seq: each batch is one short read, so a long export holds no transaction open.
        after = -1
        floor = float("-inf") if since is None else float(since)
        while True:
            def batch(connection: Connection, after: int = after) -> list[tuple[int, dict[str, Any]]]:
                found = self._x(connection, sql.SEGMENTS_SINCE,
                                {"after": after, "since": floor, "limit": max(1, batch_size)}).fetchall()
                return [(int(seq), rows.decode_segment(data)) for seq, data in found]

            found = await self.readers.run(batch)
            if not found:
                return
            after = found[-1][0]
            yield [segment for _, segment in found]

    async def cleanup(self, *, max_age_seconds: float | None = None, max_sessions: int | None = None) -> int:
        def clean(connection: Connection) -> int:
            doomed: list[str] = []
            if max_age_seconds is not None:
                cutoff = self._now(connection) - max_age_seconds
                doomed += [r[0] for r in self._x(connection, sql.SESSIONS_WRITTEN_BEFORE, {"cutoff": cutoff})]
            if max_sessions is not None:
                count = int(self._x(connection, sql.SESSIONS_WITH_SEGMENTS).fetchone()[0])
                if count > max_sessions:
                    doomed += [r[0] for r in self._x(connection, sql.SESSIONS_OLDEST, {"count": count - max_sessions})]
            removed = sum(self._x(connection, sql.SEGMENTS_DROP, {"sid": sid}).rowcount > 0
                          for sid in dict.fromkeys(doomed))
            self._add(connection, "cleaned_sessions", removed)
            return removed

        return await self.writer.run(clean)

    async def statistics(self) -> StoreStatistics:
        def measure(connection: Connection) -> StoreStatistics:
            now = self._now(connection)
            sessions, segments, tokens, size, leased = self._x(connection, sql.SIZES, {"now": now}).fetchone()
            counters = {name: int(value) for name, value in self._x(connection, sql.COUNTERS).fetchall()}
            return StoreStatistics(
                sessions=int(sessions), segments=int(segments), tokens=int(tokens), bytes=int(size),
                written_sessions=counters.get("written_sessions", 0),
                drained_segments=counters.get("drained_segments", 0),
                cleaned_sessions=counters.get("cleaned_sessions", 0),
                leased_segments=int(leased),
            )

        return await self.readers.run(measure)

    # -- fleet -------------------------------------------------------------------------------------------------------

    async def claim_session(self, session_id: str, owner: str, lease_seconds: float) -> SessionClaim:
        def claim(connection: Connection) -> SessionClaim:
            now = self._now(connection)
            self._x(connection, sql.SESSION_ENSURE, {"sid": session_id})
            _, _, holder, epoch, until = self._session(connection, session_id, self.dialect.lock_for_update)
            if holder not in (None, owner) and until > now:
                return SessionClaim(False, int(epoch), holder, until - now)
            if holder != owner:
                epoch += 1
            self._x(connection, sql.SESSION_CLAIM,
                    {"sid": session_id, "owner": owner, "epoch": epoch, "until": now + lease_seconds})
            return SessionClaim(True, int(epoch), owner)

        return await self.writer.run(claim)

    async def renew_sessions(self, owner: str, session_ids: Sequence[str], lease_seconds: float) -> None:
        if not session_ids:
            return

        def renew(connection: Connection) -> None:
            until = self._now(connection) + lease_seconds
            connection.cursor().executemany(self.dialect.sql(sql.SESSION_RENEW),
                                            [{"sid": sid, "owner": owner, "until": until} for sid in session_ids])

        await self.writer.run(renew)

    async def release_session(self, session_id: str, owner: str) -> None:
        def release(connection: Connection) -> None:
            self._x(connection, sql.SESSION_RELEASE, {"sid": session_id, "owner": owner})

        await self.writer.run(release)

    async def control(self) -> ControlState:
        def control(connection: Connection) -> ControlState:
            return rows.control_from_row(self._x(connection, sql.CONTROL).fetchone())

        return await self.readers.run(control)

    async def set_control(self, state: ControlState) -> None:
        params = rows.control_params(state)

        def set_control(connection: Connection) -> None:
            self._x(connection, sql.CONTROL_SET, params)

        await self.writer.run(set_control)

    # -- life --------------------------------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Wait for every queued write to commit, then make it durable (``sync``)."""
        if self.writer.refusal is not None:
            return  # read-only: nothing was written
        await self.writer.run(lambda connection: None)
        if self.sync is not None:
            await trio.to_thread.run_sync(self.sync)

    async def aclose(self) -> None:
        await self.writer.aclose()
        self.readers.close()
        if self.release is not None:
            self.release()


__all__ = ["SqlTrajectoryStore"]
