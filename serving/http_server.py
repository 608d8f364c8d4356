"""Serving a quart-trio app with hypercorn, in-process, with the stack's measured pitfalls handled.

Shared by the proxy and the embedded engine, so both get the same fixes (shared/docs/stack-notes.md):

1. hypercorn's trio worker + quart-trio hang a keep-alive connection when a response is sent before the request
   body has arrived. Every request reads its body first (a ``before_request`` hook), so an early error answer can
   never leave unread bytes on the connection.
2. Quart's ``RESPONSE_TIMEOUT`` and ``BODY_TIMEOUT`` default to 60 s and silently cut long streams (a generation
   can run for minutes; a paused request waits for a weight update). Both are switched off.
7. ``hypercorn -w 1`` forks a child; we call ``hypercorn.trio.serve`` in this process instead, and report the bound
   address through ``task_status`` so ``port=0`` works in tests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from quart import request
from quart_trio import QuartTrio


def harden_app(app: QuartTrio) -> QuartTrio:
    """Apply pitfalls 1 and 2 to ``app`` (idempotent enough to call once per app)."""
    app.config["RESPONSE_TIMEOUT"] = None
    app.config["BODY_TIMEOUT"] = None
    # Large prompts (hundreds of thousands of ids as JSON) must not hit Quart's 16 MiB default.
    app.config["MAX_CONTENT_LENGTH"] = 256 * 1024 * 1024

    @app.before_request
    async def _read_body_first() -> None:
        await request.get_data()

    return app


def hypercorn_config(host: str, port: int) -> HypercornConfig:
    config = HypercornConfig()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    # Idle keep-alive connections are closed after this long. It is long on purpose: tests run servers on
    # trio's autojump clock, where a short timeout would fire as soon as every task blocks.
    config.keep_alive_timeout = 3600
    config.graceful_timeout = 1
    # The listen backlog: uvicorn's (SGLang's server) default instead of hypercorn's 100. Connections come in storms
    # (a pause's hundreds of rid aborts and continuations, many agents starting at once); past the backlog the
    # kernel drops SYNs and each retry waits a full second (bench/pause.py: resume -> next token 7.8x the
    # engine's with 256 streams at 100, against ~1.1x with 64).
    config.backlog = 2048
    return config


async def serve_app(
    app: QuartTrio, host: str, port: int, *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None, graceful_timeout: float | None = None,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until cancelled, or until ``shutdown_trigger()`` returns: then hypercorn's graceful stop (the
    listener closes, idle keep-alive connections close, busy ones close after their answer) and return once every
    connection is closed, cancelling those still open ``graceful_timeout`` seconds after the trigger (default 1 s).
    ``task_status.started(base_url)`` with the bound port."""
    config = hypercorn_config(host, port)
    if graceful_timeout is not None:
        config.graceful_timeout = graceful_timeout
    await serve(app, config, shutdown_trigger=shutdown_trigger, task_status=_BaseUrlStatus(task_status))


class _BaseUrlStatus:
    """hypercorn reports ``["http://127.0.0.1:PORT"]``; callers get the single base URL."""

    def __init__(self, task_status: Any) -> None:
        self._task_status = task_status

    def started(self, binds: list[str] | None = None) -> None:
        self._task_status.started(binds[0].rstrip("/") if binds else None)
