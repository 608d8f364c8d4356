"""Open a trajectory store from its ``--store`` URL.

========================  ==========================================================================================
``memory``                :class:`~proxy.trajectory.memory_store.InMemoryTrajectoryStore`: lost on exit
``sqlite`` (the default)  SQLite in WAL mode at ``$DRESSAGE_DATA_DIR/trajectories.sqlite3``, else
                          ``./dressage-data/trajectories.sqlite3``
``sqlite:///PATH``        SQLite at PATH (``sqlite:////abs/path`` or ``sqlite:///relative/path``)
``postgresql://…``        PostgreSQL (psycopg 3; ``postgres://`` too): several proxies share it (``docs/storage.md``)
========================  ==========================================================================================

:func:`open_store` is an async context manager: a durable store is opened (connected, and migrated to this code's
schema: ``proxy/trajectory/stores/schema.py``), runs its writer on a thread of its own for as long as it is open, and
is flushed and closed when the block ends. ``read_only`` (``dressage-proxy export``) opens a store without taking
it: a SQLite file a running proxy holds can be read beside it, and nothing is migrated or written. A store that
cannot be opened raises :class:`~proxy.trajectory.stores.errors.StoreOpenError` with a message that names it by
:meth:`StoreUrl.describe` (never a password).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import attrs

import trio

from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.store import TrajectoryStore
from proxy.trajectory.stores.errors import StoreOpenError

#: the default ``--store``: SQLite in the data folder
DEFAULT_STORE = "sqlite"
DATA_DIR_ENV = "DRESSAGE_DATA_DIR"
SQLITE_FILE_NAME = "trajectories.sqlite3"


class StoreUrlError(ValueError):
    """A ``--store`` value that names no back end (the message says what is accepted)."""


@attrs.frozen
class StoreUrl:
    """A parsed ``--store``: the back end's kind and where it lives."""

    # "memory", "sqlite" or "postgresql"
    kind: str
    # sqlite: the database file; None otherwise
    path: Path | None = None
    # postgresql: the connection URL (libpq form); None otherwise
    dsn: str | None = None

    def describe(self) -> str:
        """What to log at start: never a password."""
        if self.kind == "postgresql" and self.dsn is not None:
            from urllib.parse import urlsplit

            parts = urlsplit(self.dsn)
            host = parts.hostname or "localhost"
            return f"postgresql://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"
        return f"sqlite:///{self.path}" if self.path is not None else self.kind


def default_sqlite_path() -> Path:
    """``$DRESSAGE_DATA_DIR/trajectories.sqlite3``, else ``./dressage-data/trajectories.sqlite3``."""
    folder = os.environ.get(DATA_DIR_ENV)
    return Path(folder) / SQLITE_FILE_NAME if folder else Path("dressage-data") / SQLITE_FILE_NAME


def parse_store_url(text: str) -> StoreUrl:
    """``--store``'s value -> :class:`StoreUrl` (StoreUrlError for anything else)."""
    value = text.strip()
    if value == "memory":
        return StoreUrl("memory")
    if value == "sqlite":
        return StoreUrl("sqlite", default_sqlite_path())
    if value.startswith("sqlite:///") and len(value) > len("sqlite:///"):
        return StoreUrl("sqlite", Path(value[len("sqlite:///"):]))
    if value.startswith(("postgresql://", "postgres://")):
        return StoreUrl("postgresql", dsn=value)
    raise StoreUrlError(
        f"--store {text!r}: expected memory, sqlite, sqlite:///PATH or postgresql://USER@HOST/DB"
    )


@contextlib.asynccontextmanager
async def open_store(url: str | StoreUrl, *, read_only: bool = False) -> AsyncIterator[TrajectoryStore]:
    """The store ``url`` names, open for the block (flushed and closed after it, even when the block fails)."""
    parsed = parse_store_url(url) if isinstance(url, str) else url
    if parsed.kind == "memory":
        yield InMemoryTrajectoryStore()
        return
    store = await _open_durable(parsed, read_only)
    try:
        yield store
    finally:
        # Shielded: a cancelled proxy still commits what its writer holds and lets go of the file or connections.
        with trio.CancelScope(shield=True):
            try:
                await store.flush()
            finally:
                await store.aclose()


async def _open_durable(parsed: StoreUrl, read_only: bool) -> TrajectoryStore:
    # Imported here: the memory store (tests, `--store memory`) needs neither sqlite3 nor psycopg.
    if parsed.kind == "sqlite":
        from proxy.trajectory.stores.sqlite_store import open_sqlite_store

        assert parsed.path is not None
        return await open_sqlite_store(parsed.path, read_only=read_only)
    if parsed.kind == "postgresql":
        from proxy.trajectory.stores.postgres_store import open_postgres_store

        assert parsed.dsn is not None
        return await open_postgres_store(parsed.dsn, parsed.describe(), read_only=read_only)
    raise StoreOpenError(f"--store {parsed.describe()}: no {parsed.kind} back end")


__all__ = [
    "DEFAULT_STORE", "StoreOpenError", "StoreUrl", "StoreUrlError", "default_sqlite_path", "open_store",
    "parse_store_url",
]
