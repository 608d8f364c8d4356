"""What only the durable back ends (SQLite, PostgreSQL) promise: a reopened store keeps everything, its schema is
versioned and migrated forward in whole steps, and its writes are whole; plus the SQLite file's one-proxy lock,
read-only opens, group commit, and a password that never shows in an error."""

from __future__ import annotations

import contextlib
import sqlite3

import psycopg
import pytest
import trio

from proxy.trajectory.store import ABORTED, ACTIVE, ControlState, ReadResult, SessionClaim, StoredSession
from proxy.trajectory.stores import StoreUrl, open_store, parse_store_url
from proxy.trajectory.stores.errors import (
    StoreInUseError,
    StoreOpenError,
    StoreUnavailableError,
    StoreVersionError,
)
from proxy.trajectory.stores.schema import MIGRATIONS, Migration
from proxy.trajectory.stores.workers import StoreClosedError
from tests.trajectory.store_contract.conftest import Backend, ids, segments


def raw_execute(backend: Backend, statement: str) -> list[tuple]:
    """Run SQL on the back end's database directly (what another release of the proxy could have done)."""
    if backend.kind == "sqlite":
        with contextlib.closing(sqlite3.connect(backend.target, isolation_level=None)) as connection:
            return connection.execute(statement).fetchall()
    with psycopg.connect(backend.target, autocommit=True) as connection:
        cursor = connection.execute(statement)
        return cursor.fetchall() if cursor.description else []


async def test_a_reopened_store_keeps_everything(durable_backend):
    backend = durable_backend
    async with backend.open() as store:
        await store.append_step("live", 0, b"zero")
        await store.append_step("live", 1, b"one")
        await store.write("done", segments("done", 2), result={"segments": 2})
        await store.write("read", segments("read", 1))
        await store.mark_aborted("gone", "client went away")
        lease = await store.read(session_id="done", drain=True, lease_seconds=60)
        acknowledged = await store.read(session_id="read", drain=True)
        await store.acknowledge(acknowledged.lease_id)
        claim = await store.claim_session("live", "proxy-a", 30)
        await store.set_control(ControlState(paused=True, weight_version="v3"))
        before = await store.statistics()
    async with backend.open() as store:
        assert await store.load_session("live") == StoredSession("live", ACTIVE, (b"zero", b"one"))
        assert (await store.load_session("done")).result == {"segments": 2}
        assert await store.load_session("gone") == StoredSession("gone", ABORTED, (), {"reason": "client went away"})
        assert (await store.load_session("read")).state == "drained"
        assert await store.statistics() == before
        # The read lease and the session lease outlived the restart.
        assert await store.read(drain=True) == ReadResult((), skipped_leased=2)
        assert (await store.claim_session("live", "proxy-b", 30)).granted is False
        assert await store.claim_session("live", "proxy-a", 30) == SessionClaim(True, claim.epoch, "proxy-a")
        assert (await store.acknowledge(lease.lease_id)).emptied_sessions == ("done",)
        assert await store.control() == ControlState(paused=True, weight_version="v3")
        await store.append_step("live", 2, b"two", fence=claim.epoch)
    async with backend.open() as store:
        assert (await store.load_session("live")).steps == (b"zero", b"one", b"two")


async def test_open_store_flushes_and_closes_and_the_next_open_finds_the_data(durable_backend):
    url = f"sqlite:///{durable_backend.target}" if durable_backend.kind == "sqlite" else durable_backend.target
    async with open_store(url) as store:
        await store.write("a", segments("a", 1))
    async with open_store(url) as store:
        assert ids(await store.read()) == ["a:0"]


async def test_a_store_at_a_newer_schema_version_refuses_to_open(durable_backend):
    async with durable_backend.open() as store:
        await store.write("a", segments("a", 1))
    raw_execute(durable_backend,
                "INSERT INTO schema_version (version, description, applied_at) VALUES (99, 'from the future', 0)")
    with pytest.raises(StoreVersionError, match="schema version 99, newer than this dressage-proxy's 1"):
        async with durable_backend.open():
            pass


async def test_migration_from_version_1_runs_each_new_step_in_one_transaction(durable_backend):
    async with durable_backend.open() as store:
        await store.write("a", segments("a", 1))
    ddl = ["CREATE TABLE step_two_table (x INTEGER)", "CREATE TABLE step_two_table (x INTEGER)"]
    failing = (*MIGRATIONS, Migration(2, "fails half-way", {"sqlite": ddl, "postgresql": ddl}))
    with pytest.raises(StoreOpenError, match=r"migrating to schema version 2 \(fails half-way\) failed, the store is "
                                             r"left at version 1: .*step_two_table"):
        async with durable_backend.open(migrations=failing):
            pass
    # Nothing of the failed step stayed: not its first table, not its version.
    assert raw_execute(durable_backend, "SELECT MAX(version) FROM schema_version") == [(1,)]
    good = (*MIGRATIONS, Migration(2, "adds a table", {"sqlite": ddl[:1], "postgresql": ddl[:1]}))
    async with durable_backend.open(migrations=good) as store:
        assert ids(await store.read()) == ["a:0"]
    assert raw_execute(durable_backend, "SELECT version FROM schema_version ORDER BY version") == [(1,), (2,)]
    assert raw_execute(durable_backend, "SELECT COUNT(*) FROM step_two_table") == [(0,)]
    # The code that knows only version 1 now refuses the migrated store.
    with pytest.raises(StoreVersionError):
        async with durable_backend.open():
            pass


