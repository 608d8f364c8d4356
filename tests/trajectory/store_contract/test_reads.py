"""The contract's reads, on every back end: selection and order, two-phase draining reads and their leases,
``segments_since``, cleanup and statistics."""

from __future__ import annotations

from proxy.trajectory.store import DRAINED, FINALIZED, ReadResult
from tests.trajectory.store_contract.conftest import ids, segments


async def test_reads_by_session_by_trajectory_id_and_all_in_finalize_order(store):
    await store.write("a", segments("a", 2))
    await store.write("b", segments("b", 1))
    assert ids(await store.read(session_id="a")) == ["a:0", "a:1"]
    assert ids(await store.read(trajectory_id="b:0")) == ["b:0"]
    assert ids(await store.read(trajectory_id="b:0", session_id="b")) == ["b:0"]
    assert ids(await store.read()) == ["a:0", "a:1", "b:0"]
    assert await store.read(session_id="zzz") == ReadResult(())
    assert await store.read(trajectory_id="a:0", session_id="b") == ReadResult(())


async def test_a_draining_read_leases_and_the_acknowledgement_deletes_and_names_emptied_sessions(store):
    await store.write("a", segments("a", 2))
    await store.write("b", segments("b", 1))
    first = await store.read(trajectory_id="a:0", drain=True, lease_seconds=30)
    assert ids(first) == ["a:0"] and first.lease_id is not None and first.lease_seconds == 30
    # Leased: another draining read skips it, a plain read still returns it and leases nothing.
    rest = await store.read(drain=True)
    assert ids(rest) == ["a:1", "b:0"] and rest.skipped_leased == 0
    # Nothing left to lease: the read says how many segments other leases hold (no second read needed).
    assert await store.read(drain=True) == ReadResult((), skipped_leased=3)
    assert await store.read(session_id="a", drain=True) == ReadResult((), skipped_leased=2)
    assert await store.read(trajectory_id="b:0", drain=True) == ReadResult((), skipped_leased=1)
    plain = await store.read(session_id="a")
    assert ids(plain) == ["a:0", "a:1"] and plain.lease_id is None
    assert (await store.statistics()).leased_segments == 3
    acknowledged = await store.acknowledge(first.lease_id)
    assert (acknowledged.segments, acknowledged.emptied_sessions) == (1, ())
    acknowledged = await store.acknowledge(rest.lease_id)
    assert (acknowledged.segments, acknowledged.emptied_sessions) == (2, ("a", "b"))
    assert await store.read() == ReadResult(())
    assert (await store.load_session("a")).state == DRAINED
    stats = await store.statistics()
    assert (stats.sessions, stats.segments, stats.drained_segments, stats.leased_segments) == (0, 0, 3, 0)
    # Acknowledging again, or a lease that never was, deletes nothing.
    assert (await store.acknowledge(rest.lease_id)).segments == 0
    assert (await store.acknowledge("lease-unknown")).segments == 0


async def test_an_unacknowledged_lease_expires_and_its_segments_are_readable_again(backend, store):
    await store.write("a", segments("a", 2))
    lost = await store.read(session_id="a", drain=True, lease_seconds=10)
    assert await store.read(session_id="a", drain=True) == ReadResult((), skipped_leased=2)
    backend.clock.advance(9)
    assert (await store.statistics()).leased_segments == 2
    backend.clock.advance(1)  # the lease lasts lease_seconds, not a moment more
    assert (await store.statistics()).leased_segments == 0
    again = await store.read(session_id="a", drain=True)
    assert ids(again) == ["a:0", "a:1"]
    assert (await store.acknowledge(lost.lease_id)).segments == 0  # expired: deletes nothing
    assert (await store.load_session("a")).state == FINALIZED
    assert (await store.acknowledge(again.lease_id)).segments == 2


async def test_a_session_written_again_while_leased_leaves_the_lease_nothing_to_delete(store):
    await store.write("a", segments("a", 2))
    leased = await store.read(session_id="a", drain=True)
    await store.write("a", segments("a", 1))
    assert (await store.acknowledge(leased.lease_id)).segments == 0
    assert ids(await store.read(drain=True)) == ["a:0"]


async def test_segments_since_batches_in_finalize_order_and_filters_by_write_time(backend, store):
    await store.write("old", segments("old", 3))
    backend.clock.advance(100)
    cut = backend.clock()
    await store.write("new", segments("new", 2))
    await store.write("newer", segments("newer", 2))
    batches = [[s["trajectory_id"] for s in batch] async for batch in store.segments_since(batch_size=2)]
    assert batches == [["old:0", "old:1"], ["old:2", "new:0"], ["new:1", "newer:0"], ["newer:1"]]
    since = [[s["trajectory_id"] for s in batch] async for batch in store.segments_since(since=cut, batch_size=3)]
    assert since == [["new:0", "new:1", "newer:0"], ["newer:1"]]
    assert [batch async for batch in store.segments_since(since=cut + 1)] == []
    # Leased segments are still stored: an export includes them.
    await store.read(drain=True)
    assert sum([len(batch) async for batch in store.segments_since()]) == 7


async def test_cleanup_by_age_and_by_count_forgets_the_oldest_sessions(backend, store):
    await store.write("old", segments("old", 2))
    backend.clock.advance(50)
    await store.write("mid", segments("mid", 1))
    backend.clock.advance(50)
    await store.write("new", segments("new", 1))
    assert await store.cleanup() == 0
    assert await store.cleanup(max_age_seconds=75) == 1
    assert await store.read(session_id="old") == ReadResult(())
    assert await store.cleanup(max_sessions=1) == 1
    assert ids(await store.read()) == ["new:0"]
    assert await store.cleanup(max_sessions=1, max_age_seconds=1000) == 0
    stats = await store.statistics()
    assert (stats.sessions, stats.cleaned_sessions) == (1, 2)
    # Cleanup forgets segments, not what the store knows of the session.
    assert (await store.load_session("old")).state == FINALIZED


async def test_statistics_count_sessions_segments_tokens_bytes_and_lifetime_counters(store):
    empty = await store.statistics()
    assert (empty.sessions, empty.segments, empty.tokens, empty.bytes, empty.written_sessions) == (0, 0, 0, 0, 0)
    size = await store.write("a", segments("a", 2, tokens=5))
    size += await store.write("b", segments("b", 1, tokens=4))
    await store.write("c", [])
    stats = await store.statistics()
    assert (stats.sessions, stats.segments, stats.tokens, stats.bytes) == (2, 3, 14, size)
    assert (stats.written_sessions, stats.drained_segments, stats.cleaned_sessions) == (3, 0, 0)
    assert stats.as_json()["written_sessions"] == 3
