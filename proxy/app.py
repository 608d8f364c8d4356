"""The proxy's quart-trio app: error handling in one place, routes in ``proxy/routes/``.

Every error, including unknown routes, upstream faults and session errors, is rendered in the OpenAI error shape
``{"error": {"message", "type", "param", "code", "request_id"}}`` with a stable ``code`` whose status and type come
from the one table (``proxy/api/errors.py``); the one mapping from internal errors to answers is
``proxy/api/error_mapping.py:api_error_for``. An exception nobody expected is still answered in that shape (500
``internal_error``) and logged; the tests make sure no input reaches that path. No body carries internals (upstream
URLs, exception text, tracebacks): the mapping logs the detail with the request id that the body and the
``X-Request-Id`` header of every response carry (``proxy/request_id.py``, the outermost ASGI wrapper).
"""

from __future__ import annotations

from quart import Response
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from proxy.access import AccessMiddleware, AccessPolicy
from proxy.api import ApiError
from proxy.api.error_mapping import api_error_for
from proxy.frontends.messages_errors import AnthropicErrorShape
from proxy.lean_http import LeanRoutes, error_answer, quart_response
from proxy.observability.exchanges import observe_exchanges
from proxy.request_end import RequestEndHooks
from proxy.request_id import RequestIdMiddleware
from proxy.routes import chat, info, messages, metrics, responses, rollout, rollout_control, ui
from proxy.services import ProxyServices
from serving.http_server import harden_app


#: every route module; each has ``register(app, services)``
ROUTE_MODULES = [info, rollout, rollout_control, chat, metrics, ui, responses, messages]


def error_response(error: ApiError) -> Response:
    """The answer to every error on the quart path: the lean path's, as a quart response (one shape for both)."""
    return quart_response(error_answer(error))


def create_proxy_app(services: ProxyServices, *, lean_routes: bool = True) -> QuartTrio:
    """The app; ``lean_routes=False`` serves the hot routes through quart too (``proxy/lean_http.py``; the tests
    compare both)."""
    app = harden_app(QuartTrio("dressage-proxy"))

    @app.errorhandler(HTTPException)
    @app.errorhandler(Exception)
    async def _error(error: Exception) -> Response:
        # Every error, whatever layer raised it, through the one mapping (which logs what the body leaves out).
        return error_response(api_error_for(error))

    for module in ROUTE_MODULES:
        module.register(app, services)
    # Keys, origins, Host and media type are checked first (proxy/access.py): a refused request never reaches a
    # route. Every exchange's end is seen, also one cut before a streaming body started (proxy/request_end.py);
    # outermost, every exchange gets its request id (the context of everything it runs, the X-Request-Id header),
    # refusals included; just inside it, its session slot, its count and duration, and its access line
    # (proxy/observability/exchanges.py).
    config = services.config
    # Innermost, the hot routes skip quart's request machinery (proxy/lean_http.py); everything else is quart's.
    inner = LeanRoutes(app.asgi_app, app) if lean_routes else app.asgi_app
    access = AccessMiddleware(
        inner, AccessPolicy.from_config(config), drain_bytes=config.max_body_bytes,
        drain_seconds=config.body_read_timeout,
    )
    observed = observe_exchanges(app, services.metrics, RequestEndHooks(access))
    # The Anthropic paths answer every error above in Anthropic's shape (proxy/frontends/messages_errors.py).
    app.asgi_app = RequestIdMiddleware(AnthropicErrorShape(observed))  # type: ignore[method-assign]
    return app
