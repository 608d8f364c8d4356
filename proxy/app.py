"""The proxy's quart-trio app: error handling in one place, routes in ``proxy/routes/``.

Every error, including unknown routes, upstream faults and session errors, is rendered in the OpenAI error shape
``{"error": {"message", "type", "param", "code", "request_id"}}`` with a stable ``code`` whose status and type come
from the one table (``proxy/api/errors.py``). An exception nobody expected is still answered in that shape (500
``internal_error``) and logged; the tests make sure no input reaches that path. No body carries internals (upstream
URLs, exception text, tracebacks): each handler logs the detail with the request id that the body and the
``X-Request-Id`` header of every response carry (``proxy/request_id.py``, the outermost ASGI wrapper).
"""

from __future__ import annotations

import logging

from quart import Response
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from proxy.api import ApiError
from proxy.controllers.errors import SessionError
from proxy.controllers.upstream_reader import failure_event
from proxy.request_end import RequestEndHooks
from proxy.request_id import RequestIdMiddleware, current_request_id
from proxy.routes import chat, info, rollout, rollout_control
from proxy.services import ProxyServices
from proxy.tokenization import TitoError
from proxy.upstream.errors import UpstreamError
from serving.http_server import harden_app

log = logging.getLogger("dressage_proxy")

#: every route module; each has ``register(app, services)``
ROUTE_MODULES = [info, rollout, rollout_control, chat]


def error_response(error: ApiError) -> Response:
    response = Response(error.to_body(), status=error.status, content_type="application/json")
    for name, value in (error.headers or {}).items():
        response.headers[name] = value
    return response


def create_proxy_app(services: ProxyServices) -> QuartTrio:
    app = harden_app(QuartTrio("dressage-proxy"))

    @app.errorhandler(ApiError)
    async def _api_error(error: ApiError) -> Response:
        return error_response(error)

    @app.errorhandler(HTTPException)
    async def _http_error(error: HTTPException) -> Response:
        # Unknown routes, wrong methods, bodies over the limit: the same shape as every other error.
        return error_response(ApiError.from_http_status(error.code or 400, error.description or error.name))

    @app.errorhandler(UpstreamError)
    async def _upstream_error(error: UpstreamError) -> Response:
        # The same code as a failed generation (proxy/controllers/upstream_reader.py), which logs the detail.
        failure = failure_event(error)
        return error_response(ApiError.of(failure.code, failure.message))

    @app.errorhandler(SessionError)
    async def _session_error(error: SessionError) -> Response:
        answer = ApiError.from_session_error(error)
        if answer.status >= 500:
            log.error("request %s: answered %d %s: %s", current_request_id(), answer.status, answer.code, error)
        return error_response(answer)

    @app.errorhandler(TitoError)
    async def _tito_error(error: TitoError) -> Response:
        # The chat template refused the conversation (a full encode has no fallback): the input is at fault.
        log.info("request %s: the chat template cannot render the messages: %s", current_request_id(), error)
        return error_response(ApiError.chat_template_refused(error.failure.reason.value))

    @app.errorhandler(Exception)
    async def _unexpected(error: Exception) -> Response:
        log.error("request %s: unexpected error, answered 500", current_request_id(), exc_info=error)
        return error_response(ApiError.internal_error())

    for module in ROUTE_MODULES:
        module.register(app, services)
    # Every exchange's end is seen, also one cut before a streaming body started (proxy/request_end.py); outermost,
    # every exchange gets its request id (the context of everything it runs, the X-Request-Id header).
    app.asgi_app = RequestIdMiddleware(RequestEndHooks(app.asgi_app))  # type: ignore[method-assign]
    return app
