"""The SQL the durable stores run, per dialect (``sqlite`` and ``postgresql``).

Statements are written once with ``:name`` parameters (sqlite3's style) where both databases accept the same text;
:meth:`Dialect.sql` turns them into psycopg's ``%(name)s`` for PostgreSQL. The differences are explicit fields of
:class:`Dialect`, never string surgery on shared text:

- how a write transaction starts: SQLite ``BEGIN IMMEDIATE`` (take the write lock now, not at the first write, so a
  transaction never fails half-way on a busy database); PostgreSQL ``BEGIN``;
- read transactions: PostgreSQL reads in ``REPEATABLE READ`` (one snapshot for a call's several SELECTs: a session's
  state and its journal agree); SQLite's deferred ``BEGIN`` already reads one snapshot in WAL mode;
- row locks: PostgreSQL locks the session row a call decides on (``FOR UPDATE``: claims, acknowledgements;
  ``FOR SHARE``: a step's fence check, so a claim by another proxy waits until the step is committed). SQLite has
  one writer at a time, so a plain SELECT inside the write transaction already decides alone;
- a draining read takes the segments it leases in ``seq`` order and skips rows another transaction is leasing
  (PostgreSQL ``FOR UPDATE SKIP LOCKED``): two proxies' group-committed reads over overlapping segments otherwise
  wait on each other's row locks in different orders, and PostgreSQL kills one as a deadlock;
- the clock: see ``SqlTrajectoryStore`` (``proxy/trajectory/stores/sql_store.py``).
"""

from __future__ import annotations

import functools
import re

import attrs

_PARAMETER = re.compile(r"(?<![:\w]):([a-z_]+)")


@attrs.frozen
class Dialect:
    """What differs between SQLite and PostgreSQL (see the module docstring)."""

    name: str
    begin_write: str
    begin_read: str
    # Appended to the SELECT of the session row a write decides on.
    lock_for_update: str
    lock_for_share: str
    # Appended to the SELECT of the segments a draining read leases.
    lock_skip_locked: str
    # Run first in a migration's transaction: serializes proxies that start at once (PostgreSQL).
    migration_lock: str | None
    # The server's clock in seconds since the epoch (None: the store's own clock).
    server_now: str | None

    @functools.cache  # noqa: B019 - a few dozen statements per dialect, for the process's life
    def sql(self, text: str) -> str:
        """``text`` with ``:name`` parameters in this dialect's style."""
        return text if self.name == "sqlite" else _PARAMETER.sub(r"%(\1)s", text)


SQLITE = Dialect(
    name="sqlite", begin_write="BEGIN IMMEDIATE", begin_read="BEGIN", lock_for_update="", lock_for_share="",
    lock_skip_locked="", migration_lock=None, server_now=None,
)
POSTGRESQL = Dialect(
    name="postgresql", begin_write="BEGIN", begin_read="BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    lock_for_update=" FOR UPDATE", lock_for_share=" FOR SHARE", lock_skip_locked=" FOR UPDATE SKIP LOCKED",
    # Any constant works; this one spells "dressage" in ASCII hex, so it cannot collide by accident.
    migration_lock="SELECT pg_advisory_xact_lock(7237959097669216101)",
    server_now="SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)",
)

# -- sessions and the journal --------------------------------------------------------------------------------------

SESSION_ENSURE = "INSERT INTO sessions (session_id, state) VALUES (:sid, 'active') ON CONFLICT (session_id) DO NOTHING"
SESSION_ROW = "SELECT state, result, owner, epoch, lease_until FROM sessions WHERE session_id = :sid"
SESSION_SET_STATE = "UPDATE sessions SET state = :state, result = :result WHERE session_id = :sid"
SESSION_MARK_DRAINED = "UPDATE sessions SET state = 'drained' WHERE session_id = :sid"
SESSION_FORGET = "DELETE FROM sessions WHERE session_id = :sid"
SESSION_CLAIM = "UPDATE sessions SET owner = :owner, epoch = :epoch, lease_until = :until WHERE session_id = :sid"
SESSION_RENEW = "UPDATE sessions SET lease_until = :until WHERE session_id = :sid AND owner = :owner"
SESSION_RELEASE = "UPDATE sessions SET lease_until = 0 WHERE session_id = :sid AND owner = :owner"

