"""OnDemandLock: a trio.Lock's behaviour, with no lock object while nobody holds or awaits it."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from proxy.controllers.on_demand_lock import OnDemandLock


async def test_an_uncontended_use_leaves_no_lock_behind():
    lock = OnDemandLock()
    async with lock:
        assert lock.locked() and lock._lock is not None
    assert not lock.locked() and lock._lock is None


async def test_it_excludes_and_hands_over_in_arrival_order():
    lock = OnDemandLock()
    inside: list[str] = []
    order: list[str] = []

    async def user(name: str) -> None:
        async with lock:
            inside.append(name)
            assert len(inside) == 1, "two tasks held the lock at once"
            order.append(name)
            await trio.sleep(0.01)
            inside.remove(name)

    async with trio.open_nursery() as nursery:
        for name in "abcd":
            nursery.start_soon(user, name)
            await trio.testing.wait_all_tasks_blocked()
    assert order == list("abcd") and lock._lock is None


async def test_a_waiter_cancelled_before_its_turn_is_no_longer_a_user():
    lock = OnDemandLock()
    await lock.acquire()
    held = lock._lock
    caught: list[bool] = []

    async def waiter() -> None:
        with trio.move_on_after(0.01) as scope:
            await lock.acquire()
        caught.append(scope.cancelled_caught)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
    assert caught == [True]
    assert lock._lock is held  # still held by the first user
    lock.release()
    assert lock._lock is None and not lock.locked()
    async with lock:  # usable again, a new trio.Lock
        assert lock.locked()


async def test_release_by_another_task_or_unheld_is_refused():
    lock = OnDemandLock()
    with pytest.raises(RuntimeError):
        lock.release()
    await lock.acquire()

    async def other() -> None:
        with pytest.raises(RuntimeError):
            lock.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
    lock.release()
    assert lock._lock is None


async def test_a_free_lock_is_taken_without_a_checkpoint_a_held_one_is_awaited():
    """A free lock costs no task step (issue 21 item 2); a contended acquire still waits and checkpoints."""
    lock = OnDemandLock()
    with trio.testing.assert_no_checkpoints():
        await lock.acquire()
    got: list[str] = []

    async def second() -> None:
        with trio.testing.assert_checkpoints():
            async with lock:
                got.append("second")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        lock.release()
    assert got == ["second"] and lock._lock is None
