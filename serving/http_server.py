"""Serving a quart-trio app with hypercorn, in-process, with the stack's measured pitfalls handled.

Shared by the proxy and the embedded engine, so both get the same fixes (shared/docs/stack-notes.md):

1. hypercorn's trio worker + quart-trio hang a keep-alive connection when a response is sent before the request
   body has arrived. Every request reads its body first (a ``before_request`` hook), so an early error answer can
   never leave unread bytes on the connection.
2. Quart's ``RESPONSE_TIMEOUT`` and ``BODY_TIMEOUT`` default to 60 s and silently cut long streams (a generation
   can run for minutes; a paused request waits for a weight update). Both are switched off.
7. ``hypercorn -w 1`` forks a child; we call ``hypercorn.trio.serve`` in this process instead, and report the bound
   address through ``task_status`` so ``port=0`` works in tests.

And the limits a client meets (``serving/http_limits.py:HTTPLimits``, passed to :func:`serve_app`): the body's size
and read time here, in the body read of pitfall 1; the head's size and read time in ``serving/limited_h11.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from quart import Response, current_app, request
from quart_trio import QuartTrio
from werkzeug.exceptions import RequestEntityTooLarge, RequestTimeout

from serving import limited_h11, tcp_reads
from serving.http_limits import TIMEOUT, TOO_LARGE, HTTPLimits

#: where an app keeps the limits it is served with (app.config)
LIMITS_KEY = "DRESSAGE_HTTP_LIMITS"


def harden_app(app: QuartTrio) -> QuartTrio:
    """Apply pitfalls 1 and 2 to ``app`` (idempotent enough to call once per app), with the default limits until
    :func:`serve_app` applies its own."""
    app.config["RESPONSE_TIMEOUT"] = None
    apply_limits(app, HTTPLimits())

    @app.before_request
    async def _read_body_first() -> Response | None:
        try:
            await request.get_data()
        except (RequestEntityTooLarge, RequestTimeout) as exc:
            return _body_refusal(exc, current_app.config[LIMITS_KEY])
        return None

    return app


def apply_limits(app: QuartTrio, limits: HTTPLimits) -> None:
    """The body limits are Quart's own, read per request: ``MAX_CONTENT_LENGTH`` (checked against
    ``Content-Length`` before the body is read, else as a chunked body arrives) and ``BODY_TIMEOUT`` (around the
    body read; None: off, since pitfall 2's 60 s default would refuse a slow large upload)."""
    app.config["MAX_CONTENT_LENGTH"] = limits.max_body_bytes
    app.config["BODY_TIMEOUT"] = limits.body_read_timeout
    app.config[LIMITS_KEY] = limits


def _body_refusal(exc: Exception, limits: HTTPLimits) -> Response:
    """413 or 408 in the limits' error shape (:func:`body_refusal_parts`)."""
    status, body, headers = body_refusal_parts("too_large" if isinstance(exc, RequestEntityTooLarge) else "timeout",
                                                limits)
    return Response(body, status=status, content_type="application/json", headers=headers)


def body_refusal_parts(kind: str, limits: HTTPLimits) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, headers) of a body refused as ``"too_large"`` (413) or ``"timeout"`` (408); the lean routes
    (``proxy/lean_http.py``) answer with the same. ``Connection: close``: the rest of the body may still be coming,
    and it must not be read as the next request (nor make hypercorn wait for it, pitfall 1)."""
    if kind == "too_large":
        status, code = TOO_LARGE
        body = limits.refusal(
            status, code, f"the request body is over {limits.max_body_bytes} bytes", limit=limits.max_body_bytes
        )
    else:
        status, code = TIMEOUT
        body = limits.refusal(
            status, code, f"the request body was not received within {limits.body_read_timeout:g} s; the connection "
            "is closed",
        )
    return status, body, {"Connection": "close"}


def hypercorn_config(host: str, port: int, limits: HTTPLimits | None = None) -> HypercornConfig:
    """hypercorn's config for ``limits`` (default: :class:`HTTPLimits`'s generous ones). The idle keep-alive
    timeout is hypercorn's setting (kept by ``serving/limited_h11.py`` after a connection's first request); the
    head's size and read time are ``serving/limited_h11.py``'s. hypercorn's ``read_timeout`` stays off: it bounds
    every receive, also while a long response streams to a silent client."""
    limited_h11.install()
    tcp_reads.install()
    config = limited_h11.LimitedConfig(limits or HTTPLimits())
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 1
    # The listen backlog: uvicorn's (SGLang's server) default instead of hypercorn's 100. Connections come in storms
    # (a pause's hundreds of rid aborts and continuations, many agents starting at once); past the backlog the
    # kernel drops SYNs and each retry waits a full second (bench/pause.py: resume -> next token 7.8x the
    # engine's with 256 streams at 100, against ~1.1x with 64).
    config.backlog = 2048
    return config


async def serve_app(
    app: QuartTrio, host: str, port: int, *,
    limits: HTTPLimits | None = None,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None, graceful_timeout: float | None = None,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until cancelled, or until ``shutdown_trigger()`` returns: then hypercorn's graceful stop (the
    listener closes, idle keep-alive connections close, busy ones close after their answer) and return once every
    connection is closed, cancelling those still open ``graceful_timeout`` seconds after the trigger (default 1 s).
    ``limits``: what a client may send (default: :class:`HTTPLimits`'s generous ones, for the engine and mock-clock
    tests). ``task_status.started(base_url)`` with the bound port."""
    limits = limits or HTTPLimits()
    apply_limits(app, limits)
    config = hypercorn_config(host, port, limits)
    if graceful_timeout is not None:
        config.graceful_timeout = graceful_timeout
    await serve(app, config, shutdown_trigger=shutdown_trigger, task_status=_BaseUrlStatus(task_status))


class _BaseUrlStatus:
    """hypercorn reports ``["http://127.0.0.1:PORT"]``; callers get the single base URL."""

    def __init__(self, task_status: Any) -> None:
        self._task_status = task_status

    def started(self, binds: list[str] | None = None) -> None:
        self._task_status.started(binds[0].rstrip("/") if binds else None)
