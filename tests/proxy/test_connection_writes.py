"""The connection's own work (``serving/limited_h11.py``): one keep-alive watcher a connection, and a whole answer's
head written with its body.

hypercorn's real HTTP/1.1 protocol class (:class:`LimitedH11Protocol`) and its real trio task group and worker
context; only the socket side (hypercorn's ``TCPServer.protocol_send``) is a recorder of the events the protocol
hands it: the bytes it writes, and its connection events (``Updated`` arms hypercorn's own per-request keep-alive
timer, ``Closed`` closes the socket). Time is trio's ``MockClock`` (``autojump_clock``): the keep-alive deadlines are
exact, not raced.
"""

from __future__ import annotations

from typing import Any

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.events import Closed, RawData, Updated
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState

from serving.http_limits import HTTPLimits
from serving.limited_h11 import CLIENT_GONE_KEY, LimitedConfig, LimitedH11Protocol

KEEP_ALIVE = 10.0
GET = b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


class Connection:
    """One protocol instance and what it handed the socket side."""

    def __init__(self, app: Any, task_group: TaskGroup, context: WorkerContext, limits: HTTPLimits | None = None) -> None:
        self.events: list[Any] = []
        config = LimitedConfig(limits or HTTPLimits(keep_alive_timeout=KEEP_ALIVE))
        self.protocol = LimitedH11Protocol(
            ASGIWrapper(app), config, context, task_group, ConnectionState({}), False, ("127.0.0.1", 1),
            ("127.0.0.1", 2), self.record,
        )

    async def record(self, event: Any) -> None:
        self.events.append(event)
        if isinstance(event, Closed):
            await self.protocol.handle(Closed())  # as hypercorn's TCPServer does after closing the socket

    def writes(self) -> list[bytes]:
        return [event.data for event in self.events if isinstance(event, RawData)]

    def closed(self) -> bool:
        return any(isinstance(event, Closed) for event in self.events)

    async def request(self, data: bytes = GET) -> None:
        await self.protocol.handle(RawData(data))
        await trio.testing.wait_all_tasks_blocked()


async def whole_answer(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"5")]})
    await send({"type": "http.response.body", "body": b"hello", "more_body": False})


async def test_a_whole_answer_is_one_write_of_its_head_and_body(autojump_clock) -> None:
    async with TaskGroup() as task_group:
        connection = Connection(whole_answer, task_group, WorkerContext(None))
        await connection.request()
        writes = connection.writes()
        assert len(writes) == 1, writes  # hypercorn alone: head, body, and an empty end: three writes
        head, _, body = writes[0].partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"content-length: 5" in head and body == b"hello"
        await connection.protocol.handle(Closed())


