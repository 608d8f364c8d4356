"""ResponseChannel's driver side: an item that fits goes without a task step; a full channel holds the driver."""

from __future__ import annotations

import trio
import trio.testing

from proxy.controllers.response_output import ResponseChannel


async def test_items_that_fit_are_sent_without_a_checkpoint_and_in_order():
    channel = ResponseChannel(size=3)
    channel.emit(b"a")
    channel.emit(b"b")  # consecutive bytes go as one item
    channel.emit({"done": True})
    with trio.testing.assert_no_checkpoints():
        await channel.flush()
        await channel.send({"also": 1})
    assert await channel.receive_next(lambda: None) == b"ab"
    assert await channel.receive_next(lambda: None) == {"done": True}
    assert await channel.receive_next(lambda: None) == {"also": 1}


async def test_a_full_channel_holds_the_flush_and_a_cancellation_keeps_what_was_not_sent():
    channel = ResponseChannel(size=1)
    channel.emit({"first": 1})
    channel.emit({"second": 2})
    with trio.move_on_after(0.01) as scope:
        with trio.testing.assert_checkpoints():
            await channel.flush()  # the second does not fit until somebody reads
    assert scope.cancelled_caught
    assert await channel.receive_next(lambda: None) == {"first": 1}
    await channel.flush()  # the staged rest first
    assert await channel.receive_next(lambda: None) == {"second": 2}
