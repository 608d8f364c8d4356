"""A trio lock that exists only while somebody holds it or waits for it (issue 21 item 5: live-session memory).

Every live session had two ``trio.Lock`` objects (the session's and its journal's): with their parking lots about
340 bytes each, for locks that are free nearly all the time. :class:`OnDemandLock` is 48 bytes: it creates the
``trio.Lock`` on the first ``acquire`` and drops it when the last user releases it (or gives up waiting), so a
session between requests holds none. Fairness, the owner check and a waiter's cancellation are the ``trio.Lock``'s
own: this only counts the users of the current one (and takes a free lock without a checkpoint).
"""

from __future__ import annotations

from types import TracebackType

import trio


class OnDemandLock:
    """``async with lock:`` as with a ``trio.Lock``, which exists only while held or awaited."""

    __slots__ = ("_lock", "_users")

    def __init__(self) -> None:
        self._lock: trio.Lock | None = None
        # Tasks holding the lock or waiting for it (the last one out drops it).
        self._users = 0

    def locked(self) -> bool:
        """Whether a task holds the lock."""
        return self._lock is not None and self._lock.locked()

    async def acquire(self) -> None:
        lock = self._lock
        if lock is None:
            # Nobody holds it or waits for it: taken at once, without the checkpoint ``trio.Lock.acquire`` adds (a
            # task step; three a request on the request path, issue 21 item 2). A cancellation is seen at the
            # holder's next checkpoint instead; a contended acquire waits, and is cancellable, as before.
            lock = self._lock = trio.Lock()
            lock.acquire_nowait()
            self._users = 1
            return
        self._users += 1
        try:
            await lock.acquire()
        except BaseException:  # cancelled while waiting: no longer a user
            self._leave()
            raise

    def release(self) -> None:
        if self._lock is None:
            raise RuntimeError("release of an OnDemandLock nobody holds")
        self._lock.release()
        self._leave()

    def _leave(self) -> None:
        self._users -= 1
        if self._users == 0:
            self._lock = None

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        self.release()


__all__ = ["OnDemandLock"]
