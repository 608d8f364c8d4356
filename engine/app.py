"""The HTTP surface of the embedded engine: SGLang's routes on a quart-trio app.

Stack rules applied (shared/docs/stack-notes.md): the body is read before any answer (``before_request``),
``RESPONSE_TIMEOUT``/``BODY_TIMEOUT`` are off, and stream bodies hold no cancel scope across ``yield``: they only
wait on the request's revision counter while the generation runs in the engine's own task.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio

from serving.http_server import harden_app

from .config import EngineConfig
from .faults import InjectedHTTPError, break_output
from .generate_request import FieldTypeError, GenerateRequest
from .parsers import ParserCrash, parse_function_call, separate_reasoning
from .request_state import RequestState
from .responses import build_output, held_back, output_text
from .scheduler import Engine

logger = logging.getLogger(__name__)

ROUTING_KEY_HEADER = "X-SMG-Routing-Key"


class _DropConnection(Exception):
    """Raised inside a stream body to cut the connection (the drop fault)."""


def dump_json(payload: Any) -> bytes:
    """Compact UTF-8 JSON (like SGLang's orjson); ASCII escapes if a string holds lone surrogates."""
    try:
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        return json.dumps(payload, ensure_ascii=True, separators=(",", ":")).encode()


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(dump_json(payload), status=status, content_type="application/json")


def error_response(message: str, status: int = 400) -> Response:
    """SGLang's ``_create_error_response`` shape (§1.5)."""
    return json_response({"error": {"message": message}}, status)


def _internal_server_error() -> Response:
    """What SGLang's server answers when a parser raises (an unhandled exception in a FastAPI route)."""
    return Response(b"Internal Server Error", status=500, content_type="text/plain; charset=utf-8")


def stream_error_response(message: str) -> Response:
    """A ValueError of a streaming request: one error event, then ``[DONE]``, with status 200 (§1.6)."""
    error = {"error": {"message": message, "type": "invalid_request_error", "code": 400, "retryable": False}}
    return Response(sse(error) + b"data: [DONE]\n\n", status=200, content_type="text/event-stream")


def sse(payload: Any) -> bytes:
    return b"data: " + dump_json(payload) + b"\n\n"


def wire_output(engine: Engine, state: RequestState, body: dict[str, Any], *, offset: int, final: bool) -> bytes:
    """A built body or chunk as sent: JSON, unless the request's script entry breaks the protocol (``faults.py``)."""
    broken = break_output(engine.tokenizer.vocab_size, state, body, offset=offset, final=final)
    return broken if isinstance(broken, bytes) else dump_json(broken)


async def _json_body(*, allow_empty: bool = True) -> Any:
    data = await request.get_data()
    if not data.strip():
        if allow_empty:
            return {}
        raise ValueError("The request body is empty")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"Invalid JSON in the request body: {exc}") from None


def _check_type(body: Any, key: str, kinds: tuple[type, ...], required: bool = False) -> Any:
    if not isinstance(body, dict):
        raise ValueError("The request body must be a JSON object")
    value = body.get(key)
    if value is None:
        if required:
            raise ValueError(f"Field required: {key}")
        return None
    if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
        raise ValueError(f"{key} has the wrong type: {type(value).__name__}")
    return value