STEP_PUT = (
    "INSERT INTO steps (session_id, step_id, record) VALUES (:sid, :step_id, :record) "
    "ON CONFLICT (session_id, step_id) DO UPDATE SET record = excluded.record"
)
STEPS_OF = "SELECT record FROM steps WHERE session_id = :sid ORDER BY step_id"
STEPS_DROP = "DELETE FROM steps WHERE session_id = :sid"

# -- segments --------------------------------------------------------------------------------------------------------

SEGMENT_PUT = (
    "INSERT INTO segments (session_id, trajectory_id, segment, written_at, tokens, bytes) "
    "VALUES (:sid, :tid, :segment, :written_at, :tokens, :bytes)"
)
SEGMENTS_DROP = "DELETE FROM segments WHERE session_id = :sid"
SEGMENTS_OF_LEASE = "SELECT segment FROM segments WHERE lease_id = :lease_id ORDER BY seq"
# An unexpired lease's segments: what its acknowledgement deletes.
LEASE_HELD = "SELECT session_id FROM segments WHERE lease_id = :lease_id AND lease_until > :now ORDER BY seq"
LEASE_DELETE = "DELETE FROM segments WHERE lease_id = :lease_id AND lease_until > :now"
SESSION_HAS_SEGMENTS = "SELECT 1 FROM segments WHERE session_id = :sid LIMIT 1"
SEGMENTS_SINCE = (
    "SELECT seq, segment FROM segments WHERE seq > :after AND written_at >= :since ORDER BY seq LIMIT :limit"
)
# Sessions with segments, oldest write first (cleanup).
SESSIONS_WRITTEN_BEFORE = (
    "SELECT session_id FROM segments GROUP BY session_id HAVING MAX(written_at) < :cutoff ORDER BY MIN(seq)"
)
SESSIONS_OLDEST = "SELECT session_id FROM segments GROUP BY session_id ORDER BY MIN(seq) LIMIT :count"
SESSIONS_WITH_SEGMENTS = "SELECT COUNT(DISTINCT session_id) FROM segments"
SIZES = (
    "SELECT COUNT(DISTINCT session_id), COUNT(*), CAST(COALESCE(SUM(tokens), 0) AS BIGINT), "
    "CAST(COALESCE(SUM(bytes), 0) AS BIGINT), "
    "CAST(COALESCE(SUM(CASE WHEN lease_until > :now THEN 1 ELSE 0 END), 0) AS BIGINT) FROM segments"
)

# -- counters and control ------------------------------------------------------------------------------------------

COUNTERS = "SELECT name, value FROM counters"
COUNTER_ADD = "UPDATE counters SET value = value + :by WHERE name = :name"
CONTROL = "SELECT paused, weight_version FROM control WHERE id = 1"
CONTROL_SET = (
    "INSERT INTO control (id, paused, weight_version) VALUES (1, :paused, :weight_version) "
    "ON CONFLICT (id) DO UPDATE SET paused = excluded.paused, weight_version = excluded.weight_version"
)


def segment_filter(session_id: str | None, trajectory_id: str | None) -> tuple[str, dict[str, str]]:
    """The WHERE condition (and its parameters) that picks the segments of a read."""
    conditions, params = ["1 = 1"], {}
    if session_id is not None:
        conditions.append("session_id = :sid")
        params["sid"] = session_id
    if trajectory_id is not None:
        conditions.append("trajectory_id = :tid")
        params["tid"] = trajectory_id
    return " AND ".join(conditions), params


def select_segments(where: str) -> str:
    return f"SELECT segment FROM segments WHERE {where} ORDER BY seq"


def lease_segments(where: str, lock: str) -> str:
    """Lease the picked segments that no unexpired lease holds (a draining read), locked in ``seq`` order with
    ``lock`` (:attr:`Dialect.lock_skip_locked`)."""
    return (
        "UPDATE segments SET lease_id = :lease_id, lease_until = :until WHERE seq IN ("
        f"SELECT seq FROM segments WHERE {where} AND (lease_until IS NULL OR lease_until <= :now) ORDER BY seq{lock})"
    )


def count_picked(where: str) -> str:
    """How many segments a read picks. After a draining read that leased none, every one of them is held by another
    reader: leased already, or being leased by a transaction the read skipped."""
    return f"SELECT COUNT(*) FROM segments WHERE {where}"


__all__ = ["POSTGRESQL", "SQLITE", "Dialect", "count_picked", "lease_segments", "segment_filter", "select_segments"]
