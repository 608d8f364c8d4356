"""The durable stores' schema and its forward migrations (``docs/storage.md`` describes every table).

:data:`MIGRATIONS` is the schema's history: numbered steps, each with its DDL per dialect. :func:`migrate` runs at
open, before anything else: it reads the ``schema_version`` table (one row per step applied; none yet: version 0)
and runs each newer step in ONE transaction of its own (its DDL and its ``schema_version`` row commit together, so
a crash mid-migration leaves the store at the previous version, whole). On PostgreSQL an advisory lock serializes
proxies that start at once; on SQLite ``BEGIN IMMEDIATE`` does. A store whose version is newer than the code's
refuses to open (:class:`StoreVersionError`): this code cannot know what a newer schema means, and migrations
never run backwards.

A new step is appended to :data:`MIGRATIONS` (never edit an applied one): the next number, its DDL for both
dialects, and a contract test that opens a store at the previous version.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proxy.trajectory.stores.errors import StoreOpenError, StoreVersionError
from proxy.trajectory.stores.sql import Dialect


@attrs.frozen
class Migration:
    """One forward step of the schema."""

    version: int
    description: str
    # dialect name -> DDL statements, run in order in the step's transaction
    statements: Mapping[str, Sequence[str]]


_COUNTERS = ("written_sessions", "drained_segments", "cleaned_sessions")

_V1_SQLITE = (
    # Every session the store knows: state, finalize result, and the fleet lease (owner, epoch, lease_until).
    """CREATE TABLE sessions (
        session_id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        result TEXT,
        owner TEXT,
        epoch INTEGER NOT NULL DEFAULT 0,
        lease_until REAL NOT NULL DEFAULT 0
    )""",
    # The step journal of active sessions. A rowid table, not WITHOUT ROWID: records are kilobytes, and SQLite's
    # WITHOUT ROWID B-tree is for small rows (measured: inserting 2 KB records ran 1.75x slower in it).
    """CREATE TABLE steps (
        session_id TEXT NOT NULL,
        step_id INTEGER NOT NULL,
        record BLOB NOT NULL,
        PRIMARY KEY (session_id, step_id)
    )""",
    # Finalized segments; seq is the finalize (and export) order. A draining read's lease lives on its rows.
    """CREATE TABLE segments (
        seq INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        trajectory_id TEXT NOT NULL UNIQUE,
        segment BLOB NOT NULL,
        written_at REAL NOT NULL,
        tokens INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        lease_id TEXT,
        lease_until REAL
    )""",
    "CREATE INDEX segments_by_session ON segments (session_id, seq)",
    "CREATE INDEX segments_by_lease ON segments (lease_id) WHERE lease_id IS NOT NULL",
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    *(f"INSERT INTO counters (name, value) VALUES ('{name}', 0)" for name in _COUNTERS),
    "CREATE TABLE control (id INTEGER PRIMARY KEY CHECK (id = 1), paused INTEGER NOT NULL, weight_version TEXT)",
)

_V1_POSTGRESQL = (
    """CREATE TABLE sessions (
        session_id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        result TEXT,
        owner TEXT,
        epoch BIGINT NOT NULL DEFAULT 0,
        lease_until DOUBLE PRECISION NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE steps (
        session_id TEXT NOT NULL,
        step_id BIGINT NOT NULL,
        record BYTEA NOT NULL,
        PRIMARY KEY (session_id, step_id)
    )""",
    # seq comes from an identity sequence: allocation order, which is finalize order per proxy (docs/storage.md).
    """CREATE TABLE segments (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id TEXT NOT NULL,
        trajectory_id TEXT NOT NULL UNIQUE,
        segment BYTEA NOT NULL,
        written_at DOUBLE PRECISION NOT NULL,
        tokens BIGINT NOT NULL,
        bytes BIGINT NOT NULL,
        lease_id TEXT,
        lease_until DOUBLE PRECISION
    )""",
    # Already zlib-compressed (rows.py): TOAST stores it out of line without trying pglz on it again.
    "ALTER TABLE segments ALTER COLUMN segment SET STORAGE EXTERNAL",
    "CREATE INDEX segments_by_session ON segments (session_id, seq)",
    "CREATE INDEX segments_by_lease ON segments (lease_id) WHERE lease_id IS NOT NULL",
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
    *(f"INSERT INTO counters (name, value) VALUES ('{name}', 0)" for name in _COUNTERS),
    "CREATE TABLE control (id INTEGER PRIMARY KEY CHECK (id = 1), paused BOOLEAN NOT NULL, weight_version TEXT)",
)

#: the schema's history, oldest first
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "sessions, step journal, segments with read leases, counters, control",
              {"sqlite": _V1_SQLITE, "postgresql": _V1_POSTGRESQL}),
)

_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, description TEXT NOT NULL, "
    "applied_at DOUBLE PRECISION NOT NULL)"
)


def latest_version(migrations: Sequence[Migration] = MIGRATIONS) -> int:
    return migrations[-1].version if migrations else 0


def current_version(connection: Any) -> int:
    """The store's schema version (0: a new, empty store)."""
    row = connection.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def check_version(found: int, latest: int, where: str) -> None:
    if found > latest:
        raise StoreVersionError(
            f"{where} has schema version {found}, newer than this dressage-proxy's {latest}: it was written by a newer "
            "release; run that release (or a newer one) on it, a store is never migrated backwards"
        )


def check_readable(found: int, where: str, migrations: Sequence[Migration] = MIGRATIONS) -> None:
    """A read-only open reads only the code's own version (it cannot migrate, and cannot know a newer schema)."""
    if found != latest_version(migrations):
        raise StoreVersionError(
            f"{where} has schema version {found}, this dressage-proxy reads {latest_version(migrations)}: run a proxy "
            "on it once (it migrates the store) or use the release that wrote it"
        )


def migrate(connection: Any, dialect: Dialect, where: str, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Bring the store to the latest version (see the module docstring); returns the version it was at.
    ``connection`` is in autocommit mode (this function writes its own BEGIN/COMMIT); ``where`` names the store in
    messages (never a password)."""
    latest = latest_version(migrations)
    _in_transaction(connection, dialect, lambda: connection.execute(_VERSION_TABLE))
    started = current_version(connection)
    check_version(started, latest, where)
    for step in migrations:

        def apply(step: Migration = step) -> None:
            found = current_version(connection)  # again, under the lock: another proxy may have applied it
            check_version(found, latest, where)
            if found >= step.version:
                return
            for statement in step.statements[dialect.name]:
                connection.execute(statement)
            connection.execute(
                dialect.sql("INSERT INTO schema_version (version, description, applied_at) VALUES (:v, :d, :t)"),
                {"v": step.version, "d": step.description, "t": time.time()},
            )

        try:
            _in_transaction(connection, dialect, apply)
        except StoreVersionError:
            raise
        except Exception as error:  # noqa: BLE001 - the database's reason, with which step failed
            raise StoreOpenError(
                f"{where}: migrating to schema version {step.version} ({step.description}) failed, the store is left "
                f"at version {current_version(connection)}: {type(error).__name__}: {error}"
            ) from None
    return started


def _in_transaction(connection: Any, dialect: Dialect, body: Any) -> None:
    connection.execute(dialect.begin_write)
    try:
        if dialect.migration_lock:
            connection.execute(dialect.migration_lock)
        body()
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


__all__ = ["MIGRATIONS", "Migration", "StoreVersionError", "check_readable", "check_version", "current_version", "latest_version",
           "migrate"]
