"""``--store sqlite[:///PATH]``: the default durable store, one SQLite file in WAL mode (stdlib ``sqlite3``).

One proxy per file: opening takes an exclusive lock (``flock`` on ``PATH.lock``, which the kernel releases when the
process dies, kill -9 included), so a second proxy on the same file refuses to start and says which process holds
it. Several proxies share a PostgreSQL store instead. A read-only open (``dressage-proxy export`` beside a running
proxy) takes no lock: WAL lets readers in other processes read while the proxy writes.

Connections: one writer (``BEGIN IMMEDIATE`` transactions, group commit, its own thread) and a few readers
(``query_only``), all with ``check_same_thread=False`` because trio's worker threads hand a pooled connection from
one thread to the next (one thread uses a connection at a time).

**synchronous** (``docs/storage.md``, "Durability"): ``FULL`` by default. In WAL mode ``NORMAL`` already survives a
kill -9 of the proxy (a commit has been written to the WAL file, which the OS keeps), but not a power loss or a
kernel crash (the WAL is synced only at checkpoints); ``FULL`` syncs the WAL at every commit, which group commit
shares between every commit queued meanwhile. The bench (``bench/store_backends.py``) measures both.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import trio

from proxy.trajectory.stores.errors import StoreInUseError, StoreOpenError
from proxy.trajectory.stores.schema import MIGRATIONS, Migration, check_readable, current_version, migrate
from proxy.trajectory.stores.sql import SQLITE
from proxy.trajectory.stores.sql_store import SqlTrajectoryStore
from proxy.trajectory.stores.workers import ReaderPool, TransactionWriter

#: seconds a connection waits for a lock another connection holds (a checkpoint, a reader starting) before failing
BUSY_TIMEOUT_SECONDS = 30.0
SYNCHRONOUS_MODES = ("FULL", "NORMAL")


def _reader(path: Path, *, file_read_only: bool = False) -> sqlite3.Connection:
    """A reading connection (``file_read_only``: opened with ``mode=ro``, for a store opened read-only)."""
    target = f"file:{path}?mode=ro" if file_read_only else str(path)
    connection = sqlite3.connect(target, uri=file_read_only, isolation_level=None, check_same_thread=False,
                                 timeout=BUSY_TIMEOUT_SECONDS)
    connection.execute("PRAGMA query_only = ON")
    return connection


def _connect(path: Path, synchronous: str) -> sqlite3.Connection:
    """The writing connection, in WAL mode."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_SECONDS)
    mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        connection.close()
        raise StoreOpenError(f"sqlite:///{path}: the file system does not support WAL mode (journal mode {mode})")
    connection.execute(f"PRAGMA synchronous = {synchronous}")
    return connection


def _lock(path: Path) -> IO[str]:
    """Hold ``PATH.lock`` exclusively for the store's life (StoreInUseError when another process holds it)."""
    handle = open(f"{path}.lock", "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise StoreInUseError(
            f"sqlite:///{path} is in use by {holder}: a SQLite store belongs to one proxy; stop that one, give this "
            "one another file, or share a postgresql:// store between proxies"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()}\n")
    handle.flush()
    return handle


def _checkpoint(path: Path) -> None:
    """Copy the WAL into the database file and sync it (flush() under synchronous=NORMAL; harmless under FULL)."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_SECONDS)) as connection:
        connection.execute("PRAGMA wal_checkpoint(FULL)")


def open_sqlite(
    path: Path, *, clock: Callable[[], float] = time.time, group_commit: bool = True, synchronous: str = "FULL",
    read_only: bool = False, migrations: Sequence[Migration] = MIGRATIONS,
) -> SqlTrajectoryStore:
    """Open (and migrate) the store at ``path``; blocking: call it on a worker thread (:func:`open_sqlite_store`)."""
    if synchronous not in SYNCHRONOUS_MODES:
        raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {synchronous!r}")
    where = f"sqlite:///{path}"
    if read_only:
        return _open_read_only(path, where, clock, migrations)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = _lock(path)
    except OSError as error:
        raise StoreOpenError(f"{where}: cannot create or lock the store: {error}") from None
    try:
        connection = _connect(path, synchronous)
        try:
            migrate(connection, SQLITE, where, migrations)
        except BaseException:
            connection.close()
            raise
    except sqlite3.Error as error:
        lock.close()
        raise StoreOpenError(f"{where}: {type(error).__name__}: {error}") from None
    except BaseException:
        lock.close()
        raise
    writer = TransactionWriter(lambda: _connect(path, synchronous), SQLITE.begin_write, group=group_commit,
                               name=f"sqlite-writer:{path.name}")
    writer.start(connection)
    readers = ReaderPool(lambda: _reader(path), SQLITE.begin_read)
    return SqlTrajectoryStore(SQLITE, writer, readers, shared=False, description=where, clock=clock,
                              sync=lambda: _checkpoint(path), release=lock.close)


def _open_read_only(path: Path, where: str, clock: Callable[[], float],
                    migrations: Sequence[Migration]) -> SqlTrajectoryStore:
    if not path.is_file():
        raise StoreOpenError(f"{where}: no such store")
    with contextlib.closing(_reader(path, file_read_only=True)) as connection:
        try:
            found = current_version(connection)
        except sqlite3.DatabaseError as error:
            raise StoreOpenError(f"{where} is not a trajectory store ({error})") from None
    check_readable(found, where, migrations)
    writer = TransactionWriter(lambda: None, SQLITE.begin_write, refusal=f"{where} is open read-only")
    readers = ReaderPool(lambda: _reader(path, file_read_only=True), SQLITE.begin_read)
    return SqlTrajectoryStore(SQLITE, writer, readers, shared=False, description=where, clock=clock)


async def open_sqlite_store(path: Path, **options: object) -> SqlTrajectoryStore:
    """:func:`open_sqlite` on a worker thread (it reads, migrates and may wait for a lock)."""
    return await trio.to_thread.run_sync(lambda: open_sqlite(path, **options))  # type: ignore[arg-type]


__all__ = ["BUSY_TIMEOUT_SECONDS", "open_sqlite", "open_sqlite_store"]