async def test_a_segment_json_cannot_hold_fails_the_write_and_changes_nothing(durable_backend):
    # The memory store keeps Python objects as they are; a durable store must serialize, so it refuses before
    # touching anything.
    async with durable_backend.open() as store:
        await store.write("a", segments("a", 1))
        before = await store.statistics()
        bad = segments("a", 2)
        bad[1]["reward_info"] = {"not json": {1, 2}}
        with pytest.raises(TypeError):
            await store.write("a", bad)
        assert await store.statistics() == before
        assert ids(await store.read()) == ["a:0"]


async def test_concurrent_steps_share_commits_and_a_refused_one_fails_alone(durable_backend):
    async with durable_backend.open() as store:
        await store.write("finalized", segments("finalized", 1))
        failures = []

        async def step(index: int) -> None:
            try:
                await store.append_step(f"s{index % 64}", index // 64, b"%d" % index)
            except ValueError as error:
                failures.append(error)

        async def late() -> None:
            with pytest.raises(ValueError, match="finalized"):
                await store.append_step("finalized", 9, b"late")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(late)
            for index in range(256):
                nursery.start_soon(step, index)
        assert failures == []
        for session in range(64):
            steps = (await store.load_session(f"s{session}")).steps
            assert steps == tuple(b"%d" % (session + 64 * k) for k in range(4))
        # Grouped: far fewer transactions than calls.
        assert store.writer.operations >= 257
        assert store.writer.transactions < 257 / 4


async def test_a_second_proxy_on_the_same_sqlite_file_refuses_to_open_and_names_the_holder(tmp_path):
    url = f"sqlite:///{tmp_path / 'one.sqlite3'}"
    async with open_store(url) as store:
        await store.write("a", segments("a", 1))
        with pytest.raises(StoreInUseError, match=r"in use by process \d+: a SQLite store belongs to one proxy"):
            async with open_store(url):
                pass
        # Read-only (an export beside the proxy) needs no lock: it reads what the proxy committed, writes nothing.
        async with open_store(url, read_only=True) as reader:
            assert ids(await reader.read()) == ["a:0"]
            await store.write("b", segments("b", 1))
            assert ids(await reader.read()) == ["a:0", "b:0"]
            with pytest.raises(StoreClosedError, match="read-only"):
                await reader.write("c", segments("c", 1))
    async with open_store(url) as store:  # the lock went with the store
        assert ids(await store.read()) == ["a:0", "b:0"]


async def test_the_postgresql_password_never_shows_in_an_error_or_a_description(postgres_server):
    url = postgres_server.fresh_database("secret")
    wrong = url.replace(postgres_server.password, "not-the-password-7f3a")
    with pytest.raises(StoreUnavailableError) as failed:
        async with open_store(wrong):
            pass
    assert "not-the-password-7f3a" not in str(failed.value) and "password authentication failed" in str(failed.value)
    assert postgres_server.password not in parse_store_url(url).describe()
    assert StoreUrl("postgresql", dsn=url).describe().startswith("postgresql://127.0.0.1:")


async def test_a_sqlite_path_that_cannot_hold_a_store_fails_with_a_clear_error(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(StoreOpenError, match="cannot create or lock the store"):
        async with open_store(f"sqlite:///{tmp_path / 'a-file' / 'store.sqlite3'}"):
            pass
    (tmp_path / "junk.sqlite3").write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(StoreOpenError, match="junk.sqlite3: DatabaseError: file is not a database"):
        async with open_store(f"sqlite:///{tmp_path / 'junk.sqlite3'}"):
            pass


async def test_a_read_only_open_reads_only_this_codes_schema_version(durable_backend):
    url = f"sqlite:///{durable_backend.target}" if durable_backend.kind == "sqlite" else durable_backend.target
    async with open_store(url) as store:
        await store.write("a", segments("a", 1))
    async with open_store(url, read_only=True) as reader:
        assert ids(await reader.read()) == ["a:0"]
    raw_execute(durable_backend,
                "INSERT INTO schema_version (version, description, applied_at) VALUES (2, 'from the future', 0)")
    with pytest.raises(StoreVersionError, match="has schema version 2, this dressage-proxy reads 1"):
        async with open_store(url, read_only=True):
            pass
