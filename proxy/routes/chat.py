"""``POST /v1/chat/completions``: parse, hand the request to the generation controller, answer.

Thin on purpose (``docs/request-path.md`` describes the whole path), and served on the lean path
(``proxy/lean_http.py``: no quart request or response objects; quart serves the same handler for every other way
the path is reached). The body is read before anything is answered (``LeanRoutes`` on the lean path,
``serving.http_server``'s hook on quart's; stack-notes pitfall 1); ``ChatCompletionRequest.from_http`` validates
it (a 4xx ``ApiError`` for anything wrong; a large body is parsed and validated in a worker thread,
``proxy/routes/json_body.py``); the controller prepares the step and raises ``ApiError`` for refusals; then:

- non-streaming: wait for the ``chat.completion`` object (or the ``ApiError`` to answer);
- streaming: wait for the first SSE bytes (or the ``ApiError`` to answer with its status, nothing sent yet), then
  answer 200 ``text/event-stream`` with a body that only drains the generation's output channel.

With an ``Idempotency-Key`` header (``proxy/controllers/idempotency.py``) the key is claimed in the session first: a
recorded answer is replayed at once, a different request under the key is 422, a run of the same request is waited
for; the request that holds the claim records its answer if its step committed, or frees the key. The session is
loaded first (after a restart, its journal's keys come back holding their committed steps: a repeat of one is
answered from the step, ``proxy/controllers/committed_answer.py``), and the claimed key rides on the request
(``ChatCompletionRequest.idempotency``) to the registry's prepare, which journals it with the step.

A client that disconnects cancels this handler (``LeanRoutes``' disconnect watcher, or quart-trio's) or closes
the body generator; the generation turns either into ``ClientDisconnected``. A disconnect in the window after the
handler returned and before the body started runs neither: the end of the exchange (``proxy/request_end.py``)
calls ``client_gone`` then, and always (idempotent, a no-op after a delivered answer). Errors are rendered by
``proxy.app``'s handlers.

A request with ``n > 1`` is answered the same way by a ``ChoiceSet`` (``proxy/controllers/choices.py``): ``n``
generations, one per choice, put together as one answer (one object, or one multiplexed stream); under an
idempotency key, its answer is recorded once every choice committed.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from functools import partial
from typing import Any

import attrs
from quart_trio import QuartTrio

from proxy.api import ChatCompletionRequest, dumps
from proxy.api.session_identity import SessionIdSources
from proxy.controllers import idempotency
from proxy.controllers.committed_answer import render_committed
from proxy.controllers.choices import ChoiceSet
from proxy.controllers.generation_driver import Generation
from proxy.lean_http import Answer, lean_route
from proxy.request_end import on_request_end
from proxy.routes.json_body import convert_json_body
from proxy.services import ProxyServices
from proxy.session_context import set_current_session_id

#: response headers of a stream: no caching, no proxy buffering (nginx honours X-Accel-Buffering)
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
JSON = "application/json"
SSE = "text/event-stream"


def register(app: QuartTrio, services: ProxyServices) -> None:
    controller = services.generation_controller()
    app.extensions["dressage_generation_controller"] = controller
    sessions = services.sessions
    config = services.config
    session_ids = SessionIdSources(config.session_id_headers, config.session_id_body_field)

    async def chat_completions(headers: Any, data: bytes, scope: MutableMapping[str, Any]) -> Answer:
        chat, key, fingerprint = await convert_json_body(data, partial(read_chat, headers))
        set_current_session_id(chat.session_id)  # on every log line of this exchange from now on, its access line too
        keys = await sessions.loaded_idempotency_keys(chat.session_id) if key is not None else None
        if keys is None:
            return await answer(chat, None, scope)
        assert key is not None and fingerprint is not None
        # A restored key's step answers a single-choice repeat; an n > 1 repeat runs again (idempotency.py).
        claim = await keys.claim(key, fingerprint, from_step=chat.n == 1)
        if isinstance(claim, idempotency.KeyedStep):
            model = chat.model or await controller._served_model_name()
            claim = render_committed(claim, chat, model, controller.tokenizer, controller.end_ids,
                                     token_ids_default=config.return_token_ids)
            keys.remember(key, claim)
        if isinstance(claim, idempotency.RecordedResponse):
            return Answer(200, claim.content_type, claim.body, idempotency.replay_headers(claim, SSE_HEADERS))
        # journaled with the step
        return await answer(attrs.evolve(chat, idempotency=(key, fingerprint)), claim, scope)

    # Served on the lean path (proxy/lean_http.py: every turn of every agent comes here), quart otherwise.
    lean_route(app, "POST", "/v1/chat/completions", chat_completions)

    def read_chat(headers: Any, body: Any) -> tuple[ChatCompletionRequest, str | None, str | None]:
        """The request, its Idempotency-Key and (with a key) the body's fingerprint: every O(body) step of the
        request's reading, run together (off the loop for a large body, ``proxy/routes/json_body.py``)."""
        chat = ChatCompletionRequest.from_http(
            body, headers, session_ids, tool_call_type=config.effective_tool_call_type,
            max_messages=config.max_messages,
        )
        key = idempotency.key_from_headers(headers)
        return chat, key, idempotency.fingerprint(body) if key is not None else None

    async def answer(
        chat: ChatCompletionRequest, claim: idempotency.Claim | None, scope: MutableMapping[str, Any]
    ) -> Answer:
        """Generate and answer; with a claim, record a committed answer under its key (or free the key)."""
        handed_over = False
        try:
            generation: Generation | ChoiceSet
            if chat.n > 1:
                generation = await ChoiceSet.start(controller, chat, app.nursery)
            else:
                generation = await controller.start(chat, app.nursery)
            # However this exchange ends (a disconnect before the body starts included), the generation hears of it.
            on_request_end(scope, generation.client_gone)
            if not chat.stream:
                payload = dumps(await generation.result())
                step_id = committed_step(generation)
                if claim is not None and step_id is not None:
                    claim.record(idempotency.RecordedResponse(payload, JSON, False, step_id))
                return Answer(200, JSON, payload)
            first = await generation.first_output()
            sse = generation.sse_body(first)
            if claim is not None:
                # The stream's body records the answer at its end (or frees the key).
                answered = generation
                sse = idempotency.RecordingBody(sse, claim, lambda: committed_step(answered), SSE)
                # A body never started records nothing: the exchange's end frees the key (no-op if recorded).
                on_request_end(scope, claim.release)
                handed_over = True
        finally:
            if claim is not None and not handed_over:
                claim.release()  # a no-op once recorded
        return Answer(200, SSE, sse, SSE_HEADERS)

    def committed_step(generation: Generation | ChoiceSet) -> int | None:
        """The step an answer committed, for its idempotency record; with several choices, the first choice's once
        every choice committed (an answer is recorded whole or not at all)."""
        if isinstance(generation, ChoiceSet):
            steps = [committed_step(choice) for choice in generation.generations]
            return None if None in steps else steps[0]
        assert generation.prepared is not None
        return sessions.committed_step(generation.prepared.handle)


__all__ = ["SSE_HEADERS", "register"]
