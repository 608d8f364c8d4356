"""``POST /v1/responses`` (OpenAI Responses API): a thin translator onto the chat path.

The body becomes a chat-completions request (``proxy/frontends/responses_request.py``; its ``input`` items become
chat messages by ``responses_items.py``), run by :class:`~proxy.frontends.chat_bridge.ChatRun` exactly as the chat
route runs one (same session trie, same trajectory), always as a chat stream: the chunks become the typed
Responses events and the final ``Response`` (``responses_stream.py``). A streaming client gets the events as
``text/event-stream``; a non-streaming one the final object. Errors are the app's OpenAI error shape.

Session id (whose trajectory the turn extends), first found of:

1. the chat route's sources (``X-Session-Id`` header, body ``session_id``, ``X-SMG-Routing-Key``; the proxy's
   ``--session-id-header`` / ``--session-id-body-field`` apply);
2. the session of ``previous_response_id`` (the chain continues where it was recorded);
3. ``prompt_cache_key`` (Codex CLI sends its conversation id there), when it is a valid session id;
4. a new session named after this response's id.

The answer's ``X-Session-Id`` header names the session used. ``store`` (default true) keeps the response's chain for
``previous_response_id`` (``responses_store.py``: per session, bounded, dropped with the session). There is no
``Idempotency-Key`` replay here (the chat route's), and no ``GET``/``DELETE /v1/responses/{id}``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, MutableMapping
from contextlib import aclosing
from typing import Any

from quart_trio import QuartTrio

from proxy.api import ChatCompletionRequest, dumps, parse_json_body
from proxy.api.errors import ApiError, ErrorCode
from proxy.api.fields import identifier
from proxy.api.session_identity import SessionIdSources, header_map, read_session_id
from proxy.controllers.off_loop import INLINE_BODY_BYTES, run_sized
from proxy.frontends.chat_bridge import ChatRun
from proxy.frontends.responses_items import items_to_messages
from proxy.frontends.responses_request import ResponsesBody, read_responses_body, responses_error
from proxy.frontends.responses_store import ResponseChains, StoredResponse
from proxy.frontends.responses_stream import ResponseEvents, new_id
from proxy.frontends.template_probe import system_role_inside
from proxy.lean_http import Answer, lean_route
from proxy.routes.chat import SSE_HEADERS
from proxy.services import ProxyServices
from proxy.session_context import set_current_session_id

JSON = "application/json"
SSE = "text/event-stream"


def register(app: QuartTrio, services: ProxyServices) -> None:
    # The chat route's controller when it is registered (one controller per app), else one of our own.
    controller = app.extensions.get("dressage_generation_controller") or services.generation_controller()
    sessions = services.sessions
    config = services.config
    session_ids = SessionIdSources(config.session_id_headers, config.session_id_body_field)

    def session_alive(session_id: str) -> bool:
        session = sessions.peek(session_id)
        return session is not None and session.trie is not None

    inner_system_role = system_role_inside(services.tokenizer)
    chains = ResponseChains(session_alive)
    app.extensions["dressage_response_chains"] = chains

    async def responses(request_headers: Any, data: bytes, scope: MutableMapping[str, Any]) -> Answer:
        body, raw = await run_sized(len(data), INLINE_BODY_BYTES, _read, data)
        response_id = new_id("resp")
        previous = _previous(body)
        session_id = _session_id(raw, previous, response_id, request_headers)
        set_current_session_id(session_id)
        history = previous.conversation() if previous is not None else []
        chat_body = {**body.chat, "messages": body.conversation(history, inner_system_role)}
        headers = {**header_map(request_headers), session_ids.headers[0].lower(): session_id}
        chat = await run_sized(len(data), INLINE_BODY_BYTES, _chat_request, chat_body, headers)
        run = await ChatRun.start(controller, chat, app.nursery, scope)
        first = await run.first_chunk()
        events = _events(body, run, first, response_id, session_id, previous)
        if body.stream:  # a stream is never cut (as the chat route)
            return Answer(200, SSE, _sse(events), {**SSE_HEADERS, "X-Session-Id": session_id})
        final: dict[str, Any] = {}
        async with aclosing(events) as iterator:
            async for event in iterator:
                if event["type"] == "error":  # the chat stream ended in an error: answer it
                    raise _error_of(event)
                final = event
        if "response" not in final:  # a chat stream with no chunk at all (never seen; not a 500 either)
            raise ApiError.upstream_error("the upstream answer ended before it began")
        return Answer(200, JSON, dumps(final["response"]), {"X-Session-Id": session_id})

    # An agent's every turn: served on the lean path (proxy/lean_http.py), quart otherwise.
    lean_route(app, "POST", "/v1/responses", responses)

    def _read(data: bytes) -> tuple[ResponsesBody, dict[str, Any]]:
        raw = parse_json_body(data)
        return read_responses_body(raw), raw

    def _previous(body: ResponsesBody) -> StoredResponse | None:
        if body.previous_response_id is None:
            return None
        record = chains.get(body.previous_response_id)
        if record is None:
            raise ApiError.invalid_request(
                f"previous response {body.previous_response_id!r} not found: it was not stored (store: false), its "
                "session ended, or it is too old", "previous_response_id",
            )
        return record

    def _session_id(raw: dict[str, Any], previous: StoredResponse | None, response_id: str, headers: Any) -> str:
        try:
            session_id, _ = read_session_id(raw, header_map(headers), session_ids)
        except ApiError as error:
            if error.code != ErrorCode.MISSING_SESSION_ID:
                raise
        else:
            if previous is not None and previous.session_id != session_id:
                raise ApiError.invalid_request(
                    f"previous_response_id belongs to another session than {session_id!r} (response chains are "
                    "kept per session)", "previous_response_id",
                )
            return session_id
        if previous is not None:
            return previous.session_id
        key = raw.get("prompt_cache_key")
        if key is not None:
            try:
                return identifier(key, "prompt_cache_key")
            except ApiError:
                pass  # not a valid session id: a session of its own
        return response_id

    def _chat_request(chat_body: dict[str, Any], headers: dict[str, str]) -> ChatCompletionRequest:
        try:
            return ChatCompletionRequest.from_http(
                chat_body, headers, session_ids, tool_call_type=config.effective_tool_call_type,
                max_messages=config.max_messages,
            )
        except ApiError as error:
            raise responses_error(error) from None

    async def _events(
        body: ResponsesBody, run: ChatRun, first: bytes, response_id: str, session_id: str,
        previous: StoredResponse | None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Every Responses event of the answer; stores the chain at its end (``store``)."""
        translator: ResponseEvents | None = None
        async with aclosing(run.chunks(first)) as chunks:
            async for chunk in chunks:
                if translator is None:
                    translator = ResponseEvents(
                        response_id, body.echo, model=chunk.get("model") or "", created_at=int(time.time()),
                        logprobs=body.logprobs, reasoning_summary=body.reasoning_summary,
                        encrypted_reasoning=body.encrypted_reasoning, namespaces=body.namespaces,
                    )
                    for event in translator.opening():
                        yield event
                if "error" in chunk and "choices" not in chunk:
                    for event in translator.failed(chunk["error"]):
                        yield event
                    return
                for event in translator.on_chunk(chunk):
                    yield event
        if translator is None:
            return
        final = translator.finish()
        if body.store:
            output = items_to_messages(translator.response["output"], "output")
            chains.add(response_id, StoredResponse(session_id, previous, tuple(body.input_messages + output)))
        for event in final:
            yield event

    return None


async def _sse(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async with aclosing(events) as iterator:
        async for event in iterator:
            yield b"event: " + event["type"].encode() + b"\ndata: " + dumps(event) + b"\n\n"


def _error_of(error: dict[str, Any]) -> ApiError:
    """The ``error`` event (the chat stream's closing error) as the ApiError a non-streaming client gets."""
    code, message, param = str(error.get("code") or "upstream_error"), str(error.get("message") or ""), error.get("param")
    try:
        return ApiError.of(code, message, param)
    except (KeyError, ValueError):
        return ApiError(502, code, message, param)


__all__ = ["register"]
