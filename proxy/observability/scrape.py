"""The metrics read at scrape time: what the proxy already keeps, turned into Prometheus families when scraped.

Sessions by state, the store's size, the pauses, the evictions and the parser's mismatches are counted by their
components anyway (``/health`` and ``GET /trajectory/stats`` report them); counting them a second time on the hot
path would only cost. The ``/metrics`` route (``proxy/routes/metrics.py``) reads those statistics into a
:class:`ScrapeSnapshot` (the store's are async) and :meth:`proxy.observability.metrics.ProxyMetrics.exposition`
hands it to the :class:`ScrapeCollector` for the one ``generate_latest`` call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import attrs
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from statemachines.session import State as SessionState

#: the ``state`` label of ``dressage_sessions``: the session machine's states grouped by what an operator asks
#: (``statemachines/session.py``). live: generations are admitted; finalized: closed, its segments exported (or
#: being exported, or waiting for an export retry) and waiting in the store; tombstone: only the machine is left
#: to reject stragglers (drained, aborted).
SESSION_STATE_GROUPS: Mapping[str, str] = {
    SessionState.ACTIVE.name: "live",
    SessionState.FINALIZING.name: "finalized",
    SessionState.EXPORT_FAILED.name: "finalized",
    SessionState.FINALIZED.name: "finalized",
    SessionState.DRAINED.name: "tombstone",
    SessionState.ABORTED.name: "tombstone",
}
SESSION_GROUPS = ("live", "finalized", "tombstone")
#: the ``parser`` label of ``dressage_parser_mismatches_total``: which decision SGLang and the local parser disagreed on
PARSERS = ("tool_call", "reasoning")


@attrs.frozen
class ScrapeSnapshot:
    """The statistics the scrape-time families are read from (all read by the route just before the scrape)."""

    #: sessions per session machine state name (``RegistryStatistics.states``)
    session_states: Mapping[str, int] = attrs.field(factory=dict)
    #: lifetime: sessions finalized for idleness, tombstones forgotten after --tombstone-ttl
    idle_finalized: int = 0
    expired_tombstones: int = 0
    #: what the trajectory store holds now
    store_bytes: int = 0
    store_segments: int = 0
    #: lifetime: pauses that did not find the gate paused already
    pauses: int = 0
    #: lifetime: parser mismatches by ``PARSERS`` name
    parser_mismatches: Mapping[str, int] = attrs.field(factory=dict)


class ScrapeCollector:
    """A prometheus-client collector of the scrape-time families; ``snapshot`` is set only during an exposition."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.snapshot: ScrapeSnapshot | None = None

    def describe(self) -> Iterator[Metric]:
        """The families' names (the registry checks them for duplicates), without samples."""
        yield from self._families(None)

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self.snapshot)

    def _families(self, snapshot: ScrapeSnapshot | None) -> Iterator[Metric]:
        p = self.prefix
        sessions = GaugeMetricFamily(p + "sessions", "sessions the registry knows, by state (live, finalized, "
                                     "tombstone)", labels=["state"])
        evicted = CounterMetricFamily(p + "sessions_evicted", "sessions the memory budget released, by kind",
                                      labels=["kind"])
        pauses = CounterMetricFamily(p + "pauses", "pauses requested while the gate was running")
        mismatches = CounterMetricFamily(p + "parser_mismatches", "outputs where SGLang's parser decided otherwise "
                                         "than the local one, by parser", labels=["parser"])
        store_bytes = GaugeMetricFamily(p + "store_bytes", "JSON bytes of the segments in the trajectory store")
        store_segments = GaugeMetricFamily(p + "store_segments", "segments in the trajectory store")
        if snapshot is not None:
            groups = dict.fromkeys(SESSION_GROUPS, 0)
            for state, count in snapshot.session_states.items():
                group = SESSION_STATE_GROUPS.get(state, "live")
                groups[group] += count
            for group, count in groups.items():
                sessions.add_metric([group], count)
            evicted.add_metric(["idle_finalized"], snapshot.idle_finalized)
            evicted.add_metric(["tombstone_expired"], snapshot.expired_tombstones)
            pauses.add_metric([], snapshot.pauses)
            for parser in PARSERS:
                mismatches.add_metric([parser], snapshot.parser_mismatches.get(parser, 0))
            store_bytes.add_metric([], snapshot.store_bytes)
            store_segments.add_metric([], snapshot.store_segments)
        yield from (sessions, evicted, pauses, mismatches, store_bytes, store_segments)


__all__ = ["PARSERS", "SESSION_GROUPS", "SESSION_STATE_GROUPS", "ScrapeCollector", "ScrapeSnapshot"]
