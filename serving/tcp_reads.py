"""hypercorn's connection reader, without a cancel scope around every read when no read timeout is set.

hypercorn's ``TCPServer._read_data`` reads each chunk inside ``trio.fail_after(config.read_timeout or inf)``. Both
servers leave ``read_timeout`` off (``serving/http_server.py:hypercorn_config``: it would bound every receive, also
while a long response streams to a silent client), so that scope never fires, yet each read pays for it: a
``fail_after`` is a generator context manager around a ``CancelScope``, ~9 us of trio's work (timeit; about one read
a short request, issue 21 item 2). :class:`ConnectionServer` reads without it then, and is hypercorn's own loop
otherwise. :func:`install` makes hypercorn's trio worker build it for every connection (idempotent).
"""

from __future__ import annotations

import hypercorn.trio.run
import trio
from hypercorn.events import Closed, RawData
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer


class ConnectionServer(TCPServer):
    """hypercorn's ``TCPServer``; reads without a timeout scope when ``config.read_timeout`` is off."""

    async def _read_data(self) -> None:
        if self.config.read_timeout:
            await super()._read_data()
            return
        # hypercorn's loop (hypercorn/trio/tcp_server.py, 0.18.0) less the scope: without it no TooSlowError comes.
        while True:
            try:
                data = await self.stream.receive_some(MAX_RECV)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                break
            else:
                await self.protocol.handle(RawData(bytes(data)))
                if data == b"":
                    break
        await self.protocol.handle(Closed())


def install() -> None:
    """Make hypercorn's trio worker serve each connection with :class:`ConnectionServer` (idempotent)."""
    hypercorn.trio.run.TCPServer = ConnectionServer  # type: ignore[misc]


__all__ = ["ConnectionServer", "install"]
