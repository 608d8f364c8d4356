"""The proxy's quart-trio app. Routes are thin: parse, ask a component, render.

So far the app serves ``GET /health`` and ``GET /v1/models``; the chat-completions path, the rollout endpoints and
the trajectory store arrive with later work (see docs/architecture.md). Every error, including unknown routes and
upstream faults, is rendered in the OpenAI error shape ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

from typing import Any

import trio
from quart import jsonify
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from proxy.config import ProxyConfig
from proxy.serving import harden_app
from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import UpstreamError

#: how long /health waits for the upstream's /model_info before calling it unreachable
HEALTH_PROBE_SECONDS = 5.0


def openai_error(status: int, message: str, code: str, *, type_: str = "invalid_request_error", param: Any = None):
    """An OpenAI-shaped error response with a stable ``code``."""
    response = jsonify({"error": {"message": message, "type": type_, "param": param, "code": code}})
    response.status_code = status
    return response


def create_proxy_app(config: ProxyConfig, upstream: SGLangClient) -> QuartTrio:
    app = harden_app(QuartTrio("dressage-proxy"))

    @app.errorhandler(HTTPException)
    async def _http_error(error: HTTPException):
        # Unknown routes, wrong methods, bodies over the limit: the same shape as every other error.
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(error.code or 0, "http_error")
        return openai_error(error.code or 400, error.description or error.name, code)

    @app.errorhandler(UpstreamError)
    async def _upstream_error(error: UpstreamError):
        return openai_error(502, f"upstream SGLang error: {error}", "upstream_unavailable", type_="upstream_error")

    @app.get("/health")
    async def health():
        upstream_state: dict[str, Any] = {"url": upstream.router_url, "reachable": False, "weight_version": None}
        with trio.move_on_after(HEALTH_PROBE_SECONDS):
            try:
                info = await upstream.model_info()
            except UpstreamError as exc:
                upstream_state["error"] = str(exc)
            else:
                upstream_state.update(reachable=True, weight_version=info.weight_version)
        return jsonify(
            {
                "status": "ok" if upstream_state["reachable"] else "degraded",
                "upstream": upstream_state,
                "config": config.summary(),
            }
        )

    @app.get("/v1/models")
    async def models():
        cards = await upstream.models()
        return jsonify({"object": "list", "data": [dict(card.raw) for card in cards]})

    return app
