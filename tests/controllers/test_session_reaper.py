"""Memory has a budget (issue 15 item 3): idle sessions are finalized, tombstones expire, bytes return to baseline.

The registry runs with the real reaper task on trio's ``MockClock`` (``autojump_clock``: virtual time jumps to the
next deadline when every task waits), so an hour of idleness takes no wall-clock time and no test measures time.
"""

from __future__ import annotations

import pytest
import trio

from proxy.controllers.session_expiry import MAX_SWEEP_SECONDS, MIN_SWEEP_SECONDS, ExpiryPolicy
from proxy.controllers.session_reaper import run_reaper, sweep
from proxy.controllers.session_registry import SessionRegistry
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.session_errors import SessionFinalizedError
from proxy.trajectory.session_memory import TOMBSTONE_BYTES

from .driving import answer_ids, drain, turn
from .fakes import FakeTokenizer

SYS = {"role": "system", "content": "You are terse."}
U1 = {"role": "user", "content": "add 5 and 3"}
A1 = {"role": "assistant", "content": "It is 8."}
U2 = {"role": "user", "content": "thanks"}
A2 = {"role": "assistant", "content": "You are welcome."}

HOUR = 3600.0
POLICY = ExpiryPolicy(idle_timeout=HOUR, tombstone_ttl=24 * HOUR)


def registry() -> SessionRegistry:
    return SessionRegistry(FakeTokenizer(), config=SessionConfig(max_steps_per_session=None))


# -- the pure decisions --------------------------------------------------------------------------------------------


def test_expiry_policy_decides_from_timestamps_alone():
    assert not POLICY.is_idle(last_activity=100.0, now=100.0 + HOUR - 0.001)
    assert POLICY.is_idle(last_activity=100.0, now=100.0 + HOUR)
    assert not POLICY.is_expired(released_at=0.0, now=24 * HOUR - 1) and POLICY.is_expired(0.0, 24 * HOUR)
    never = ExpiryPolicy(idle_timeout=None, tombstone_ttl=None)
    assert not never.is_idle(0.0, 1e12) and not never.is_expired(0.0, 1e12) and never.sweep_interval() is None


@pytest.mark.parametrize(
    "idle, ttl, interval",
    [(HOUR, 24 * HOUR, MAX_SWEEP_SECONDS), (40.0, 24 * HOUR, 10.0), (None, 8.0, 2.0), (0.1, None, MIN_SWEEP_SECONDS)],
)
def test_sweep_interval_is_a_quarter_of_the_shortest_timeout_within_bounds(idle, ttl, interval):
    assert ExpiryPolicy(idle, ttl).sweep_interval() == interval


# -- idle sessions -------------------------------------------------------------------------------------------------


async def test_idle_session_is_finalized_by_the_reaper_with_reason_idle_timeout(autojump_clock, nursery):
    reg = registry()
    await nursery.start(run_reaper, reg, POLICY)
    first = await turn(reg, "s", [SYS, U1], A1)
    await trio.sleep(HOUR / 2)
    # A request within the timeout restarts the idle time.
    await turn(reg, "s", [SYS, U1, A1, U2], A2)
    await trio.sleep(HOUR - MAX_SWEEP_SECONDS - 1)
    assert reg.debug_view("s").state == "ACTIVE"
    await trio.sleep(2 * MAX_SWEEP_SECONDS)
    view = reg.debug_view("s")
    assert (view.state, view.finalize_reason, view.segments) == ("FINALIZED", "idle_timeout", 1)
    # Its segments wait in the store for the trainer, saying why the session ended.
    (segment,) = await reg.read(session_id="s")
    assert segment["finalize_reason"] == "idle_timeout" and segment["reward_info"] is None
    assert segment["num_turns"] == 2 and segment["token_ids"][: len(first.checkpoint)] == list(first.checkpoint)
    stats = await reg.store_statistics()
    assert (stats.idle_finalized_sessions, stats.segments) == (1, 1)
    # A late step is refused like any step after finalize, and POST /session/finalize answers the stored result.
    with pytest.raises(SessionFinalizedError):
        await reg.prepare("s", [SYS, U1, A1, U2, A2, U2])
    result = await reg.finalize("s", {"score": 1.0})
    assert (result.segments, result.reason) == (1, "idle_timeout")


async def test_a_requested_finalize_says_so(autojump_clock):
    reg = registry()
    await turn(reg, "s", [SYS, U1], A1)
    assert (await reg.finalize("s")).reason == "requested"
    (segment,) = await reg.read(session_id="s")
    assert segment["finalize_reason"] == "requested"


async def test_the_reaper_never_finalizes_a_session_with_a_generation_in_flight(autojump_clock, nursery):
    reg = registry()
    await nursery.start(run_reaper, reg, POLICY)
    prepared = await reg.prepare("s", [SYS, U1])
    # A generation that runs for three hours (a paused rollout, a slow upstream): the session stays active.
    await trio.sleep(3 * HOUR)
    assert reg.debug_view("s").state == "ACTIVE"
    ids = answer_ids(reg.tokenizer, A1)
    result = await reg.commit(prepared.handle, ids, None, None, None, "stop", A1)
    assert result.step_id == 1
    # Its end starts the idle time; once it has run out the session is finalized with the step.
    await trio.sleep(HOUR + 2 * MAX_SWEEP_SECONDS)
    view = reg.debug_view("s")
    assert (view.state, view.steps, view.finalize_reason) == ("FINALIZED", 1, "idle_timeout")


