"""Every HTTP exchange, observed once: its session slot, its ``dressage_requests_total`` count and duration, and its
access line (logger ``dressage_proxy.requests``, level info). One ASGI wrapper does all three with one ``send``
wrapper, so the request path pays for one layer, not one per concern.

**The access line** is our own rather than hypercorn's access log, for three reasons: hypercorn writes its line
outside the exchange's context, so it cannot carry the request and session ids (``proxy/request_id.py``,
``proxy/session_context.py``); it does not know the route's rule (``/session/<path:session_id>``, the bounded name
to aggregate by); and it builds a dict of every request and response header for its format atoms on each exchange,
where this wrapper only counts the status and the body bytes it already sees pass. The line, sent when the exchange
ends (a stream's last byte, or the client's disconnect)::

    POST /v1/chat/completions 200 41.7 ms

with the fields ``method``, ``path``, ``endpoint``, ``status``, ``duration_ms``, ``response_bytes`` (body bytes
sent), ``complete`` (the answer's last byte was sent), and the ids the log filter adds.

**The metric and the line agree**: the same ``endpoint`` (the matched route's rule, ``other`` when no route
matches: never the raw path) and the same ``status`` (when no answer was started: 499 if the client left first,
nginx's code for it, 500 if an exception escaped the app). A route handler's request names its rule in a
``before_request`` hook (quart matched it already: no second match); an exchange refused before the app (the
access rules of ``proxy/access.py``: 401, 403, 415) is matched once against the app's URL map when it ends.

**Costs nothing it need not**: with ``--no-metrics`` and ``--log-level warning`` the wrapper only binds the
exchange's session slot; nothing is timed or counted. It sits inside ``RequestIdMiddleware`` (the id is set) and
outside everything else (refusals are counted and logged too).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Any

import trio
from quart import request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from proxy.asgi_wrapper import HttpExchangeWrapper
from proxy.observability.metrics import NO_METRICS, UNMATCHED, MetricsHooks
from proxy.session_context import bind_exchange_slot, reset_exchange_slot

log = logging.getLogger("dressage_proxy.requests")

#: the ASGI scope key where the matched route's rule is left for the metric and the access line
ROUTE_KEY = "dressage.endpoint"
#: the status of an exchange that ended without an answer because its client left (nginx's code for it)
CLIENT_GONE = 499


def record_route_rules(app: QuartTrio) -> None:
    """Leave each request's matched rule in its ASGI scope. The hook runs before every other ``before_request``
    hook: one that answers early (the body limits' 413) skips the rest."""

    async def _record_route_rule() -> None:
        rule = request.url_rule
        if rule is not None:
            request.scope[ROUTE_KEY] = rule.rule

    app.before_request_funcs.setdefault(None, []).insert(0, _record_route_rule)


class RuleResolver:
    """The rule a path and method match in the app's URL map, or ``other`` (for exchanges no handler named)."""

    def __init__(self, app: QuartTrio | None) -> None:
        self._app = app
        self._adapter: Any = None

    def __call__(self, path: str, method: str) -> str:
        if self._app is None:
            return UNMATCHED
        if self._adapter is None:
            # Bound on first use: every route is registered by then (proxy/app.py registers them first).
            self._adapter = self._app.url_map.bind("localhost")
        try:
            rule, _ = self._adapter.match(path, method=method, return_rule=True)
        except HTTPException:  # no route (404), or not this method (405)
            return UNMATCHED
        return rule.rule


class ExchangeObserver(HttpExchangeWrapper):
    """ASGI middleware: the exchange's session slot; its count, duration and access line at the end."""

    def __init__(self, app: Callable[..., Any], metrics: MetricsHooks = NO_METRICS,
                 resolve: Callable[[str, str], str] = RuleResolver(None)) -> None:
        super().__init__(app)
        self.metrics = metrics
        self.resolve = resolve

    async def exchange(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        token = bind_exchange_slot()
        try:
            if self.metrics.enabled or log.isEnabledFor(logging.INFO):
                await self._observed(scope, receive, send)
            else:
                await self.app(scope, receive, send)
        finally:
            reset_exchange_slot(token)

    async def _observed(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        started = trio.current_time()
        status: int | None = None
        sent = 0
        complete = False

        async def send_observed(message: MutableMapping[str, Any]) -> None:
            nonlocal status, sent, complete
            kind = message["type"]
            if kind == "http.response.body":
                sent += len(message.get("body", b""))
                complete = not message.get("more_body", False)
            elif kind == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_observed)
        except BaseException as exc:
            if status is None:
                status = CLIENT_GONE if isinstance(exc, trio.Cancelled) else 500
            raise
        finally:
            seconds = trio.current_time() - started
            status = status if status is not None else CLIENT_GONE
            endpoint = scope.get(ROUTE_KEY)
            if endpoint is None:
                endpoint = scope[ROUTE_KEY] = self.resolve(str(scope.get("path", "/")), str(scope.get("method", "")))
            self.metrics.request_finished(endpoint, status, seconds)
            if log.isEnabledFor(logging.INFO):
                duration_ms = round(seconds * 1000.0, 3)
                method, path = scope.get("method"), scope.get("path")
                log.info(
                    "%s %s %s %.1f ms", method, path, status, duration_ms,
                    extra={
                        "method": method, "path": path, "endpoint": endpoint, "status": status,
                        "duration_ms": duration_ms, "response_bytes": sent, "complete": complete,
                    },
                )


def observe_exchanges(app: QuartTrio, metrics: MetricsHooks, asgi_app: Callable[..., Any]) -> ExchangeObserver:
    """``asgi_app`` wrapped in the exchange observer of ``app`` (whose routes name their rules from now on)."""
    record_route_rules(app)
    return ExchangeObserver(asgi_app, metrics, RuleResolver(app))


__all__ = ["CLIENT_GONE", "ROUTE_KEY", "ExchangeObserver", "RuleResolver", "observe_exchanges", "record_route_rules"]
