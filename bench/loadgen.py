"""A light HTTP/1.1 load generator on raw trio sockets and h11, shared by the benchmarks.

Why not httpx: on this 2-core machine httpx spends ~2 ms of CPU per request (stack-notes 5), which would make the
load generator the bottleneck. Here each worker holds one keep-alive connection and speaks HTTP/1.1 through h11
(the same parser hypercorn uses), so a request costs a few tens of microseconds of client CPU.

Every run is bounded in count and in time (``deadline``): a benchmark stops by itself.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import h11
import trio


@attrs.define
class Connection:
    """One keep-alive HTTP/1.1 connection to ``host:port``."""

    host: str
    port: int
    stream: trio.SocketStream | None = None
    conn: h11.Connection = attrs.field(factory=lambda: h11.Connection(h11.CLIENT))

    async def open(self) -> None:
        self.stream = await trio.open_tcp_stream(self.host, self.port)
        self.conn = h11.Connection(h11.CLIENT)

    async def aclose(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None

    async def request(
        self, method: str, path: str, body: bytes, on_data: Callable[[bytes], None] | None = None,
        extra_headers: Sequence[tuple[str, str]] = (),
    ) -> tuple[int, bytes]:
        """Send one request; ``on_data`` sees each body piece as it arrives (for streaming: time to first token);
        ``extra_headers`` go after the usual ones (a session header a load balancer hashes, say)."""
        if self.stream is None or self.conn.our_state is h11.MUST_CLOSE:
            await self.aclose()
            await self.open()
        headers = [("host", f"{self.host}:{self.port}"), ("content-type", "application/json"),
                   ("content-length", str(len(body))), *extra_headers]
        out = self.conn.send(h11.Request(method=method, target=path, headers=headers))
        out += self.conn.send(h11.Data(data=body)) + self.conn.send(h11.EndOfMessage())
        await self.stream.send_all(out)
        status = 0
        pieces: list[bytes] = []
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                data = await self.stream.receive_some(65536)
                self.conn.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                pieces.append(bytes(event.data))
                if on_data is not None:
                    on_data(bytes(event.data))
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
        else:
            await self.aclose()
        return status, b"".join(pieces)


@attrs.frozen
class LoadResult:
    """What one bounded load run measured."""

    requests: int
    errors: int
    seconds: float
    #: seconds from sending to the full response, per request
    latencies: tuple[float, ...]
    #: seconds from sending to the first body byte, per request
    first_byte: tuple[float, ...]
    #: units counted by the caller's ``count`` function over response bodies (tokens, say)
    units: int

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def unit_rate(self) -> float:
        return self.units / self.seconds if self.seconds else 0.0

    def percentile(self, p: float, values: tuple[float, ...] | None = None) -> float:
        data = sorted(self.latencies if values is None else values)
        if not data:
            return math.nan
        return data[min(len(data) - 1, int(p / 100 * len(data)))]


async def run_load(
    host: str,
    port: int,
    path: str,
    make_body: Callable[[int, int], dict[str, Any]],
    *,
    concurrency: int,
    requests_per_worker: int,
    deadline: float,
    count: Callable[[bytes], int] = lambda body: 0,
    on_response: Callable[[int, int, bytes], None] | None = None,
) -> LoadResult:
    """``concurrency`` workers each send up to ``requests_per_worker`` requests (bounded by ``deadline`` seconds).

    ``make_body(worker, n)`` builds worker ``worker``'s ``n``-th request; ``on_response(worker, status, body)``
    (optional) sees each complete answer before that worker's next ``make_body``, so a worker can hold a
    conversation (multi-turn sessions whose next request depends on the previous answer).
    """
    latencies: list[float] = []
    first_bytes: list[float] = []
    totals = {"errors": 0, "units": 0, "requests": 0}
    start = time.perf_counter()

    async def worker(index: int) -> None:
        conn = Connection(host, port)
        try:
            for n in range(requests_per_worker):
                body = json.dumps(make_body(index, n)).encode()
                sent = time.perf_counter()
                first: list[float] = []
                status, payload = await conn.request(
                    "POST", path, body, on_data=lambda _d: first or first.append(time.perf_counter())
                )
                done = time.perf_counter()
                totals["requests"] += 1
                if status != 200:
                    totals["errors"] += 1
                latencies.append(done - sent)
                first_bytes.append((first[0] if first else done) - sent)
                totals["units"] += count(payload)
                if on_response is not None:
                    on_response(index, status, payload)
        finally:
            await conn.aclose()

    with trio.move_on_after(deadline):
        async with trio.open_nursery() as nursery:
            for i in range(concurrency):
                nursery.start_soon(worker, i)
    seconds = time.perf_counter() - start
    return LoadResult(
        requests=totals["requests"], errors=totals["errors"], seconds=seconds,
        latencies=tuple(latencies), first_byte=tuple(first_bytes), units=totals["units"],
    )


def count_sse_events(body: bytes) -> int:
    """Data events in an SSE body, not counting the final ``[DONE]``."""
    return body.count(b"data: ") - body.count(b"data: [DONE]")
