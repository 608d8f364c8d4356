"""The lean route's body read: a body the server already queued is taken without a task step; one still on its way
is awaited (and its limits hold) as before."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from proxy.lean_http import LeanRoutes, ScopeHeaders
from serving.http_limits import HTTPLimits


def _messages(*parts: bytes) -> list[dict[str, Any]]:
    return [{"type": "http.request", "body": part, "more_body": index < len(parts) - 1}
            for index, part in enumerate(parts)]


async def _unused_send(message: dict[str, Any]) -> None:
    raise AssertionError(f"nothing is answered for a body within the limits: {message}")


async def test_a_queued_body_is_read_without_a_checkpoint():
    send, receive = trio.open_memory_channel[dict[str, Any]](8)
    for message in _messages(b'{"a":', b" 1}", b""):
        send.send_nowait(message)
    with trio.testing.assert_no_checkpoints():
        body = await LeanRoutes._read_body(receive.receive, _unused_send, HTTPLimits(), ScopeHeaders(None))
    assert body == b'{"a": 1}'


async def test_a_body_on_its_way_is_awaited_and_a_receive_of_another_kind_works_too():
    send, receive = trio.open_memory_channel[dict[str, Any]](8)

    async def later() -> None:
        await trio.sleep(0.01)
        for message in _messages(b"x", b"y"):
            await send.send(message)

    async def wrapped_receive() -> dict[str, Any]:  # not a channel's own receive: always awaited
        return await receive.receive()

    for reader in (receive.receive, wrapped_receive):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(later)
            with trio.testing.assert_checkpoints():
                body = await LeanRoutes._read_body(reader, _unused_send, HTTPLimits(), ScopeHeaders(None))
        assert body == b"xy"


async def test_a_queued_body_over_the_limit_is_still_refused():
    send, receive = trio.open_memory_channel[dict[str, Any]](8)
    for message in _messages(b"x" * 10, b"y" * 10):
        send.send_nowait(message)
    answered: list[dict[str, Any]] = []

    async def record(message: dict[str, Any]) -> None:
        answered.append(message)

    body = await LeanRoutes._read_body(receive.receive, record, HTTPLimits(max_body_bytes=15), ScopeHeaders(None))
    assert body is None and answered[0]["status"] == 413


async def test_a_body_half_queued_is_finished_by_waiting_for_the_rest():
    """The queued part is taken at once, the rest awaited under the read timeout: one body, in order."""
    send, receive = trio.open_memory_channel[dict[str, Any]](8)
    first, *rest = _messages(b"ab", b"cd", b"ef")
    send.send_nowait(first)

    async def later() -> None:
        await trio.sleep(0.01)
        for message in rest:
            await send.send(message)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(later)
        body = await LeanRoutes._read_body(receive.receive, _unused_send, HTTPLimits(), ScopeHeaders(None))
    assert body == b"abcdef"


async def test_a_client_that_left_mid_body_gets_no_answer():
    for waited in (False, True):
        send, receive = trio.open_memory_channel[dict[str, Any]](8)
        send.send_nowait(_messages(b"ab", b"cd")[0])
        if not waited:
            send.send_nowait({"type": "http.disconnect"})

        async def later() -> None:
            await trio.sleep(0.01)
            await send.send({"type": "http.disconnect"})

        async with trio.open_nursery() as nursery:
            if waited:
                nursery.start_soon(later)
            body = await LeanRoutes._read_body(receive.receive, _unused_send, HTTPLimits(), ScopeHeaders(None))
        assert body is None


async def test_a_body_that_stops_coming_is_refused_at_the_read_timeout():
    send, receive = trio.open_memory_channel[dict[str, Any]](8)
    send.send_nowait(_messages(b"ab", b"cd")[0])
    answered: list[dict[str, Any]] = []

    async def record(message: dict[str, Any]) -> None:
        answered.append(message)

    body = await LeanRoutes._read_body(receive.receive, record, HTTPLimits(body_read_timeout=0.05),
                                       ScopeHeaders(None))
    assert body is None and answered[0]["status"] == 408
