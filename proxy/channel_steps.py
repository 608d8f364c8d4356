"""Memory-channel operations that cost a task step only when they wait (issue 21 item 2).

trio's ``receive`` and ``send`` checkpoint even when they complete at once (an item was queued; there was room or a
waiting reader): a trip through the run loop and a resume of the task's whole await chain, several a request on the
proxy's hot path. These take the item, or hand it over, with the ``_nowait`` form when that succeeds, and wait as
trio's own do otherwise (cancellable, fair). A loop built on them still waits, and sees a cancellation, whenever
nothing is queued; its items must come from other tasks (or from its own steps), never from a producer it starves.
"""

from __future__ import annotations

from typing import TypeVar

import trio

T = TypeVar("T")


def queued(channel: trio.MemoryReceiveChannel[T]) -> T | None:
    """The next item if one is queued, else None at once (for channels whose items are never None)."""
    try:
        return channel.receive_nowait()
    except trio.WouldBlock:
        return None


async def receive(channel: trio.MemoryReceiveChannel[T]) -> T:
    """``channel.receive()``, without a checkpoint when an item is already queued."""
    try:
        return channel.receive_nowait()
    except trio.WouldBlock:
        return await channel.receive()


async def send(channel: trio.MemorySendChannel[T], item: T) -> None:
    """``channel.send(item)``, without a checkpoint when the item fits at once (room, or a waiting reader)."""
    try:
        channel.send_nowait(item)
    except trio.WouldBlock:
        await channel.send(item)


__all__ = ["queued", "receive", "send"]
