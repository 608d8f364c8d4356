"""``GET /health``, ``GET /ready`` and ``GET /v1/models``.

``/health`` and ``/ready`` need no key (orchestrators probe them without one); the verdicts are
``proxy/health_verdict.py``'s. ``/health`` is always 200 (the process serves) with ``status`` ``ok`` or ``degraded``
and its ``reasons``; the full view (upstream URL and error, gate, sessions, store, configuration) goes only to a
caller holding the admin key when one is set, anyone else gets ``{"status", "reasons"}``. ``/ready`` is 200
``{"ready": true, "reasons": []}`` or 503 ``{"ready": false, "reasons": [...]}``.
"""

from __future__ import annotations

from typing import Any


import trio
from quart import jsonify, request
from quart_trio import QuartTrio

from proxy.access import AccessPolicy, presented_keys
from proxy.api import report_json
from proxy.health_verdict import ServiceSnapshot, health_verdict, readiness_verdict
from proxy.services import ProxyServices
from proxy.upstream.errors import UpstreamError

#: how long /health waits for the upstream's /model_info before calling it unreachable
HEALTH_PROBE_SECONDS = 5.0
#: /ready's bound: below Kubernetes' default probe timeout (1 s), so a slow upstream reads "not ready", not a
#: timed-out probe
READY_PROBE_SECONDS = 0.8


def register(app: QuartTrio, services: ProxyServices) -> None:
    upstream = services.upstream
    config = services.config
    policy = AccessPolicy.from_config(config)

    async def probe_upstream(seconds: float) -> dict[str, Any]:
        upstream_state: dict[str, Any] = {"url": upstream.router_url, "reachable": False, "weight_version": None}
        with trio.move_on_after(seconds):
            try:
                info = await upstream.model_info()
            except UpstreamError as exc:
                upstream_state["error"] = str(exc)
            else:
                upstream_state.update(reachable=True, weight_version=info.weight_version)
        return upstream_state

    async def snapshot(upstream_reachable: bool) -> ServiceSnapshot:
        return ServiceSnapshot(
            upstream_reachable=upstream_reachable,
            gate_state=services.gate.statistics().state,
            pausing_seconds=services.gate.pausing_for(),
            pause_abort_timeout=config.pause_abort_timeout,
            bytes_held=await services.sessions.approximate_bytes(),
            memory_budget=config.memory_budget,
            draining=services.lifecycle.draining,
        )

    @app.get("/health")
    async def health():
        upstream_state = await probe_upstream(HEALTH_PROBE_SECONDS)
        state = await snapshot(upstream_state["reachable"])
        verdict = health_verdict(state)
        status = {"status": "ok" if verdict.ok else "degraded", "reasons": list(verdict.reasons)}
        if not policy.is_admin(presented_keys(request.headers.get("authorization"), request.headers.get("x-api-key"))):
            return jsonify(status)  # without the admin key: the verdict only (no URLs, no configuration)
        return jsonify(
            {
                **status,
                "pausing_seconds": round(state.pausing_seconds, 3),
                "memory": {"bytes_held": state.bytes_held, "budget": state.memory_budget},
                "context_window": services.context_window.report(),
                "upstream": upstream_state,
                "gate": report_json(services.gate.statistics()),
                "sessions": report_json(services.sessions.statistics()),
                "store": report_json(await services.sessions.store_statistics()),
                "config": config.summary(),
            }
        )

    @app.get("/ready")
    async def ready():
        upstream_state = await probe_upstream(READY_PROBE_SECONDS)
        verdict = readiness_verdict(await snapshot(upstream_state["reachable"]))
        return jsonify({"ready": verdict.ok, "reasons": list(verdict.reasons)}), (200 if verdict.ok else 503)

    @app.get("/v1/models")
    async def models():
        cards = await upstream.models()
        return jsonify({"object": "list", "data": [dict(card.raw) for card in cards]})
