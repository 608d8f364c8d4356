"""One log line per HTTP exchange: the access log (logger ``dressage_proxy.requests``, level info).

Written by our own ASGI wrapper rather than hypercorn's access log, for three reasons: hypercorn writes its line
outside the exchange's context, so it cannot carry the request and session ids (``proxy/request_id.py``,
``proxy/session_context.py``); it does not know the route's rule (``/session/<path:session_id>``, the bounded name
to aggregate by); and it builds a dict of every request and response header for its format atoms on each exchange,
where this wrapper only counts the status and the body bytes it already sees pass.

The line, sent when the exchange ends (a stream's last byte, or the client's disconnect)::

    POST /v1/chat/completions 200 41.7 ms

with the fields ``method``, ``path``, ``endpoint`` (the matched route's rule, the value of the
``dressage_requests_total`` metric's ``endpoint`` label; ``other`` for an unmatched path or a request refused before
routing), ``status`` (when no answer was started: 499 if the client left first, nginx's code for it, 500 if an
exception escaped the app; the metric's convention), ``duration_ms``, ``response_bytes`` (body bytes sent),
``complete`` (the answer's last byte was sent), and the ids the log filter adds. At ``--log-level warning`` the wrapper only binds the exchange's session slot: nothing is timed or counted.

The wrapper also gives every exchange its session slot (``proxy/session_context.py``), so it sits inside
``RequestIdMiddleware`` (the id is set) and outside everything else (refusals are logged too).
"""

from __future__ import annotations

import logging
import time
from collections.abc import MutableMapping
from typing import Any

import trio
from quart import request
from quart_trio import QuartTrio

from proxy.asgi_wrapper import HttpExchangeWrapper
from proxy.session_context import bind_exchange_slot, reset_exchange_slot

log = logging.getLogger("dressage_proxy.requests")

#: the ASGI scope key where the matched route's rule is left for the access line
ROUTE_KEY = "dressage.endpoint"
#: the route of an exchange no rule matched (an unknown path, a wrong method, a refusal before routing)
UNMATCHED_ROUTE = "other"
#: the status of an exchange that ended without an answer because its client left (nginx's code for it)
CLIENT_GONE = 499


def exchange_route(scope: MutableMapping[str, Any]) -> str:
    """The rule of the route that served the exchange of ``scope`` (``UNMATCHED_ROUTE`` when none did)."""
    return scope.get(ROUTE_KEY, UNMATCHED_ROUTE)


def record_route_rules(app: QuartTrio) -> None:
    """Leave each request's matched rule in its ASGI scope (:func:`exchange_route`). The hook runs before every
    other ``before_request`` hook: one that answers early (the body limits' 413) skips the rest."""

    async def _record_route_rule() -> None:
        rule = request.url_rule
        if rule is not None:
            request.scope[ROUTE_KEY] = rule.rule

    app.before_request_funcs.setdefault(None, []).insert(0, _record_route_rule)


class AccessLogMiddleware(HttpExchangeWrapper):
    """ASGI middleware: the exchange's session slot, and its access line at the end."""

    async def exchange(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        token = bind_exchange_slot()
        try:
            if log.isEnabledFor(logging.INFO):
                await self._logged(scope, receive, send)
            else:
                await self.app(scope, receive, send)
        finally:
            reset_exchange_slot(token)

    async def _logged(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        started = time.perf_counter()
        status: int | None = None
        sent = 0
        complete = False

        async def send_counted(message: MutableMapping[str, Any]) -> None:
            nonlocal status, sent, complete
            kind = message["type"]
            if kind == "http.response.body":
                sent += len(message.get("body", b""))
                complete = not message.get("more_body", False)
            elif kind == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        except BaseException as exc:
            if status is None:
                status = CLIENT_GONE if isinstance(exc, trio.Cancelled) else 500
            raise
        finally:
            duration_ms = round((time.perf_counter() - started) * 1000.0, 3)
            method, path = scope.get("method"), scope.get("path")
            status = status if status is not None else CLIENT_GONE
            log.info(
                "%s %s %s %.1f ms", method, path, status, duration_ms,
                extra={
                    "method": method, "path": path, "endpoint": exchange_route(scope), "status": status,
                    "duration_ms": duration_ms, "response_bytes": sent, "complete": complete,
                },
            )


__all__ = [
    "CLIENT_GONE", "ROUTE_KEY", "UNMATCHED_ROUTE", "AccessLogMiddleware", "exchange_route", "record_route_rules",
]
