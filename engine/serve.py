"""Serving the engine in-process with ``hypercorn.trio.serve`` (never a forked worker, stack-notes pitfall 7)."""

from __future__ import annotations

import attrs
import trio

from serving.http_server import serve_app

from .app import create_engine_app
from .config import EngineConfig
from .scheduler import Engine


@attrs.frozen
class EngineHandle:
    """What ``serve_engine`` reports once it is listening."""

    #: ``http://127.0.0.1:<bound port>``
    url: str
    host: str
    port: int
    engine: Engine


async def serve_engine(
    config: EngineConfig, *, task_status: trio.TaskStatus[EngineHandle] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve until cancelled; ``task_status.started(EngineHandle)`` once bound (``port=0`` picks a free port)."""
    app, engine = create_engine_app(config)
    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(serve_app, app, config.host, config.port)
        port = int(url.rsplit(":", 1)[1])
        task_status.started(EngineHandle(url=url, host=config.host, port=port, engine=engine))