async def test_idle_finalize_rechecks_under_the_lock_and_leaves_a_session_a_request_reached(autojump_clock):
    reg = registry()
    await turn(reg, "s", [SYS, U1], A1)
    await trio.sleep(HOUR)
    locked = reg._sessions["s"]
    prepared = []
    async with trio.open_nursery() as nursery:
        # The sweep lists "s" as idle, then waits for its lock, held by another step's critical section...
        async with locked.lock:
            nursery.start_soon(reg.finalize_idle, POLICY)
            await trio.testing.wait_all_tasks_blocked()

            async def step() -> None:
                prepared.append(await reg.prepare("s", [SYS, U1, A1, U2]))

            # ... when a new request of the session arrives (it queues for the lock behind the sweep).
            nursery.start_soon(step)
            await trio.testing.wait_all_tasks_blocked()
    # The sweep got the lock first, saw the request and left the session alone: the step was admitted.
    assert reg.debug_view("s").state == "ACTIVE" and prepared[0].generation_id == "s#g2"
    assert (await sweep(reg, POLICY)) == (0, 0)


async def test_idle_finalize_and_an_explicit_finalize_get_the_same_result(autojump_clock):
    reg = registry()
    await turn(reg, "s", [SYS, U1], A1)
    await trio.sleep(HOUR)
    results = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reg.finalize_idle, POLICY)

        async def finalize() -> None:
            results.append(await reg.finalize("s", {"score": 1.0}))

        nursery.start_soon(finalize)
    (segment,) = await reg.read(session_id="s")
    # Whichever took the lock first exported; the other got its answer. One export, one segment.
    assert results[0].trajectory_ids == (segment["trajectory_id"],)
    assert results[0].reason == segment["finalize_reason"]
    assert (await reg.store_statistics()).written_sessions == 1


# -- tombstones ----------------------------------------------------------------------------------------------------


async def test_tombstones_expire_after_the_ttl_counted_from_the_drain(autojump_clock, nursery):
    reg = registry()
    await nursery.start(run_reaper, reg, POLICY)
    await turn(reg, "kept", [SYS, U1], A1)
    await turn(reg, "drained", [SYS, U1], A1)
    await reg.finalize("kept")
    await reg.finalize("drained")
    await reg.finalize("never-seen")
    await drain(reg, session_id="drained")
    await trio.sleep(24 * HOUR - MAX_SWEEP_SECONDS)
    # Within the TTL the tombstones refuse late steps.
    with pytest.raises(SessionFinalizedError):
        await reg.prepare("drained", [SYS, U1])
    await trio.sleep(2 * MAX_SWEEP_SECONDS)
    assert reg.debug_view("drained") is None and reg.debug_view("never-seen") is None
    # A session whose segments still wait in the store keeps its tombstone: a new session of that id would replace
    # them at its finalize.
    assert reg.debug_view("kept").state == "FINALIZED"
    stats = await reg.store_statistics()
    assert (stats.expired_tombstones, stats.registry_sessions, stats.registry_tombstones) == (2, 1, 1)
    # Once drained, the TTL starts for it too.
    await drain(reg, session_id="kept")
    await trio.sleep(24 * HOUR + 2 * MAX_SWEEP_SECONDS)
    assert reg.debug_view("kept") is None
    # After expiry the id is free: a late step starts a new session.
    await turn(reg, "drained", [SYS, U1], A1)
    assert reg.debug_view("drained").state == "ACTIVE"


async def test_aborted_sessions_expire_too(autojump_clock):
    reg = registry()
    await turn(reg, "s", [SYS, U1], A1)
    assert await reg.abort("s")
    await trio.sleep(24 * HOUR)
    assert await reg.expire_tombstones(POLICY) == 1 and reg.debug_view("s") is None


# -- bytes -----------------------------------------------------------------------------------------------------------


async def test_registry_and_store_bytes_return_to_baseline_after_drain_and_expiry(autojump_clock, nursery):
    reg = registry()
    await nursery.start(run_reaper, reg, POLICY)
    baseline = await reg.store_statistics()
    assert (baseline.registry_bytes, baseline.bytes, baseline.approximate_bytes) == (0, 0, 0)
    for cycle in range(3):
        sessions = [f"c{cycle}-{i}" for i in range(5)]
        for sid in sessions:
            await turn(reg, sid, [SYS, U1], A1)
            await turn(reg, sid, [SYS, U1, A1, U2], A2)
        held = await reg.store_statistics()
        # Every active session holds its steps' tokens and messages.
        assert held.registry_bytes > 5 * 2 * len(answer_ids(reg.tokenizer, A1)) * 4
        assert held.approximate_bytes == held.registry_bytes == reg.held_bytes() == await reg.approximate_bytes()
        for sid in sessions:
            await reg.finalize(sid)
        exported = await reg.store_statistics()
        # Finalize moved the data to the store: the registry keeps tombstones only.
        assert exported.registry_bytes == 5 * TOMBSTONE_BYTES and exported.bytes > 0
        assert exported.approximate_bytes == exported.registry_bytes + exported.bytes
        await drain(reg)
        await trio.sleep(24 * HOUR + 2 * MAX_SWEEP_SECONDS)
        after = await reg.store_statistics()
        assert (after.registry_sessions, after.sessions, after.segments) == (0, 0, 0)
        assert (after.registry_bytes, after.bytes, after.approximate_bytes) == (0, 0, 0)
    health = reg.statistics()
    assert (health.sessions, health.tombstones, health.approximate_bytes, health.expired_tombstones) == (0, 0, 0, 15)
