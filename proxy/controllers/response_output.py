"""The bounded channel between a generation's driver task and its HTTP response (stack-notes pitfalls 3 and 6).

The driver *emits* items (the SSE bytes of one token; or the one final item of a non-streaming answer: the
``chat.completion`` dict or the ``ApiError``) and *flushes* them into a small bounded memory channel; an item leaves
the driver's staging queue only once it was sent, so a flush cut short by a pause's cancellation loses nothing (the
next flush sends the rest first). Consecutive byte items go as one.

The response side reads the first item (it decides between a 200 stream and an error status), and a streaming body
then drains everything buffered at each wake-up and writes it as one blob. The body holds no cancel scope or nursery
across its ``yield``; if it is closed or cancelled before the end of the channel (the client left), it calls the
``on_gone`` callback, synchronously.

An ``n > 1`` answer (``proxy.controllers.choices``) reads each choice's channel item by item (``receive_next``) and
feeds one merged channel whose producers ``send`` concurrently, without staging.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio

from proxy import channel_steps
from proxy.api import ApiError

#: items in the channel (each: everything one token produced); a slow client blocks the driver after this many
OUTPUT_BUFFER = 16


class ResponseChannel:
    """One generation's output: driver side (``emit``, ``flush``, ``close``), response side (``receive_first``,
    ``body``, ``abandon``)."""

    def __init__(self, size: int = OUTPUT_BUFFER) -> None:
        self._send, self._receive = trio.open_memory_channel(size)
        self._pending: collections.deque[Any] = collections.deque()
        #: no more items are accepted (the driver closed it, or the response went away)
        self.closed = False

    # -- driver side ---------------------------------------------------------------------------------------------

    def emit(self, item: Any) -> None:
        """Stage an item (sent by the next ``flush``)."""
        if not self.closed:
            self._pending.append(item)

    async def flush(self) -> None:
        """Send what is staged, in order. Blocks while the channel is full (a slow client); a cancellation keeps
        what was not sent yet. A response that went away makes everything staged moot."""
        pending = self._pending
        while pending:
            if self.closed:
                pending.clear()
                return
            item, count = pending[0], 1
            if isinstance(item, bytes):
                while count < len(pending) and isinstance(pending[count], bytes):
                    count += 1
                if count > 1:
                    item = b"".join(pending[index] for index in range(count))
            try:
                await channel_steps.send(self._send, item)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.closed = True
                pending.clear()
                return
            for _ in range(count):
                pending.popleft()

    async def send(self, item: Any) -> None:
        """Send one item now, unstaged (several tasks may send concurrently: each one's items stay in order). Blocks
        while the channel is full; a cancellation sends nothing; a response that went away makes it a no-op."""
        if self.closed:
            return
        try:
            await channel_steps.send(self._send, item)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed = True

    def close(self) -> None:
        """No more items: the response reads what is buffered, then the end."""
        self.closed = True
        self._pending.clear()
        self._send.close()

    # -- response side -------------------------------------------------------------------------------------------

    def abandon(self) -> None:
        """The client left: wake a driver blocked on a full channel (its send fails) and drop what is buffered."""
        self.closed = True
        self._receive.close()

    async def receive_first(self, on_gone: Callable[[], None]) -> Any:
        """The first item; a cancellation (the client left) calls ``on_gone`` and propagates."""
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise ApiError.internal_error("the generation ended without an answer") from None
        except BaseException:
            on_gone()
            raise

    async def receive_next(self, on_gone: Callable[[], None]) -> Any:
        """The next item, or None at the end of the channel; a cancellation calls ``on_gone`` and propagates."""
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return None
        except BaseException:
            on_gone()
            raise

    async def body(self, first: bytes, on_gone: Callable[[], None]) -> AsyncIterator[bytes]:
        """The streaming body: ``first``, then one write per wake-up of everything buffered."""
        complete = False
        receive = self._receive
        try:
            yield first
            while not complete:
                batch: list[bytes] = []
                try:
                    batch.append(await receive.receive())
                    while True:
                        batch.append(receive.receive_nowait())
                except trio.WouldBlock:
                    pass
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    complete = True
                if batch:
                    yield b"".join(batch)
        finally:
            if not complete:
                on_gone()


__all__ = ["OUTPUT_BUFFER", "ResponseChannel"]
