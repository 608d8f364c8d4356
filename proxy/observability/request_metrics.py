"""Requests by endpoint, protocol and status: an ASGI wrapper around the whole app, and a quart hook that names the
route.

Labels are bounded: ``endpoint`` is the matched route's rule (``/session/<path:session_id>``, never the raw path
with its session id), ``other`` when no route matched. A route handler's request names its rule in a
``before_request`` hook (quart matched it already: no second match); an exchange refused before the app (the
access rules of ``proxy/access.py``: 401, 403, 415) or one no handler ran for is matched once against the app's URL
map, off the hot path. The status is the one of ``http.response.start``; an exchange that ended without one is
``499`` (the client left first, nginx's code for it) or ``500`` (an exception escaped the app). The duration runs
from the exchange's start to its end: a stream's whole body.

With ``--no-metrics`` nothing is wrapped (:func:`instrument_requests` returns the app as it is).
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

import trio
from quart import request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from proxy.observability.metrics import UNMATCHED, MetricsHooks

#: the ASGI scope key where the before_request hook leaves the matched route's rule
ENDPOINT_KEY = "dressage.endpoint"


def instrument_requests(app: QuartTrio, metrics: MetricsHooks, asgi_app: Callable[..., Any]) -> Callable[..., Any]:
    """``asgi_app`` wrapped so that every exchange is counted (metrics on), else ``asgi_app`` itself."""
    if not metrics.enabled:
        return asgi_app

    @app.before_request
    async def _name_endpoint() -> None:
        rule = request.url_rule
        if rule is not None:
            request.scope[ENDPOINT_KEY] = rule.rule

    return RequestMetricsMiddleware(asgi_app, metrics, RuleResolver(app))


class RuleResolver:
    """The rule a path and method match in the app's URL map, or ``other`` (for exchanges no handler named)."""

    def __init__(self, app: QuartTrio) -> None:
        self._app = app
        self._adapter: Any = None

    def __call__(self, path: str, method: str) -> str:
        if self._adapter is None:
            # Bound on first use: every route is registered by then (proxy/app.py registers them first).
            self._adapter = self._app.url_map.bind("localhost")
        try:
            rule, _ = self._adapter.match(path, method=method, return_rule=True)
        except HTTPException:  # no route (404), or not this method (405)
            return UNMATCHED
        return rule.rule


class RequestMetricsMiddleware:
    """ASGI middleware: one ``request_finished(endpoint, status, seconds)`` per HTTP exchange."""

    def __init__(self, app: Callable[..., Any], metrics: MetricsHooks, resolve: Callable[[str, str], str]) -> None:
        self.app = app
        self.metrics = metrics
        self.resolve = resolve

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        began = trio.current_time()
        status: str | None = None

        async def send_noting_status(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = str(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        except BaseException as exc:
            if status is None:
                status = "499" if isinstance(exc, trio.Cancelled) else "500"
            raise
        finally:
            endpoint = scope.get(ENDPOINT_KEY)
            if endpoint is None:
                endpoint = self.resolve(str(scope.get("path", "/")), str(scope.get("method", "GET")))
            self.metrics.request_finished(endpoint, status or "499", trio.current_time() - began)


__all__ = ["ENDPOINT_KEY", "RequestMetricsMiddleware", "RuleResolver", "instrument_requests"]
