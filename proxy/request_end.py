"""Callbacks that run when an HTTP exchange ends, however it ends: the one sure sign that a client is gone.

Why this exists (issue 13's pause hang): quart sends ``http.response.start`` *before* it enters a streaming
response's body. A client that disconnects in that window cancels the handler while the body generator was never
started, so none of its code runs, its ``finally`` included: the generation behind it never hears that its client
left. It keeps generating into an output channel nobody reads, and once that channel is full its driver waits on
the client for ever (holding its gate slot until the pause-liveness fix; holding memory and an upstream request
still). The ASGI call itself always ends, so an ASGI wrapper's ``finally`` is the one place that sees every
exchange end: the route registers ``generation.client_gone`` there (it is idempotent and a no-op once the answer
was delivered).

Usage: ``app.asgi_app = RequestEndHooks(app.asgi_app)``; in a handler, ``on_request_end(request.scope, callback)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Any

from proxy.asgi_wrapper import HttpExchangeWrapper

log = logging.getLogger("dressage_proxy.request_end")

#: the ASGI scope key holding the list of callbacks of one exchange
_KEY = "dressage.request_end"


def on_request_end(scope: MutableMapping[str, Any], callback: Callable[[], None]) -> None:
    """Run ``callback()`` (synchronous, must not raise) when the HTTP exchange of ``scope`` ends."""
    callbacks = scope.get(_KEY)
    if callbacks is None:
        raise RuntimeError("the app is not wrapped in RequestEndHooks")
    callbacks.append(callback)


class RequestEndHooks(HttpExchangeWrapper):
    """ASGI middleware: gives every HTTP exchange a list of end callbacks and runs them when the call returns or
    is cancelled (the client went away)."""

    async def exchange(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        callbacks: list[Callable[[], None]] = []
        scope[_KEY] = callbacks
        try:
            await self.app(scope, receive, send)
        finally:
            for callback in callbacks:
                try:
                    callback()
                except Exception:  # noqa: BLE001 - a callback bug must not hide the exchange's own outcome
                    log.exception("request end callback %r failed", callback)


__all__ = ["RequestEndHooks", "on_request_end"]
