"""``GET /health`` and ``GET /v1/models``."""

from __future__ import annotations

from typing import Any


import trio
from quart import jsonify
from quart_trio import QuartTrio

from proxy.api import report_json
from proxy.services import ProxyServices
from proxy.upstream.errors import UpstreamError

#: how long /health waits for the upstream's /model_info before calling it unreachable
HEALTH_PROBE_SECONDS = 5.0


def register(app: QuartTrio, services: ProxyServices) -> None:
    upstream = services.upstream

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
        gate = services.gate.statistics()
        sessions = services.sessions.statistics()
        store = await services.sessions.store_statistics()
        # A pause still in progress past its bound means a generation did not answer its forced cut (a bug).
        pausing_for = services.gate.pausing_for()
        wedged = pausing_for > services.config.pause_abort_timeout
        return jsonify(
            {
                "status": "ok" if upstream_state["reachable"] and not wedged else "degraded",
                "pausing_seconds": round(pausing_for, 3),
                "context_window": services.context_window.report(),
                "upstream": upstream_state,
                "gate": report_json(gate),
                "sessions": report_json(sessions),
                "store": report_json(store),
                "config": services.config.summary(),
            }
        )

    @app.get("/v1/models")
    async def models():
        cards = await upstream.models()
        return jsonify({"object": "list", "data": [dict(card.raw) for card in cards]})
