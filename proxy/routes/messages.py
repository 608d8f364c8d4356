"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: the Anthropic Messages API, a thin translator.

A Messages body becomes a chat-completions body (``proxy/frontends/messages_request.py``), validated by
``ChatCompletionRequest.from_http`` like any chat request (session id from the same headers and body field), run
through the generation controller by ``proxy/frontends/chat_bridge.py:ChatRun``, and its chat answer read back as a
``Message`` (``messages_output.py``) or as Anthropic's typed SSE (``messages_stream.py``). Errors are answered in
Anthropic's shape by ``messages_errors.py:AnthropicErrorShape`` (``proxy/app.py`` wraps the app in it), also those
met before the handler runs (keys, media type, body size).

Headers: ``x-api-key`` is read by the access rules like ``Authorization: Bearer`` (``proxy/access.py``);
``anthropic-version`` and ``anthropic-beta`` are accepted and change nothing (the proxy serves one version of the
API). Every answer carries ``request-id`` (what the Anthropic SDKs expose as ``_request_id``), the same id as
``X-Request-Id`` (written by ``AnthropicErrorShape``).

``count_tokens`` answers ``{"input_tokens": N}``: the request rendered with the served chat template as the proxy
renders a conversation's first turn (its messages, the tools the template is offered, the effective template
kwargs). It needs no session id (none is recorded), and generates nothing.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from functools import partial
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.datastructures import Headers

from proxy.api import ChatCompletionRequest, dumps
from proxy.api.session_identity import SessionIdSources
from proxy.frontends.template_probe import system_role_inside
from proxy.controllers.off_loop import INLINE_BODY_BYTES, run_sized
from proxy.frontends.chat_bridge import ChatRun
from proxy.frontends.messages_output import message_id, message_json
from proxy.frontends.messages_request import chat_body, shows_thinking
from proxy.frontends.messages_stream import MessageStreamWriter, sse_body
from proxy.lean_http import Answer, lean_route
from proxy.request_id import current_request_id, new_request_id
from proxy.routes.chat import SSE_HEADERS
from proxy.routes.json_body import convert_json_body, read_json_body
from proxy.services import ProxyServices
from proxy.session_context import set_current_session_id
from proxy.trajectory.message_keys import effective_template_kwargs

JSON = "application/json"
#: the session id a count_tokens request without one is validated under (nothing is recorded for it)
COUNT_TOKENS_SESSION = "count-tokens"


def register(app: QuartTrio, services: ProxyServices) -> None:
    config = services.config
    session_ids = SessionIdSources(config.session_id_headers, config.session_id_body_field)

    def controller() -> Any:
        # The chat route's controller (one per app), made here only when the chat route is not registered.
        extensions = app.extensions
        if "dressage_generation_controller" not in extensions:
            extensions["dressage_generation_controller"] = services.generation_controller()
        return extensions["dressage_generation_controller"]

    inner_system_role = system_role_inside(services.tokenizer)

    def read(headers: Headers, body: Any, *, counting: bool = False) -> tuple[ChatCompletionRequest, str, bool]:
        """The chat request of a Messages body, the model name the client asked for, and whether the answer shows
        its thinking text."""
        translated = chat_body(body, require_max_tokens=not counting, inner_system_role=inner_system_role)
        if counting and not any(headers.get(name) for name in session_ids.headers):
            headers = Headers(headers)
            headers[session_ids.headers[0]] = COUNT_TOKENS_SESSION
        chat = ChatCompletionRequest.from_http(
            translated, headers, session_ids, tool_call_type=config.effective_tool_call_type,
            max_messages=config.max_messages,
        )
        return chat, translated["model"], shows_thinking(body)

    async def messages(headers: Any, data: bytes, scope: MutableMapping[str, Any]) -> Answer:
        chat, model, show_thinking = await convert_json_body(data, partial(read, headers))
        set_current_session_id(chat.session_id)
        run = await ChatRun.start(controller(), chat, app.nursery, scope)
        stop_sequences = chat.stop
        if not chat.stream:
            completion = await run.completion()
            answer = message_json(
                completion, model, _matched_stop(run), stop_sequences, _message_id(), show_thinking=show_thinking,
            )
            return Answer(200, JSON, dumps(answer))
        first = await run.first_chunk()
        writer = MessageStreamWriter(_message_id(), model, _prompt_tokens(run), stop_sequences, show_thinking)
        body = sse_body(writer, run.chunks(first), partial(_matched_stop, run))
        return Answer(200, "text/event-stream", body, SSE_HEADERS)  # a stream is never cut (stack-notes pitfall 2)

    # An agent's every turn: served on the lean path (proxy/lean_http.py), quart otherwise.
    lean_route(app, "POST", "/v1/messages", messages)

    @app.post("/v1/messages/count_tokens")
    async def count_tokens() -> Response:
        chat, _, _ = await read_json_body(partial(read, request.headers, counting=True))
        tools = list(chat.template_tools) if chat.template_tools else None
        kwargs = effective_template_kwargs(chat.chat_template_kwargs, services.sessions.config.default_template_kwargs)
        size = sum(len(str(message.get("content") or "")) for message in chat.messages)
        ids = await run_sized(
            size, INLINE_BODY_BYTES, services.tokenizer.encode_full, list(chat.messages), tools, kwargs
        )
        return Response(dumps({"input_tokens": len(ids)}), status=200, content_type=JSON)


def _matched_stop(run: ChatRun) -> Any:
    """What the generation stopped on (a stop string, a token id, or None), once it finished. A Messages request
    is always one generation (no ``n``), whose ``output`` is its ``StepOutput``."""
    output = getattr(run.generation, "output", None)
    return getattr(output, "matched_stop", None)


def _prompt_tokens(run: ChatRun) -> int:
    output = getattr(run.generation, "output", None)
    return len(getattr(output, "prompt_ids", None) or ())


def _message_id() -> str:
    """The answer's ``msg_`` id: the exchange's request id's hex (one id to find it by in the log)."""
    return message_id(current_request_id() or new_request_id())


__all__ = ["register"]
