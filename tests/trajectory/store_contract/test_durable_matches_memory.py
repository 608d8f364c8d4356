"""Random call sequences give the same answers on SQLite and PostgreSQL as on the memory store (the reference).

Hypothesis draws a sequence of store calls over a few sessions (journal, finalize, draining reads and
acknowledgements, cleanup, claims, fences, renewals, releases, control, clock moves) and runs it on both stores with
one fake clock; every answer (or the error's type) must match, and so must everything each store holds afterwards.
Lease ids differ between stores, so an acknowledgement names the lease by the read that made it."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.store import ControlState, ReadResult
from proxy.trajectory.stores.postgres_store import open_postgres_store
from proxy.trajectory.stores.sqlite_store import open_sqlite_store
from tests.trajectory.store_contract.conftest import Clock, segments

SESSIONS = st.sampled_from(["a", "b", "c"])
OWNERS = st.sampled_from(["p1", "p2"])

CALLS = st.one_of(
    st.tuples(st.just("append_step"), SESSIONS, st.integers(0, 3), st.binary(max_size=8),
              st.one_of(st.none(), st.integers(0, 3))),
    st.tuples(st.just("mark_aborted"), SESSIONS, st.text(max_size=4)),
    st.tuples(st.just("forget_sessions"), st.lists(SESSIONS, max_size=2)),
    st.tuples(st.just("write"), SESSIONS, st.integers(0, 3), st.integers(0, 4)),
    st.tuples(st.just("read"), st.one_of(st.none(), SESSIONS), st.one_of(st.none(), st.integers(0, 2)),
              st.booleans(), st.sampled_from([5.0, 20.0])),
    st.tuples(st.just("acknowledge"), st.integers(0, 5)),
    st.tuples(st.just("cleanup"), st.one_of(st.none(), st.sampled_from([5.0, 30.0])),
              st.one_of(st.none(), st.integers(0, 2))),
    st.tuples(st.just("claim_session"), SESSIONS, OWNERS, st.sampled_from([5.0, 20.0])),
    st.tuples(st.just("renew_sessions"), OWNERS, st.lists(SESSIONS, max_size=2), st.sampled_from([5.0, 20.0])),
    st.tuples(st.just("release_session"), SESSIONS, OWNERS),
    st.tuples(st.just("set_control"), st.booleans(), st.one_of(st.none(), st.sampled_from(["v1", "v\ud800"]))),
    st.tuples(st.just("advance"), st.sampled_from([1.0, 6.0, 25.0])),
)


async def call(store: Any, leases: list[str | None], step: tuple[Any, ...]) -> Any:
    """Run one drawn call; the answer in a form both stores give alike."""
    name, *args = step
    if name == "append_step":
        session, step_id, record, fence = args
        return await store.append_step(session, step_id, record, fence=fence)
    if name == "write":
        session, count, tokens = args
        return await store.write(session, segments(session, count, tokens), result={"n": count})
    if name == "read":
        session, index, drain, lease_seconds = args
        tid = None if index is None else f"{session or 'a'}:{index}"
        result: ReadResult = await store.read(session_id=session, trajectory_id=tid, drain=drain,
                                              lease_seconds=lease_seconds)
        leases.append(result.lease_id)
        return result.segments, result.lease_id is not None, result.lease_seconds
    if name == "acknowledge":
        lease = leases[args[0]] if args[0] < len(leases) else None
        return await store.acknowledge(lease or "lease-never-made")
    if name == "cleanup":
        return await store.cleanup(max_age_seconds=args[0], max_sessions=args[1])
    if name == "set_control":
        return await store.set_control(ControlState(paused=args[0], weight_version=args[1]))
    return await getattr(store, name)(*args)


async def contents(store: Any) -> Any:
    """Everything a store holds, as its calls report it."""
    sessions = [await store.load_session(session) for session in "abc"]
    exported = [segment async for batch in store.segments_since(batch_size=2) for segment in batch]
    return sessions, (await store.read()).segments, exported, await store.statistics(), await store.control()


EMPTY_TABLES = ("DELETE FROM sessions", "DELETE FROM steps", "DELETE FROM segments", "DELETE FROM control",
                "UPDATE counters SET value = 0")


async def open_durable(target: str | None, folder: str, clock: Clock) -> Any:
    """SQLite in ``folder``, or the PostgreSQL database ``target`` emptied (one database serves every example)."""
    if target is None:
        return await open_sqlite_store(Path(folder) / "s.sqlite3", clock=clock)
    with psycopg.connect(target, autocommit=True) as connection:
        if connection.execute("SELECT to_regclass('sessions')").fetchone()[0] is not None:
            for statement in EMPTY_TABLES:
                connection.execute(statement)
    return await open_postgres_store(target, "postgresql://compare", clock=clock)


async def run_both(calls: list[tuple[Any, ...]], target: str | None) -> None:
    clock = Clock()
    memory = InMemoryTrajectoryStore(clock=clock, wall_clock=clock)
    with tempfile.TemporaryDirectory() as folder:
        durable = await open_durable(target, folder, clock)
        try:
            memory_leases: list[str | None] = []
            durable_leases: list[str | None] = []
            for index, step in enumerate(calls):
                if step[0] == "advance":
                    clock.advance(step[1])
                    continue
                answers = []
                for store, leases in ((memory, memory_leases), (durable, durable_leases)):
                    try:
                        answers.append(("ok", await call(store, leases, step)))
                    except Exception as error:  # noqa: BLE001 - compared by type
                        answers.append(("error", type(error).__name__))
                assert answers[0] == answers[1], f"call {index} {step}: memory {answers[0]} != durable {answers[1]}"
            assert await contents(memory) == await contents(durable)
        finally:
            await durable.aclose()


@pytest.fixture(params=["sqlite", "postgresql"])
def durable_target(request: pytest.FixtureRequest) -> str | None:
    """None for SQLite (a file per example), a database's URL for PostgreSQL."""
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("postgres_server").fresh_database("compare")


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(CALLS, max_size=25))
def test_a_durable_store_answers_every_call_sequence_as_the_memory_store_does(durable_target, calls):
    trio.run(run_both, calls, durable_target)
