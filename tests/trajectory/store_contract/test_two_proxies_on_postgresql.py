"""Two stores on one PostgreSQL database stand for two proxies of a fleet (each its own connections and writer):
what one records the other sees, sessions are owned by one at a time across them, and concurrent draining reads
through both never lease a segment twice."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import trio

from proxy.trajectory.store import ControlState, LeaseLostError, ReadResult
from proxy.trajectory.stores.postgres_store import open_postgres_store
from tests.trajectory.store_contract.conftest import Clock, ids, segments


@contextlib.asynccontextmanager
async def two_proxies(postgres_server: Any, clock: Clock | None = None) -> AsyncIterator[tuple[Any, Any]]:
    url = postgres_server.fresh_database("fleet")
    first = await open_postgres_store(url, "postgresql://fleet", clock=clock)
    second = await open_postgres_store(url, "postgresql://fleet", clock=clock)
    try:
        yield first, second
    finally:
        for store in (first, second):
            await store.aclose()


async def test_two_proxies_share_journals_segments_leases_and_control(postgres_server):
    clock = Clock()
    async with two_proxies(postgres_server, clock) as (a, b):
        assert a.shared and b.shared
        claim = await a.claim_session("s", "proxy-a", 15)
        assert (await b.claim_session("s", "proxy-b", 15)).granted is False
        await a.append_step("s", 0, b"by a", fence=claim.epoch)
        assert (await b.load_session("s")).steps == (b"by a",)
        clock.advance(15)  # proxy-a stopped renewing: proxy-b takes the session and continues it
        taken = await b.claim_session("s", "proxy-b", 15)
        assert taken.granted and taken.epoch == claim.epoch + 1
        with pytest.raises(LeaseLostError):
            await a.append_step("s", 1, b"stale", fence=claim.epoch)
        await b.append_step("s", 1, b"by b", fence=taken.epoch)
        await b.write("s", segments("s", 2), result={"segments": 2})
        # A read lease taken through one proxy is acknowledged through the other.
        leased = await a.read(drain=True)
        assert ids(leased) == ["s:0", "s:1"] and await b.read(drain=True) == ReadResult((), skipped_leased=2)
        assert (await b.acknowledge(leased.lease_id)).emptied_sessions == ("s",)
        assert (await a.load_session("s")).state == "drained"
        await a.set_control(ControlState(paused=True, weight_version="v9"))
        assert await b.control() == ControlState(paused=True, weight_version="v9")
        assert (await b.statistics()).drained_segments == 2


async def test_concurrent_draining_reads_through_two_proxies_never_lease_a_segment_twice(postgres_server):
    async with two_proxies(postgres_server) as (a, b):
        for index in range(40):
            await a.write(f"s{index}", segments(f"s{index}", 3))
        got: list[list[str]] = []

        async def drain(store: Any, session: str | None) -> None:
            result = await store.read(session_id=session, drain=True)
            got.append(ids(result))

        async with trio.open_nursery() as nursery:
            for index in range(40):
                nursery.start_soon(drain, a if index % 2 else b, f"s{index}")
                nursery.start_soon(drain, b if index % 2 else a, None)
        leased = [tid for batch in got for tid in batch]
        assert sorted(leased) == sorted(f"s{i}:{k}" for i in range(40) for k in range(3))


async def test_concurrent_acknowledgements_of_one_sessions_last_leases_mark_it_drained(postgres_server):
    # Each proxy acknowledges one of the session's two leases at the same moment; one of them must see it emptied.
    for _ in range(5):
        async with two_proxies(postgres_server) as (a, b):
            await a.write("s", segments("s", 2))
            first = await a.read(trajectory_id="s:0", drain=True)
            second = await b.read(trajectory_id="s:1", drain=True)
            emptied: list[tuple[str, ...]] = []

            async def ack(store: Any, lease: str) -> None:
                emptied.append((await store.acknowledge(lease)).emptied_sessions)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ack, a, first.lease_id)
                nursery.start_soon(ack, b, second.lease_id)
            assert sorted(emptied) == [(), ("s",)]
            assert (await b.load_session("s")).state == "drained"


async def test_a_draining_read_skips_segments_another_transaction_is_leasing(postgres_server):
    """The deadlock two proxies' group-committed reads once met (each waiting on rows the other was leasing, in another
    order): a draining read never waits on segment rows another transaction holds. It leases what is free, counts
    the held ones as skipped, and the held ones are leasable once that transaction ends. (Before the fix the read
    below waited on the held rows until the store's lock timeout failed it.)"""
    url = postgres_server.fresh_database("skip")
    a = await open_postgres_store(url, "postgresql://skip")
    try:
        await a.write("s0", segments("s0", 2))
        await a.write("s1", segments("s1", 2))
        with psycopg.connect(url) as other:
            # another proxy's draining read of s0, in flight: its row locks held, not committed yet
            other.execute("SELECT seq FROM segments WHERE session_id = 's0' FOR UPDATE")
            with trio.fail_after(60):  # a liveness bound, not a timing: the fixed read returns at once
                everything = await a.read(drain=True)
                only_s0 = await a.read(session_id="s0", drain=True)
            other.rollback()
        assert ids(everything) == ["s1:0", "s1:1"]
        assert ids(only_s0) == [] and only_s0.skipped_leased == 2
        assert ids(await a.read(session_id="s0", drain=True)) == ["s0:0", "s0:1"]
    finally:
        await a.aclose()
