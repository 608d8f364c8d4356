"""The upstream connection's plain path moves bytes on the socket's descriptor and waits only when the kernel would
block (``proxy/upstream/_http_connection.py``): no task step for a send or a receive that did not wait, the same
bytes, a wait that sees the data arrive, and the errors of a closed or reset socket."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from proxy.upstream import http1
from proxy.upstream._http_connection import IO_ERRORS, Connection


def _pair() -> tuple[Connection, trio.socket.SocketType]:
    ours, theirs = trio.socket.socketpair()
    return Connection(ours, ("http", "127.0.0.1", 1)), theirs


async def test_a_send_and_a_receive_that_do_not_wait_take_no_checkpoint():
    connection, peer = _pair()
    with trio.testing.assert_no_checkpoints():
        await connection.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", None)
    assert await peer.recv(100) == b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    connection.http.sent_request()
    await peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    with trio.testing.assert_no_checkpoints():
        await connection.receive(None)
    assert isinstance(connection.http.next_event(), http1.Response)
    assert connection.http.next_event() == b"ok"
    connection.close()
    peer.close()


async def test_a_receive_waits_for_data_and_a_large_send_for_room():
    connection, peer = _pair()
    connection.http.sent_request()

    async def answer_later() -> None:
        await trio.sleep(0.01)
        await peer.send(b"HTTP/1.1 204 No Content\r\n\r\n")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_later)
        with trio.testing.assert_checkpoints():
            await connection.receive(None)
    assert isinstance(connection.http.next_event(), http1.Response)
    big = bytes(range(256)) * 40_000  # more than a socket buffer holds

    received = bytearray()

    async def drain() -> None:
        while len(received) < len(big):
            received.extend(await peer.recv(1 << 16))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        await connection.send_all(big, None)
    assert bytes(received) == big
    connection.close()
    peer.close()


async def test_a_peer_that_closed_reads_as_eof_and_a_closed_connection_raises_an_io_error():
    connection, peer = _pair()
    peer.close()
    await connection.receive(None)
    assert connection.eof
    connection.close()
    with pytest.raises(IO_ERRORS):
        await connection.send_all(b"x", None)
    with pytest.raises(IO_ERRORS):
        await connection.receive(None)


async def test_closing_the_socket_wakes_a_waiting_receive_with_an_io_error():
    connection, peer = _pair()
    caught: list[BaseException] = []

    async def waiter() -> None:
        try:
            await connection.receive(None)
        except IO_ERRORS as error:
            caught.append(error)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        connection.close()
    assert caught and isinstance(caught[0], (trio.ClosedResourceError, OSError))
    peer.close()