async def test_a_streamed_answer_sends_its_head_before_its_first_chunk(autojump_clock) -> None:
    first_chunk = trio.Event()

    async def stream(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await first_chunk.wait()
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async with TaskGroup() as task_group:
        connection = Connection(stream, task_group, WorkerContext(None))
        await connection.request()
        writes = connection.writes()
        assert len(writes) == 1 and writes[0].startswith(b"HTTP/1.1 200") and writes[0].endswith(b"\r\n\r\n")
        first_chunk.set()
        await trio.testing.wait_all_tasks_blocked()
        assert b"data: 1" in b"".join(connection.writes()[1:])
        await connection.protocol.handle(Closed())


async def test_one_keep_alive_watcher_serves_every_request_of_a_connection(autojump_clock) -> None:
    spawned: list[str] = []

    class Spawns(trio.abc.Instrument):
        def task_spawned(self, task: trio.lowlevel.Task) -> None:
            spawned.append(task.name)

    async with TaskGroup() as task_group:
        connection = Connection(whole_answer, task_group, WorkerContext(None))
        trio.lowlevel.add_instrument(Spawns())
        for _ in range(20):
            await connection.request()
            await trio.sleep(KEEP_ALIVE / 2)  # idle, but not for long enough
        assert not connection.closed() and len(connection.writes()) == 20
        # hypercorn's first timer is stopped by the first request; after that no Updated reaches the socket side,
        # and one watcher task (not one a request) keeps the deadline
        updated = [event for event in connection.events if isinstance(event, Updated)]
        assert [event.idle for event in updated] == [False]
        assert sum("_watch_idle" in name for name in spawned) == 1, spawned
        await trio.sleep(KEEP_ALIVE)
        assert connection.closed()  # idle past the keep-alive timeout: closed, as hypercorn's timer would


async def test_an_idle_connection_closes_at_shutdown_and_a_busy_one_after_its_answer(autojump_clock) -> None:
    release = trio.Event()

    async def slow(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/slow":
            await release.wait()
        await whole_answer(scope, receive, send)

    context = WorkerContext(None)
    async with TaskGroup() as task_group:
        idle = Connection(slow, task_group, context)
        busy = Connection(slow, task_group, context)
        await idle.request()
        await busy.request()
        await busy.request(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await context.terminated.set()
        await trio.testing.wait_all_tasks_blocked()
        assert idle.closed()
        assert not busy.closed() and len(busy.writes()) == 1  # its second answer is still coming
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert len(busy.writes()) == 2 and busy.closed()


async def test_a_client_that_leaves_before_its_answer_cancels_the_requests_scope_and_only_then(autojump_clock) -> None:
    """The app hears a client leave through the scope's CLIENT_GONE_KEY cancel scope, with no task of its own: the
    connection cancels it when it closes before the answer is complete, never after a complete answer."""
    ended: list[str] = []

    async def waits(scope: Any, receive: Any, send: Any) -> None:
        with scope[CLIENT_GONE_KEY]:
            if scope["path"] == "/slow":
                await trio.sleep_forever()
            await whole_answer(scope, receive, send)
            await trio.sleep(1)  # still running after its complete answer
        ended.append(scope["path"])

    async with TaskGroup() as task_group:
        answered = Connection(waits, task_group, WorkerContext(None))
        await answered.request()
        await answered.protocol.handle(Closed())  # the client leaves after its answer
        slow = Connection(waits, task_group, WorkerContext(None))
        await slow.request(GET.replace(b"/x", b"/slow"))
        assert ended == [] and slow.writes() == []
        await slow.protocol.handle(Closed())  # the client leaves while its request waits
        await trio.testing.wait_all_tasks_blocked()
        assert ended == ["/slow"]
        await trio.sleep(2)
        assert ended == ["/slow", "/x"] and len(answered.writes()) == 1


class SocketSide:
    """hypercorn's ``TCPServer`` as the protocol sees it (``send_lock``, ``stream.socket``, ``protocol_send``) over a
    real socket pair; records what reached ``protocol_send``."""

    def __init__(self) -> None:
        self.socket, self.peer = trio.socket.socketpair()
        self.stream = trio.SocketStream(self.socket)
        self.send_lock = trio.Lock()
        self.sent: list[Any] = []

    async def protocol_send(self, event: Any) -> None:
        self.sent.append(event)
        if isinstance(event, RawData):
            async with self.send_lock:
                await self.stream.send_all(event.data)


async def test_bytes_the_socket_takes_at_once_are_written_without_a_checkpoint_else_through_hypercorns_send() -> None:
    side = SocketSide()
    async with TaskGroup() as task_group:
        protocol = LimitedH11Protocol(
            ASGIWrapper(whole_answer), LimitedConfig(HTTPLimits()), WorkerContext(None), task_group,
            ConnectionState({}), False, ("127.0.0.1", 1), ("127.0.0.1", 2), side.protocol_send,
        )
        with trio.testing.assert_no_checkpoints():
            await protocol._send(RawData(b"answer"))
        assert side.sent == [] and await side.peer.recv(100) == b"answer"
        async with trio.open_nursery() as nursery:
            async with side.send_lock:  # somebody is sending: the bytes wait their turn in hypercorn's send
                nursery.start_soon(protocol._send, RawData(b"later"))
                await trio.testing.wait_all_tasks_blocked()
                assert [event.data for event in side.sent] == [b"later"]
        assert await side.peer.recv(100) == b"later"
        big = b"x" * (4 << 20)  # more than the socket takes at once: the rest through hypercorn's send
        received = 0

        async def drain() -> None:
            nonlocal received
            while received < len(big):
                received += len(await side.peer.recv(1 << 16))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            await protocol._send(RawData(big))
        assert received == len(big) and len(side.sent) == 2 and 0 < len(side.sent[1].data) < len(big)
    side.socket.close()
    side.peer.close()