def create_engine_app(config: EngineConfig, engine: Engine | None = None) -> tuple[QuartTrio, Engine]:
    """The quart-trio app and its engine. The engine's generation tasks run in the app's lifespan nursery."""
    engine = engine or Engine(config)
    app = harden_app(QuartTrio(__name__))
    started = int(time.time())

    @app.before_serving
    async def _attach() -> None:
        engine.attach(app.nursery)

    # ---- generation ----------------------------------------------------------------------------------------

    @app.route("/generate", methods=["POST", "PUT"])
    async def generate() -> Response:
        body: Any = None
        try:
            body = await _json_body(allow_empty=False)
            generate_request = GenerateRequest.from_json(body)
            state = engine.new_request(generate_request, request.headers.get(ROUTING_KEY_HEADER))
            await engine.admit(state)
        except InjectedHTTPError as exc:
            return error_response(exc.message, exc.status)
        except FieldTypeError as exc:
            return error_response(str(exc))
        except ValueError as exc:
            # Raised inside SGLang's generate_request: a streaming request gets the error as an SSE chunk (§1.6).
            if isinstance(body, dict) and body.get("stream") in (True, 1):
                return stream_error_response(str(exc))
            return error_response(str(exc))
        if generate_request.stream:
            response = Response(_stream_body(engine, state), content_type="text/event-stream")
            response.headers["Cache-Control"] = "no-cache"
            response.timeout = None
            return response
        try:
            while not state.finished:
                await state.wait_past(state.revision)
        except BaseException:
            engine.client_gone(state)
            raise
        reason = state.finish_reason or {}
        status = reason.get("status_code") if reason.get("type") == "abort" else None
        if status:
            return error_response(str(reason.get("message")), int(status))
        body = wire_output(engine, state, build_output(engine, state, final=True), offset=0, final=True)
        return Response(body, status=200, content_type="application/json")

    # ---- control -------------------------------------------------------------------------------------------

    @app.route("/abort_request", methods=["POST", "PUT"])
    async def abort_request() -> Response:
        try:
            body = await _json_body()
            rid = _check_type(body, "rid", (str,)) or ""
            abort_all = bool(_check_type(body, "abort_all", (bool,)))
        except ValueError as exc:
            return error_response(str(exc))
        engine.abort(rid, abort_all=abort_all)
        return Response("", status=200)

    @app.route("/pause_generation", methods=["POST"])
    async def pause_generation() -> Response:
        try:
            body = await _json_body()
            mode = _check_type(body, "mode", (str,)) or "abort"
            await engine.pause(mode)
        except ValueError as exc:
            return error_response(str(exc))
        return json_response({"message": "Generation paused successfully.", "status": "ok"})

    @app.route("/continue_generation", methods=["POST"])
    async def continue_generation() -> Response:
        try:
            await _json_body()
        except ValueError as exc:
            return error_response(str(exc))
        engine.continue_generation()
        return json_response({"message": "Generation continued successfully.", "status": "ok"})

    @app.route("/update_weights_from_disk", methods=["POST"])
    async def update_weights_from_disk() -> Response:
        try:
            body = await _json_body()
            model_path = _check_type(body, "model_path", (str,), required=True)
            version = _check_type(body, "weight_version", (str,))
            abort_all = bool(_check_type(body, "abort_all_requests", (bool,)))
        except ValueError as exc:
            return json_response({"success": False, "message": str(exc), "num_paused_requests": 0}, 400)
        paused = await engine.update_weights(model_path, version, abort_all)
        return json_response(
            {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": paused}
        )

    @app.route("/update_weight_version", methods=["POST"])
    async def update_weight_version() -> Response:
        try:
            body = await _json_body()
            new_version = _check_type(body, "new_version", (str,), required=True)
            abort_all = _check_type(body, "abort_all_requests", (bool,))
        except ValueError as exc:
            return json_response({"success": False, "message": str(exc)}, 400)
        engine.update_weight_version(new_version, abort_all_requests=True if abort_all is None else abort_all)
        return json_response(
            {"success": True, "message": f"Weight version updated to {new_version}", "new_version": new_version}
        )

    @app.route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache() -> Response:
        if engine.flush_cache():
            return Response("Cache flushed.\n", status=200, content_type="text/plain")
        return Response("Cache not flushed: requests are running or waiting.\n", status=400,
                        content_type="text/plain")

    # ---- information ---------------------------------------------------------------------------------------

    @app.route("/health", methods=["GET", "POST"])
    @app.route("/health_generate", methods=["GET", "POST"])
    async def health() -> Response:
        return Response("", status=200)

    def model_info() -> dict[str, Any]:
        xml = engine.tokenizer.uses_xml_tool_calls
        return {
            "model_path": engine.model_path,
            "tokenizer_path": str(engine.tokenizer.path),
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": engine.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "glm4_moe" if engine.tokenizer.is_glm else "qwen3_5_moe" if xml else "qwen3_moe",
            "architectures": ["Glm4MoeForCausalLM" if engine.tokenizer.is_glm
                              else "Qwen3_5MoeForConditionalGeneration" if xml else "Qwen3MoeForCausalLM"],
        }

    @app.route("/model_info", methods=["GET"])
    @app.route("/get_model_info", methods=["GET"])
    async def get_model_info() -> Response:
        return json_response(model_info())

    @app.route("/server_info", methods=["GET"])
    @app.route("/get_server_info", methods=["GET"])
    async def get_server_info() -> Response:
        stats = engine.statistics()
        c = engine.config
        return json_response({
            "model_path": engine.model_path,
            "tokenizer_path": str(engine.tokenizer.path),
            "served_model_name": c.model_name,
            "host": c.host,
            "port": c.port,
            "context_length": c.context_length,
            "weight_version": engine.weight_version,
            "random_seed": c.seed,
            "incremental_streaming_output": c.incremental_streaming_output,
            "enable_return_routed_experts": c.enable_return_routed_experts,
            "num_hidden_layers": c.num_layers,
            "num_experts": c.num_experts,
            "num_experts_per_tok": c.experts_per_token,
            "stream_interval": 1,
            "skip_tokenizer_init": False,
            "scheduler_info": {"max_total_num_tokens": c.context_length, "max_req_input_len": c.context_length - 1},
            "internal_states": [{"num_running_reqs": stats.running, "num_waiting_reqs": stats.waiting,
                                 "paused": stats.paused}],
            "version": "dressage-embedded-engine",
        })

    @app.route("/v1/models", methods=["GET"])
    async def list_models() -> Response:
        name = engine.config.model_name
        return json_response({
            "object": "list",
            "data": [{"id": name, "object": "model", "created": started, "owned_by": "sglang", "root": name,
                      "max_model_len": engine.config.context_length}],
        })

    @app.route("/v1/loads", methods=["GET"])
    @app.route("/get_load", methods=["GET"])
    async def loads() -> Response:
        stats = engine.statistics()
        return json_response({"timestamp": time.time(), "loads": [{
            "dp_rank": 0, "num_running_reqs": stats.running, "num_waiting_reqs": stats.waiting + stats.blocked,
            "num_total_reqs": stats.running + stats.waiting + stats.blocked}]})

    # ---- parsers -------------------------------------------------------------------------------------------

    @app.route("/parse_function_call", methods=["POST"])
    async def parse_function_call_route() -> Response:
        try:
            body = await _json_body(allow_empty=False)
            text = _check_type(body, "text", (str,), required=True)
            parser = _check_type(body, "tool_call_parser", (str,), required=True)
            tools = _check_type(body, "tools", (list,)) or []
            normal_text, calls = parse_function_call(text, parser, tools)
        except ValueError as exc:
            return error_response(str(exc))
        except ParserCrash:
            return _internal_server_error()
        return json_response({"normal_text": normal_text, "calls": [call.to_json() for call in calls]})

    @app.route("/separate_reasoning", methods=["POST"])
    async def separate_reasoning_route() -> Response:
        try:
            body = await _json_body(allow_empty=False)
            text = _check_type(body, "text", (str,), required=True)
            parser = _check_type(body, "reasoning_parser", (str,), required=True)
            return_blocks = bool(_check_type(body, "return_blocks", (bool,)))
            result = separate_reasoning(text, parser)
        except ValueError as exc:
            return error_response(str(exc))
        except ParserCrash:
            return _internal_server_error()
        return json_response(result.to_json(return_blocks))

    return app, engine


async def _stream_body(engine: Engine, state: RequestState) -> AsyncIterator[bytes]:
    """SSE frames for one request: chunks as the state moves (coalesced to the newest), then ``[DONE]``.

    Cumulative by default; with ``incremental_streaming_output`` every chunk holds only the new tokens/text.
    Holds no cancel scope across ``yield``. If the body ends early (client gone, drop fault), the generation is
    aborted.
    """
    incremental = engine.config.incremental_streaming_output

    def frame(body: dict[str, Any], offset: int, final: bool) -> bytes:
        return b"data: " + wire_output(engine, state, body, offset=offset, final=final) + b"\n\n"

    seen = -1
    sent_tokens = 0
    sent_text = 0
    completed = False
    try:
        while True:
            await state.wait_past(seen)
            seen = state.revision
            produced = len(state.output_ids)
            drop = state.drop_after
            offset = sent_tokens if incremental else 0
            if drop is not None and (produced > drop or (produced == drop and not state.finished)):
                if drop > sent_tokens:
                    yield frame(build_output(
                        engine, state, final=False, upto=drop,
                        since_tokens=offset, since_text=sent_text if incremental else 0), offset, False)
                state.dropped_by_fault = True
                raise _DropConnection(f"drop fault after {drop} tokens")
            if state.finished:
                yield frame(build_output(
                    engine, state, final=True, stream=True,
                    since_tokens=offset, since_text=sent_text if incremental else 0), offset, True)
                completed = True
                yield b"data: [DONE]\n\n"
                return
            if produced == sent_tokens:
                continue
            text = output_text(engine, state, produced, final=False)
            if held_back(state, text):
                continue
            yield frame(build_output(
                engine, state, final=False, upto=produced, text=text,
                since_tokens=offset, since_text=sent_text if incremental else 0), offset, False)
            sent_tokens = produced
            sent_text = len(text)
    finally:
        if not completed:
            engine.client_gone(state)
