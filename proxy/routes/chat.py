"""``POST /v1/chat/completions``: parse, hand the request to the generation controller, answer.

Thin on purpose (``docs/request-path.md`` describes the whole path). The body is read before anything is answered
(``proxy.serving``'s hook, stack-notes pitfall 1); ``ChatCompletionRequest.from_http`` validates it (a 4xx
``ApiError`` for anything wrong); the controller prepares the step and raises ``ApiError`` for refusals; then:

- non-streaming: wait for the ``chat.completion`` object (or the ``ApiError`` to answer);
- streaming: wait for the first SSE bytes (or the ``ApiError`` to answer with its status, nothing sent yet), then
  answer 200 ``text/event-stream`` with a body that only drains the generation's output channel.

A client that disconnects cancels this handler (quart-trio's disconnect watcher) or closes the body generator; the
generation turns either into ``ClientDisconnected``. A disconnect in the window after the handler returned and
before quart started the body runs neither: the end of the exchange (``proxy/request_end.py``) calls
``client_gone`` then, and always (idempotent, a no-op after a delivered answer). Errors are rendered by ``proxy.app``'s handlers.
"""

from __future__ import annotations

from quart import Response, request
from quart_trio import QuartTrio

from proxy.api import ChatCompletionRequest, dumps, parse_json_body
from proxy.api.chat_request import SessionIdSources
from proxy.controllers.generation import GenerationController
from proxy.request_end import on_request_end
from proxy.services import ProxyServices

#: response headers of a stream: no caching, no proxy buffering (nginx honours X-Accel-Buffering)
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def register(app: QuartTrio, services: ProxyServices) -> None:
    controller = GenerationController.from_services(services)
    app.extensions["dressage_generation_controller"] = controller
    config = services.config
    session_ids = SessionIdSources(config.session_id_headers, config.session_id_body_field)

    @app.post("/v1/chat/completions")
    async def chat_completions() -> Response:
        body = parse_json_body(await request.get_data())
        chat = ChatCompletionRequest.from_http(body, request.headers, session_ids)
        generation = await controller.start(chat, app.nursery)
        # However this exchange ends (a disconnect before the body starts included), the generation hears of it.
        on_request_end(request.scope, generation.client_gone)
        if not chat.stream:
            completion = await generation.result()
            return Response(dumps(completion), status=200, content_type="application/json")
        first = await generation.first_output()
        response = Response(generation.sse_body(first), status=200, content_type="text/event-stream")
        response.headers.update(SSE_HEADERS)
        response.timeout = None  # never cut a stream (stack-notes pitfall 2; the app-wide timeouts are off too)
        return response


__all__ = ["SSE_HEADERS", "register"]
