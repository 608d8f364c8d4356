"""``GET /metrics``: the proxy's Prometheus metrics in the text format (``proxy/observability/metrics.py``).

An ADMIN route (``proxy/access.py``: the admin key when one is set). With ``--no-metrics`` it answers 404
``not_found``, as an unknown path does. The scrape-time families are read here, just before the exposition: the
registry's sessions by state and lifetime evictions, the store's size, the gate's pauses and the parser's mismatches
(``proxy/observability/scrape.py``).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST
from quart import Response
from quart_trio import QuartTrio

from proxy.api import ApiError
from proxy.observability.scrape import ScrapeSnapshot
from proxy.services import ProxyServices


async def scrape_snapshot(services: ProxyServices) -> ScrapeSnapshot:
    """What the scrape-time families show, read from the services' statistics."""
    registry = services.sessions.statistics()
    store = await services.sessions.store.statistics()
    parser = services.parser.statistics()
    return ScrapeSnapshot(
        session_states=registry.states, idle_finalized=registry.idle_finalized,
        expired_tombstones=registry.expired_tombstones, store_bytes=store.bytes, store_segments=store.segments,
        pauses=services.gate.statistics().pauses_total,
        parser_mismatches={"tool_call": parser.tool_call_mismatches, "reasoning": parser.reasoning_mismatches},
    )


def register(app: QuartTrio, services: ProxyServices) -> None:
    metrics = services.metrics

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        if not metrics.enabled:
            raise ApiError.not_found("metrics are off (--no-metrics)")
        body = metrics.exposition(await scrape_snapshot(services))
        return Response(body, status=200, content_type=CONTENT_TYPE_LATEST)


__all__ = ["register", "scrape_snapshot"]
