"""``--store postgresql://USER:PASSWORD@HOST:PORT/DB``: one store for a fleet of proxies (psycopg 3).

psycopg's *sync* API, on the store's threads (``workers.py``): its async API runs only under asyncio, and the proxy
runs under trio. Each proxy holds one write connection (group commit, its own thread) and a few read connections.
``shared`` is True: sessions are claimed before use, fences stop a proxy that lost a session from writing, and
leases and ``written_at`` use the database server's clock, so proxies on several hosts agree on when a lease ran out.

Connections run in autocommit mode; the store writes its own ``BEGIN``/``COMMIT`` (the same transaction code for
SQLite and PostgreSQL). A connection the server dropped (a restart, a failover) is reopened for the next call; the
call that met the failure gets the error (the registry keeps the step and answers 503 ``store_unavailable``).

A password never reaches a message: errors name the store by ``StoreUrl.describe()`` and psycopg's own messages are
scrubbed of the password before they are wrapped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict

from proxy.trajectory.stores.errors import StoreOpenError, StoreUnavailableError
from proxy.trajectory.stores.schema import MIGRATIONS, Migration, check_readable, current_version, migrate
from proxy.trajectory.stores.sql import POSTGRESQL
from proxy.trajectory.stores.sql_store import SqlTrajectoryStore
from proxy.trajectory.stores.workers import ReaderPool, TransactionWriter

#: seconds to wait for the server when connecting
CONNECT_TIMEOUT_SECONDS = 10
#: Server settings of the store's sessions: a row lock held by a stalled proxy (alive, mid-transaction) fails a call
#: after 10 s (it gets a store error, the registry answers 503) instead of stalling this proxy's writer, and a session
#: left idle inside a transaction is ended by the server after a minute (its locks go with it).
SESSION_OPTIONS = "-c lock_timeout=10000 -c idle_in_transaction_session_timeout=60000"


def _scrubbed(text: str, dsn: str) -> str:
    """``text`` without the DSN or its password."""
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        password = None
    text = text.replace(dsn, "<store url>")
    return text.replace(str(password), "***") if password else text


def _connector(dsn: str, where: str) -> Callable[[], psycopg.Connection[Any]]:
    def connect() -> psycopg.Connection[Any]:
        try:
            # TCP keepalives: a server that vanished without closing the connection (a host gone, a partition)
            # fails the waiting call within ~25 s instead of holding the writer forever.
            return psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS,
                                   application_name="dressage-proxy", options=SESSION_OPTIONS, keepalives=1,
                                   keepalives_idle=10, keepalives_interval=5, keepalives_count=3)
        except psycopg.Error as error:
            reason = _scrubbed(str(error).strip(), dsn)
            raise StoreUnavailableError(f"{where}: cannot connect: {reason}") from None

    return connect


def _broken(connection: psycopg.Connection[Any]) -> bool:
    return connection.closed or connection.broken


def open_postgres(
    dsn: str, where: str, *, clock: Callable[[], float] | None = None, group_commit: bool = True,
    read_only: bool = False, migrations: Sequence[Migration] = MIGRATIONS, readers: int = 4,
) -> SqlTrajectoryStore:
    """Connect and migrate (blocking: :func:`open_postgres_store` calls it on a worker thread). ``where`` names the
    store in messages; ``clock`` None means the server's clock (tests inject one)."""
    connect = _connector(dsn, where)
    connection = connect()
    try:
        if read_only:
            check_readable(current_version(connection) if _has_schema(connection) else 0, where, migrations)
            connection.close()
        else:
            migrate(connection, POSTGRESQL, where, migrations)
    except StoreOpenError as error:
        connection.close()
        raise type(error)(_scrubbed(str(error), dsn)) from None
    except psycopg.Error as error:
        connection.close()
        raise StoreUnavailableError(f"{where}: {_scrubbed(str(error).strip(), dsn)}") from None
    except BaseException:
        connection.close()
        raise
    if read_only:
        writer = TransactionWriter(connect, POSTGRESQL.begin_write, refusal=f"{where} is open read-only")
    else:
        writer = TransactionWriter(connect, POSTGRESQL.begin_write, group=group_commit, broken=_broken,
                                   name="postgres-writer")
        writer.start(connection)
    pool = ReaderPool(connect, POSTGRESQL.begin_read, broken=_broken, size=readers)
    return SqlTrajectoryStore(POSTGRESQL, writer, pool, shared=True, description=where, clock=clock)


def _has_schema(connection: psycopg.Connection[Any]) -> bool:
    return connection.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()[0]


async def open_postgres_store(dsn: str, where: str, **options: Any) -> SqlTrajectoryStore:
    """:func:`open_postgres` on a worker thread."""
    return await trio.to_thread.run_sync(lambda: open_postgres(dsn, where, **options))


__all__ = ["CONNECT_TIMEOUT_SECONDS", "SESSION_OPTIONS", "open_postgres", "open_postgres_store"]
