"""The contract's fleet calls, on every back end: session claims between owners, lease expiry, fencing, renewal,
release, and the shared control state. (The memory store keeps leases exactly as a shared store does, so the same
expectations hold for it.)"""

from __future__ import annotations

import pytest

from proxy.trajectory.store import ControlState, LeaseLostError, SessionClaim


async def test_claims_between_two_owners(backend, store):
    first = await store.claim_session("s", "proxy-a", 15)
    assert first == SessionClaim(True, 1, "proxy-a")
    # The owner keeps its epoch when it claims again; another proxy waits for the lease.
    assert await store.claim_session("s", "proxy-a", 15) == SessionClaim(True, 1, "proxy-a")
    refused = await store.claim_session("s", "proxy-b", 15)
    assert (refused.granted, refused.epoch, refused.owner) == (False, 1, "proxy-a")
    assert refused.retry_after == pytest.approx(15)
    backend.clock.advance(14)
    assert (await store.claim_session("s", "proxy-b", 15)).retry_after == pytest.approx(1)
    backend.clock.advance(1)
    # The lease ran out: the other proxy takes the session, and the epoch grows.
    assert await store.claim_session("s", "proxy-b", 15) == SessionClaim(True, 2, "proxy-b")
    assert (await store.claim_session("s", "proxy-a", 15)).granted is False


async def test_a_claim_creates_an_active_record_with_an_empty_journal(store):
    await store.claim_session("s", "proxy-a", 15)
    loaded = await store.load_session("s")
    assert (loaded.state, loaded.steps) == ("active", ())


async def test_a_fenced_step_is_refused_once_another_proxy_took_the_session(backend, store):
    epoch = (await store.claim_session("s", "proxy-a", 15)).epoch
    await store.append_step("s", 0, b"by a", fence=epoch)
    backend.clock.advance(16)
    taken = await store.claim_session("s", "proxy-b", 15)
    with pytest.raises(LeaseLostError) as lost:
        await store.append_step("s", 1, b"stale a", fence=epoch)
    assert (lost.value.session_id, lost.value.epoch) == ("s", taken.epoch)
    await store.append_step("s", 1, b"by b", fence=taken.epoch)
    assert (await store.load_session("s")).steps == (b"by a", b"by b")


async def test_renewal_extends_only_the_callers_leases(backend, store):
    await store.claim_session("mine", "proxy-a", 10)
    await store.claim_session("theirs", "proxy-b", 10)
    backend.clock.advance(8)
    await store.renew_sessions("proxy-a", ["mine", "theirs", "unknown"], 10)
    backend.clock.advance(5)
    assert (await store.claim_session("mine", "proxy-c", 10)).granted is False
    assert (await store.claim_session("theirs", "proxy-c", 10)).granted is True
    assert await store.load_session("unknown") is None


async def test_release_lets_another_proxy_claim_at_once_and_the_owner_keeps_its_epoch(store):
    await store.claim_session("s", "proxy-a", 15)
    await store.release_session("s", "proxy-b")  # not the owner: nothing happens
    assert (await store.claim_session("s", "proxy-b", 15)).granted is False
    await store.release_session("s", "proxy-a")
    assert await store.claim_session("s", "proxy-a", 15) == SessionClaim(True, 1, "proxy-a")
    await store.release_session("s", "proxy-a")
    assert await store.claim_session("s", "proxy-b", 15) == SessionClaim(True, 2, "proxy-b")


async def test_control_state_defaults_to_running_and_keeps_what_was_set(store):
    assert await store.control() == ControlState()
    await store.set_control(ControlState(paused=True, weight_version="v7"))
    assert await store.control() == ControlState(paused=True, weight_version="v7")
    await store.set_control(ControlState(paused=False, weight_version=None))
    assert await store.control() == ControlState()
