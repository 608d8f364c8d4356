"""The in-memory trajectory store: write, read by session or trajectory id, drain, cleanup, statistics."""

from __future__ import annotations

import json

import pytest

from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.store import ReadResult, json_size


def segments(session_id, n, tokens=3):
    return [{"trajectory_id": f"{session_id}:{i}", "parent_traj_id": session_id, "token_ids": list(range(tokens))}
            for i in range(n)]


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


async def test_store_reads_by_session_by_trajectory_id_and_all_in_write_order():
    store = InMemoryTrajectoryStore()
    await store.write("a", segments("a", 2))
    await store.write("b", segments("b", 1))
    assert [s["trajectory_id"] for s in (await store.read(session_id="a")).segments] == ["a:0", "a:1"]
    assert [s["trajectory_id"] for s in (await store.read(trajectory_id="b:0")).segments] == ["b:0"]
    assert [s["trajectory_id"] for s in (await store.read()).segments] == ["a:0", "a:1", "b:0"]
    assert (await store.read(session_id="zzz")).segments == ()
    assert (await store.read(trajectory_id="a:0", session_id="b")).segments == ()


async def test_store_drain_leases_what_it_returns_and_the_ack_removes_it_and_names_emptied_sessions():
    store = InMemoryTrajectoryStore()
    await store.write("a", segments("a", 2))
    first = await store.read(trajectory_id="a:0", drain=True)
    assert [s["trajectory_id"] for s in first.segments] == ["a:0"] and first.lease_id is not None
    # Leased: another draining read skips it, a plain read still sees it.
    rest = await store.read(session_id="a", drain=True)
    assert [s["trajectory_id"] for s in rest.segments] == ["a:1"]
    assert (await store.read(session_id="a", drain=True)).segments == ()
    assert len((await store.read(session_id="a")).segments) == 2
    assert (await store.acknowledge(first.lease_id)).emptied_sessions == ()
    assert (await store.acknowledge(rest.lease_id)).emptied_sessions == ("a",)
    assert await store.read(session_id="a") == ReadResult(())
    assert (await store.load_session("a")).state == "drained"
    stats = await store.statistics()
    assert (stats.sessions, stats.segments, stats.drained_segments) == (0, 0, 2)


async def test_an_unacknowledged_lease_expires_and_its_segments_are_readable_again():
    now = [0.0]
    store = InMemoryTrajectoryStore(clock=lambda: now[0])
    await store.write("a", segments("a", 1))
    lost = await store.read(session_id="a", drain=True, lease_seconds=10)
    assert (await store.read(session_id="a", drain=True)).segments == ()
    now[0] = 11.0
    again = await store.read(session_id="a", drain=True)
    assert [s["trajectory_id"] for s in again.segments] == ["a:0"]
    assert (await store.acknowledge(lost.lease_id)).segments == 0  # expired: deletes nothing
    assert (await store.acknowledge(again.lease_id)).segments == 1


async def test_store_rewrite_of_a_session_replaces_it():
    store = InMemoryTrajectoryStore()
    await store.write("a", segments("a", 3))
    await store.write("a", segments("a", 1))
    assert len((await store.read(session_id="a")).segments) == 1
    assert (await store.read(trajectory_id="a:2")).segments == ()


async def test_store_statistics_count_sessions_segments_tokens_and_json_bytes():
    store = InMemoryTrajectoryStore()
    written = segments("a", 2, tokens=5)
    await store.write("a", written)
    stats = await store.statistics()
    assert (stats.sessions, stats.segments, stats.tokens) == (1, 2, 10)
    assert stats.bytes == sum(len(json.dumps(s).encode()) for s in written)
    assert stats.as_json()["written_sessions"] == 1


async def test_store_cleanup_by_age_and_by_count_forgets_the_oldest():
    clock = Clock()
    store = InMemoryTrajectoryStore(clock=clock)
    await store.write("old", segments("old", 1))
    clock.now += 50
    await store.write("mid", segments("mid", 1))
    clock.now += 50
    await store.write("new", segments("new", 1))
    assert await store.cleanup(max_age_seconds=75) == 1
    assert (await store.read(session_id="old")).segments == ()
    assert await store.cleanup(max_sessions=1) == 1
    assert [s["parent_traj_id"] for s in (await store.read()).segments] == ["new"]
    assert (await store.statistics()).cleaned_sessions == 2


async def test_store_write_is_total_on_strings_utf8_cannot_encode():
    # The API refuses lone surrogates, but a store must never fail on a value that got in: before issue 13 the JSON
    # size raised UnicodeEncodeError here and the export of the whole session failed.
    store = InMemoryTrajectoryStore()
    bad = segments("a", 1)
    bad[0]["reward_info"] = {"note\ud800": "x\udfff"}
    await store.write("a", bad)
    (stored,) = (await store.read(session_id="a")).segments
    assert stored["reward_info"] == {"note\ud800": "x\udfff"}
    assert (await store.statistics()).bytes == json_size(bad[0]) > 0


async def test_store_write_that_fails_changes_nothing():
    # A segment without a trajectory id (a caller bug) fails the write after the first segment was measured: the
    # earlier write of the session stays whole, and no trajectory id points at a segment that is not stored.
    store = InMemoryTrajectoryStore()
    await store.write("a", segments("a", 1))
    before = await store.statistics()
    broken = segments("a", 2, tokens=5) + [{"token_ids": [1]}]
    with pytest.raises(KeyError):
        await store.write("a", broken)
    assert await store.statistics() == before
    assert [s["token_ids"] for s in (await store.read(session_id="a")).segments] == [[0, 1, 2]]
    assert (await store.read(trajectory_id="a:1")).segments == ()
