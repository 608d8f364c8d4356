"""``StoreLeases`` (issue 16 item 5): two of them over one shared memory store stand for two proxies of a fleet.

The store's clock is trio's (``autojump_clock``: waits take no real time), so a lease's expiry and the waits of a
busy session are exact, not wall-clock thresholds.
"""

from __future__ import annotations

import math

import pytest
import trio

from proxy.api.error_mapping import api_error_for
from proxy.controllers.session_leases import LeaseGrant, SessionBusyError, SoleOwner
from proxy.controllers.store_leases import PATIENCE, StoreLeases, default_proxy_id, session_leases_for
from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.store import LeaseLostError

LEASE = 15.0


def fleet(count: int = 2) -> tuple[InMemoryTrajectoryStore, list[StoreLeases]]:
    store = InMemoryTrajectoryStore(clock=trio.current_time, shared=True)
    return store, [StoreLeases(store, f"proxy-{index}", LEASE) for index in range(count)]


async def test_the_first_acquire_claims_and_later_ones_keep_the_epoch(autojump_clock):
    store, (a, _) = fleet()
    first = await a.acquire("s")
    # Never held here before: nothing in memory can be trusted.
    assert first.changed and first.epoch == 1
    assert await a.acquire("s") == LeaseGrant(1, False)
    await store.append_step("s", 0, b"step", fence=first.epoch)


async def test_a_live_holder_makes_the_other_proxy_wait_then_answer_session_busy(autojump_clock):
    store, (a, b) = fleet()
    await a.acquire("s")
    a.generation_started("s")
    began = trio.current_time()
    async with trio.open_nursery() as nursery:
        # The holder is alive: it renews while its generation runs.
        async def renew() -> None:
            while True:
                await trio.sleep(LEASE / 3)
                await a.renew_once()

        nursery.start_soon(renew)
        with pytest.raises(SessionBusyError) as busy:
            await b.acquire("s")
        nursery.cancel_scope.cancel()
    waited = trio.current_time() - began
    # Bounded: the holder's remaining lease plus a little, never longer.
    assert LEASE <= waited <= LEASE + PATIENCE + 0.01
    assert busy.value.owner == "proxy-0" and busy.value.retry_after > 0
    answer = api_error_for(busy.value)
    assert (answer.status, answer.code) == (409, "session_busy")
    assert answer.headers["Retry-After"] == str(max(1, math.ceil(busy.value.retry_after)))
    # The holder's name (host:port:pid) is for the log only.
    assert "proxy-0" not in str(answer.to_json())
    assert answer.to_json()["error"]["retry_after"] == int(answer.headers["Retry-After"])


async def test_a_dead_holder_is_replaced_when_its_lease_runs_out_and_its_commits_are_fenced(autojump_clock):
    store, (a, b) = fleet()
    held = await a.acquire("s")
    a.generation_started("s")
    await store.append_step("s", 0, b"step 0", fence=held.epoch)
    # Proxy a dies mid-generation (no renewal, no release): b waits for the lease to run out, then takes it.
    began = trio.current_time()
    taken = await b.acquire("s")
    assert LEASE - 0.01 <= trio.current_time() - began <= LEASE + PATIENCE
    assert taken.changed and taken.epoch == held.epoch + 1
    # a's late commit (it was only slow, not dead) is refused: never two writers.
    with pytest.raises(LeaseLostError) as lost:
        await store.append_step("s", 1, b"stale step", fence=held.epoch)
    answer = api_error_for(lost.value)
    assert (answer.status, answer.code, answer.headers["Retry-After"]) == (503, "session_moved", "1")
    await store.append_step("s", 1, b"step 1", fence=taken.epoch)
    assert (await store.load_session("s")).steps == (b"step 0", b"step 1")


async def test_the_last_generation_ending_releases_so_the_next_proxy_takes_over_at_once(autojump_clock):
    store, (a, b) = fleet()
    await a.acquire("s")
    a.generation_started("s")
    a.generation_started("s")
    await a.generation_ended("s")
    # One generation still runs: the lease stays.
    assert not (await store.claim_session("s", "proxy-x", LEASE)).granted
    await a.generation_ended("s")
    began = trio.current_time()
    moved = await b.acquire("s")
    assert trio.current_time() == began  # no wait at all
    assert moved.epoch == 2
    # And back: a's copy is stale (b owned the session since), so a must reload.
    b.generation_started("s")
    await b.generation_ended("s")
    back = await a.acquire("s")
    assert back == LeaseGrant(3, True)


async def test_a_released_lease_retaken_by_its_owner_keeps_the_epoch_and_the_copy(autojump_clock):
    _, (a, _) = fleet()
    await a.acquire("s")
    a.generation_started("s")
    await a.generation_ended("s")
    await trio.sleep(LEASE * 2)
    assert await a.acquire("s") == LeaseGrant(1, False)


async def test_a_release_never_undoes_a_claim_made_after_the_generation_ended(autojump_clock):
    store, (a, b) = fleet()
    await a.acquire("s")
    a.generation_started("s")
    # The next request of the session acquires around the ending generation's release (either order).
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.generation_ended, "s")
        nursery.start_soon(a.acquire, "s")
    claim = await store.claim_session("s", "proxy-1", LEASE)
    assert not claim.granted and claim.owner == "proxy-0"
    # A request that acquired before the last generation ended, and has not started its own yet, keeps it too.
    await a.acquire("t")
    a.generation_started("t")
    await a.acquire("t")
    await a.generation_ended("t")
    claim = await store.claim_session("t", "proxy-1", LEASE)
    assert not claim.granted and claim.owner == "proxy-0"


async def test_renewal_keeps_busy_sessions_only(autojump_clock):
    store, (a, _) = fleet()
    await a.acquire("busy")
    await a.acquire("idle")
    a.generation_started("busy")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.run_renewal)
        await trio.sleep(LEASE * 3)
        nursery.cancel_scope.cancel()
    assert a.busy_sessions() == ["busy"]
    assert not (await store.claim_session("busy", "proxy-1", LEASE)).granted
    assert (await store.claim_session("idle", "proxy-1", LEASE)).granted


async def test_a_store_only_one_process_uses_needs_no_leases():
    assert isinstance(session_leases_for(InMemoryTrajectoryStore(), "p", LEASE), SoleOwner)
    assert isinstance(session_leases_for(InMemoryTrajectoryStore(shared=True), "p", LEASE), StoreLeases)
    assert default_proxy_id("127.0.0.1", 8800).startswith("127.0.0.1:8800:")
