"""One streamed ``/generate`` request of :class:`~proxy.upstream.client.SGLangClient`: an async context manager
and an async iterator of token events (``async with client.generate_stream(...) as events: async for event in
events``).

No cancel scope is held between events. Leaving the block after the final event reads the stream to its end
(``[DONE]``, then EOF; bounded by the client's ``drain_timeout``) so the connection returns to the pool; leaving it
any other way (an error, a ``break``, a cancellation) closes the connection at once (a synchronous socket close,
which no cancellation can skip), so SGLang sees the disconnect.

The HTTP is ``_httplib``'s (the response is a :class:`~proxy.upstream._httplib.StreamResponse`), the decoding
``chunks``' (SSE framing, then :class:`~proxy.upstream.chunks.ChunkDecoder`); this module is the lifecycle between
them.
"""

from __future__ import annotations

from collections import deque
from types import TracebackType
from typing import Any

import attrs
import trio

from proxy.upstream._httplib import HTTPClient, StreamResponse
from proxy.upstream.chunks import ChunkDecoder, SSEParser
from proxy.upstream.errors import UpstreamError, error_from_response
from proxy.upstream.events import Event, Finished, Partial


@attrs.define
class ClientCounters:
    """What an ``SGLangClient`` has sent, counted by the client and by its streams (the live numbers behind
    ``SGLangClient.statistics()``)."""

    requests_sent: int = 0
    #: streams entered and not yet closed
    open_streams: int = 0
    streams_started: int = 0


class GenerateStream:
    """One streamed ``/generate`` request: an async context manager and an async iterator of events.

    Yields :class:`~proxy.upstream.events.Token` events (one per new token, in order) and then one
    :class:`~proxy.upstream.events.Finished`; iteration ends when the server closes the stream. Raises
    ``UpstreamHTTPError`` on entering for an error status, and while iterating ``UpstreamErrorChunk``,
    ``UpstreamStreamCut``, ``UpstreamProtocolError`` or (with a read timeout) ``UpstreamTimeout`` (each carrying
    ``partial``).
    """

    def __init__(
        self,
        http: HTTPClient,
        counters: ClientCounters,
        drain_timeout: float,
        url: str,
        body: dict[str, Any],
        headers: dict[str, str] | None,
        decoder: ChunkDecoder,
        *,
        read_timeout: float | None = None,
    ) -> None:
        self._http = http
        self._counters = counters
        self._drain_timeout = drain_timeout
        self.url = url
        self.body = body
        self._headers = headers
        self._decoder = decoder
        #: the longest silence between two reads (head, then body pieces); None: unbounded
        self._read_timeout = read_timeout
        self._sse = SSEParser()
        self._events: deque[Event] = deque()
        self._response: StreamResponse | None = None
        self._entered = False
        self._eof = False
        self._closed = False
        self._error: UpstreamError | None = None

    @property
    def rid(self) -> str:
        return self.body["rid"]

    @property
    def result(self) -> Finished | None:
        """The final event, once it has been decoded."""
        return self._decoder.result

    def partial(self) -> Partial:
        """The tokens decoded so far."""
        return self._decoder.partial()

    async def __aenter__(self) -> GenerateStream:
        if self._entered:
            raise RuntimeError("a GenerateStream can be entered only once")
        self._entered = True
        counters = self._counters
        counters.requests_sent += 1
        response = await self._http.stream(
            "POST", self.url, self.body, headers=self._headers, partial=self._decoder.partial,
            read_timeout=self._read_timeout,
        )
        self._response = response
        counters.open_streams += 1
        counters.streams_started += 1
        try:
            if response.status >= 400:
                content = await response.read()
                raise error_from_response(response.status, content, url=self.url)
        except BaseException:
            self._close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None and self._decoder.result is not None and not self._eof:
                await self._drain()
        finally:
            self._close()

    def __aiter__(self) -> GenerateStream:
        return self

    async def __anext__(self) -> Event:
        await self._fill()
        if not self._events:
            raise StopAsyncIteration
        return self._events.popleft()

    async def receive_batch(self) -> list[Event]:
        """Every event decoded from the next read (at least one), in order; ``[]`` at the end of the stream.

        The same events as iterating, grouped as they arrived: a consumer that handles a read at once (one state
        machine step for all its tokens) saves a step per token when the upstream is ahead of it."""
        await self._fill()
        batch = list(self._events)
        self._events.clear()
        return batch

    async def _fill(self) -> None:
        """Read until an event is decoded, the stream ends, or an error is due (raised here)."""
        if self._response is None:
            raise RuntimeError("iterate a GenerateStream inside 'async with'")
        await trio.lowlevel.checkpoint_if_cancelled()  # buffered events must not hide a cancellation
        while not self._events:
            if self._error is not None:
                raise self._error
            if self._eof:
                return
            await self._read()

    async def _read(self) -> None:
        """Read one piece of the body and decode it. A decoding error is raised only after the events decoded
        before it (in the same piece) have been handed out."""
        data = await self._response.receive()  # type: ignore[union-attr]
        try:
            if data is None:
                self._eof = True
                self._decoder.feed_eof()
                return
            decoder = self._decoder
            for payload in self._sse.feed(data):
                self._events.extend(decoder.feed_payload(payload))
        except UpstreamError as exc:
            self._error = exc

    async def _drain(self) -> None:
        """After the final event: read up to the end of the body so the connection can be reused; errors no
        longer matter (the connection is then simply closed instead)."""
        response = self._response
        assert response is not None
        with trio.move_on_after(self._drain_timeout):
            try:
                while await response.receive() is not None:
                    pass
                self._eof = True
            except UpstreamError:
                pass

    def _close(self) -> None:
        """Give the connection back (body read to its end) or close it now, so SGLang sees the disconnect.
        Synchronous: a cancelled caller cannot skip it, and the socket is closed before anything else runs."""
        if self._closed:
            return
        self._closed = True
        self._counters.open_streams -= 1
        if self._response is not None:
            self._response.close()


__all__ = ["ClientCounters", "GenerateStream"]
