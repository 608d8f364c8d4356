"""The contract's live sessions and finalize, on every back end: the step journal, aborts, forgetting, ``write``."""

from __future__ import annotations

import pytest

from proxy.trajectory.store import ABORTED, ACTIVE, DRAINED, FINALIZED, StoredSession, json_size
from tests.trajectory.store_contract.conftest import ids, segments


async def test_a_session_the_store_never_saw_loads_as_none(store):
    assert await store.load_session("nobody") is None


async def test_steps_load_in_step_order_and_a_step_written_again_keeps_its_last_record(store):
    for step_id, record in [(2, b"two"), (0, b"zero"), (1, b"one"), (1, b"one again")]:
        await store.append_step("s", step_id, record)
    assert await store.load_session("s") == StoredSession("s", ACTIVE, (b"zero", b"one again", b"two"), None)
    # Records are opaque bytes: every byte value survives.
    await store.append_step("bytes", 0, bytes(range(256)))
    assert (await store.load_session("bytes")).steps == (bytes(range(256)),)


async def test_finalize_stores_segments_records_the_result_and_drops_the_journal(store):
    await store.append_step("s", 0, b"r")
    written = segments("s", 2)
    size = await store.write("s", written, result={"segments": 2, "note": "done"})
    assert size == sum(json_size(segment) for segment in written)
    assert await store.load_session("s") == StoredSession("s", FINALIZED, (), {"segments": 2, "note": "done"})
    assert ids(await store.read(session_id="s")) == ["s:0", "s:1"]
    assert (await store.read(session_id="s")).segments == tuple(written)


async def test_a_finalize_without_segments_is_drained_at_once(store):
    await store.append_step("empty", 0, b"r")
    assert await store.write("empty", [], result={"segments": 0}) == 0
    assert await store.load_session("empty") == StoredSession("empty", DRAINED, (), {"segments": 0})
    assert (await store.statistics()).sessions == 0


async def test_a_finalized_or_aborted_session_accepts_no_step(store):
    await store.write("done", segments("done", 1))
    await store.mark_aborted("gone", "client went away")
    for session_id in ("done", "gone"):
        with pytest.raises(ValueError, match=session_id):
            await store.append_step(session_id, 5, b"late")
    assert (await store.load_session("done")).steps == ()


async def test_abort_drops_the_journal_and_records_the_reason(store):
    await store.append_step("s", 0, b"r")
    await store.mark_aborted("s", "budget exceeded")
    assert await store.load_session("s") == StoredSession("s", ABORTED, (), {"reason": "budget exceeded"})


async def test_forgetting_sessions_removes_their_records_and_keeps_their_segments(store):
    await store.write("done", segments("done", 1))
    await store.append_step("live", 0, b"r")
    await store.forget_sessions(["done", "live", "never-seen", "done"])
    assert await store.load_session("done") is None
    assert await store.load_session("live") is None
    assert ids(await store.read(session_id="done")) == ["done:0"]
    # A forgotten live session starts afresh.
    await store.append_step("live", 3, b"new")
    assert (await store.load_session("live")).steps == (b"new",)


async def test_a_second_write_replaces_the_first_and_moves_to_the_end_of_finalize_order(store):
    await store.write("a", segments("a", 3))
    await store.write("b", segments("b", 1))
    await store.write("a", segments("a", 1))
    assert ids(await store.read()) == ["b:0", "a:0"]
    assert (await store.read(trajectory_id="a:2")).segments == ()
    stats = await store.statistics()
    assert (stats.sessions, stats.segments, stats.written_sessions) == (2, 2, 3)


async def test_a_write_that_fails_changes_nothing(store):
    # A segment without a trajectory id fails after others were prepared: the earlier write stays whole.
    await store.append_step("b", 0, b"r")
    await store.write("a", segments("a", 1))
    before = await store.statistics()
    with pytest.raises(KeyError):
        await store.write("a", segments("a", 2, tokens=5) + [{"token_ids": [1]}], result={"x": 1})
    with pytest.raises(KeyError):
        await store.write("b", [{"token_ids": [1]}])
    assert await store.statistics() == before
    assert [s["token_ids"] for s in (await store.read(session_id="a")).segments] == [[0, 1, 2]]
    assert (await store.read(trajectory_id="a:1")).segments == ()
    assert (await store.load_session("b")).steps == (b"r",)


async def test_strings_json_escapes_can_hold_come_back_exactly(store):
    # Lone surrogates and NUL reach a store through JSON escapes; the store keeps them, in segments, results,
    # abort reasons and the weight version, and counts them as json_size does.
    odd = "a\ud800b\udfffc\x00d\u2028e😀"
    written = segments("s", 1)
    written[0]["reward_info"] = {odd: odd}
    written[0]["messages"][0]["content"] = odd
    await store.write("s", written, result={"note": odd})
    assert (await store.read(session_id="s")).segments == tuple(written)
    assert (await store.load_session("s")).result == {"note": odd}
    assert (await store.statistics()).bytes == json_size(written[0])
    await store.mark_aborted("t", odd)
    assert (await store.load_session("t")).result == {"reason": odd}
