"""The proxy's Prometheus metrics: one :class:`ProxyMetrics` per proxy, with its own ``CollectorRegistry``.

docs/observability.md ("Metrics") lists every metric, its labels, what moves it and where in the code. In short:

- **Hooks.** The controllers call small named methods where an effect is carried out (``generation_started``,
  ``first_token``, ``tokens_generated``, ``generation_ended``, ``pause_acknowledged``, ``pause_tokens``,
  ``session_exported``, ``store_written``, ``tokenized``, ``tito_checked``, ``request_finished``). The hooks never
  change behaviour and never raise into their caller's logic (prometheus-client's own operations only).
- **Off** (``--no-metrics``): :class:`MetricsHooks` itself, whose methods do nothing; the app then serves no
  ``/metrics`` (404) and wraps no request (``proxy/observability/exchanges.py``).
- **Scrape time.** What the proxy already keeps (sessions by state, store size, pauses, evictions, parser
  mismatches) is not counted twice on the hot path: the ``/metrics`` route hands a :class:`ScrapeSnapshot` to
  :meth:`ProxyMetrics.exposition`, whose collector (``proxy/observability/scrape.py``) turns it into families.
- **One registry per proxy**, never prometheus-client's global one: several proxies in one test process (or one
  process serving two apps) never collide on a name.
- **Hot path.** Label children are bound once (at start for the fixed label sets, on first use for the request
  labels), so a hook is a dict lookup at most plus an add: the instruments are loop metrics
  (``proxy/observability/loop_metrics.py``: plain numbers, no lock, since hooks and scrapes all run on the event
  loop's thread), exposed through prometheus-client's registry and text format.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from proxy.observability.loop_metrics import LoopCollector, LoopFamily
from proxy.observability.scrape import ScrapeCollector, ScrapeSnapshot
from proxy.observability.segment_versions import segment_version_spreads
from proxy.tokenization.results import TitoFailureReason
from proxy.trajectory.boundaries import BoundaryReason
from proxy.trajectory.export import FinalizeReason, SessionExport
from statemachines.generation import ABSORBING

#: every metric name starts with this (the metric contract of issue 19; the Grafana dashboard reads these names)
PREFIX = "dressage_"

#: generation and request durations: from a few ms (a refusal, a cached answer) to a long agent step (minutes)
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: time to first token: prefill, queueing and gate waits included
FIRST_TOKEN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TOKENS_PER_SECOND_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)
#: a pause's acknowledgement: one token boundary per in-flight generation, bounded by --pause-abort-timeout (30 s)
PAUSE_ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: the contract's buckets, in versions
VERSION_SPREAD_BUCKETS = (0.0, 1.0, 2.0, 3.0, 4.0, 8.0, 16.0)
#: CPU steps of the request path (tokenization, a store write): from 100 us to seconds for a 10 MB prompt
CPU_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: a generation's outcome label: its machine's absorbing state (``statemachines/generation.py``), lower case
GENERATION_OUTCOMES = tuple(state.name.lower() for state in ABSORBING)
#: a live TITO check's outcome: ``ok``, or why the incremental encode failed
TITO_OUTCOMES = ("ok", *(reason.value for reason in TitoFailureReason))


#: the ``protocol`` label by route rule prefix, first match wins (a rule is matched once, when its labels are bound)
PROTOCOL_PREFIXES = (
    ("/v1/chat/completions", "chat_completions"),
    ("/v1/responses", "responses"),
    ("/v1/messages", "messages"),
    ("/v1/rollout/", "rollout"),
    ("/session/", "rollout"),
    ("/trajectory/", "rollout"),
    # the OpenAI-compatible surface that is none of the protocols above (/v1/models)
    ("/v1/", "other"),
)
#: the endpoint label of a request no route matched (bounded: never the raw path)
UNMATCHED = "other"


def protocol_of(endpoint: str) -> str:
    """The ``protocol`` label of a route rule: the agent protocols, the trainer's ``rollout`` endpoints, ``admin``
    for the operator's (``/health``, ``/ready``, ``/metrics``, ``/ui/``), ``other`` for ``/v1/models`` and for a
    request no route matched."""
    if endpoint == UNMATCHED:
        return "other"
    for prefix, protocol in PROTOCOL_PREFIXES:
        if endpoint.startswith(prefix):
            return protocol
    return "admin"


class MetricsHooks:
    """The hooks the controllers call, doing nothing: the proxy's metrics with ``--no-metrics``, and the default of
    every component built without services (unit tests). :class:`ProxyMetrics` records them."""

    #: whether /metrics is served (and requests are wrapped at all)
    enabled = False

    # -- requests (proxy/observability/exchanges.py) -------------------------------------------------------

    def request_finished(self, endpoint: str, status: int, seconds: float) -> None:
        """One HTTP exchange ended: its route rule (or ``other``), its status, its duration."""

    # -- generations (proxy/controllers/generation.py, generation_driver.py) -------------------------------------

    def generation_started(self) -> None:
        """A generation passed its prepare and its driver starts."""

    def first_token(self, seconds: float) -> None:
        """The generation accepted its first token, ``seconds`` after the request's generation began."""

    def tokens_generated(self, count: int) -> None:
        """The generation accepted ``count`` tokens of one upstream read."""

    def generation_ended(self, outcome: str, seconds: float, tokens: int) -> None:
        """The generation's driver ended: its machine's final state, its duration, the tokens of its answer."""

    # -- pauses (proxy/controllers/gate.py, generation_driver.py) ------------------------------------------------

    def pause_acknowledged(self, seconds: float, generations_cut: int) -> None:
        """A pause was acknowledged ``seconds`` after it was requested, having cut ``generations_cut`` generations."""

    def pause_tokens(self, kept: int, discarded: int) -> None:
        """What became of the tokens a generation held when a pause cut it."""

    # -- sessions and the store (proxy/controllers/session_registry.py) ------------------------------------------

    def session_exported(
        self, export: SessionExport, segments: Sequence[dict[str, Any]], export_all_checkpoints: bool
    ) -> None:
        """A session was finalized and its ``segments`` stored."""

    def store_written(self, seconds: float, written_bytes: int | None) -> None:
        """One store write took ``seconds`` and stored ``written_bytes`` (None: the store does not say)."""

    # -- tokenization (proxy/controllers/session_registry.py) ----------------------------------------------------

    def tokenized(self, seconds: float, *, off_loop: bool) -> None:
        """A step's context was tokenized, inline or in a worker thread."""

    def tito_checked(self, outcome: str) -> None:
        """An incremental (TITO) encode ended: ``ok`` or its failure reason."""

    # -- exposition (proxy/routes/metrics.py) --------------------------------------------------------------------

    def exposition(self, snapshot: ScrapeSnapshot) -> bytes:
        """The Prometheus text exposition (nothing when metrics are off: the route answers 404 first)."""
        return b""


NO_METRICS = MetricsHooks()


class ProxyMetrics(MetricsHooks):
    """The metrics of one proxy, in their own registry (see the module docstring)."""

    enabled = True

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        # The default collectors prometheus-client puts in its global registry, here in ours.
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        self._scrape = ScrapeCollector(PREFIX)
        registry.register(self._scrape)
        # Every instrument below is a loop metric (``proxy/observability/loop_metrics.py``: the hooks and the scrape
        # run on the event loop's thread, so no lock per operation), exposed by one collector in this registry.
        loop = LoopCollector()

        def counter(name: str, doc: str, labels: Sequence[str] = ()) -> Any:
            """A labelled counter's family, or an unlabelled counter's one child."""
            family = loop.add(LoopFamily("counter", PREFIX + name, doc, labels))
            return family if labels else family.labels()

        def histogram(name: str, doc: str, buckets: Sequence[float], labels: Sequence[str] = ()) -> Any:
            """A labelled histogram's family, or an unlabelled histogram's one child."""
            family = loop.add(LoopFamily("histogram", PREFIX + name, doc, labels, buckets))
            return family if labels else family.labels()

        self._requests = counter("requests", "HTTP exchanges by route rule, protocol and status",
                                 ("endpoint", "protocol", "status"))
        self._request_seconds = histogram("request_duration_seconds", "HTTP exchange duration (a stream's whole body)",
                                          DURATION_BUCKETS, ("endpoint",))
        # (endpoint, status) -> the bound children: the request labels are bounded but not known up front
        self._request_children: dict[tuple[str, str], tuple[Any, Any]] = {}

        self._generation_seconds = histogram("generation_duration_seconds", "one generation, request to its end",
                                             DURATION_BUCKETS)
        self._first_token_seconds = histogram("time_to_first_token_seconds", "request to the first accepted token",
                                              FIRST_TOKEN_BUCKETS)
        self._tokens_per_second = histogram("generation_tokens_per_second",
                                            "an answered generation's tokens over its duration",
                                            TOKENS_PER_SECOND_BUCKETS)
        self._generated_tokens = counter("generated_tokens", "tokens accepted from the upstream")
        generations = counter("generations", "generations by how they ended (their machine's final state)",
                              ("outcome",))
        self._generations = {outcome: generations.labels(outcome) for outcome in GENERATION_OUTCOMES}
        self._generations_family = generations
        self._in_flight = loop.add(LoopFamily("gauge", PREFIX + "generations_in_flight",
                                              "generations whose driver runs")).labels()

        finalized = counter("sessions_finalized", "sessions finalized (exported), by finalize reason", ("reason",))
        self._finalized = {reason.value: finalized.labels(reason.value) for reason in FinalizeReason}
        segments = counter("segments", "exported segments by the boundary reason that began them",
                           ("boundary_reason",))
        self._segments = {reason.value: segments.labels(reason.value) for reason in BoundaryReason}
        self._segments_family = segments
        self._version_spread = histogram("segment_weight_version_spread",
                                         "per exported segment: newest minus oldest weight version of its trained "
                                         "tokens", VERSION_SPREAD_BUCKETS)

        tito = counter("tito_drift_audits", "incremental (TITO) encodes checked, by outcome", ("outcome",))
        self._tito = {outcome: tito.labels(outcome) for outcome in TITO_OUTCOMES}
        self._tito_family = tito
        tokenization = histogram("tokenization_seconds", "a step's context tokenization, by where it ran",
                                 CPU_BUCKETS, ("where",))
        self._tokenization_inline = tokenization.labels("inline")
        self._tokenization_off_loop = tokenization.labels("off_loop")

        self._pause_ack_seconds = histogram("pause_ack_seconds", "pause request to every in-flight generation "
                                            "acknowledged", PAUSE_ACK_BUCKETS)
        self._pause_cut = counter("pause_generations_cut", "generations cut by pauses")
        pause_tokens = counter("pause_tokens", "tokens held by generations a pause cut, by their fate", ("fate",))
        self._pause_kept = pause_tokens.labels("kept")
        self._pause_discarded = pause_tokens.labels("discarded")

        self._store_write_seconds = histogram("store_write_seconds", "one finalize's write to the trajectory store",
                                              CPU_BUCKETS)
        self._store_write_bytes = counter("store_write_bytes", "bytes written to the trajectory store (JSON size)")
        registry.register(loop)  # after every family: the registry reads their names once, now

    # -- requests --------------------------------------------------------------------------------------------------

    def request_finished(self, endpoint: str, status: int, seconds: float) -> None:
        children = self._request_children.get((endpoint, status))
        if children is None:
            children = self._bind_request(endpoint, status)
        children[0].inc()
        children[1].observe(seconds)

    def _bind_request(self, endpoint: str, status: int) -> tuple[Any, Any]:
        children = (self._requests.labels(endpoint, protocol_of(endpoint), str(status)),
                    self._request_seconds.labels(endpoint))
        self._request_children[(endpoint, status)] = children
        return children

    # -- generations -----------------------------------------------------------------------------------------------

    def generation_started(self) -> None:
        self._in_flight.inc()

    def first_token(self, seconds: float) -> None:
        self._first_token_seconds.observe(seconds)

    def tokens_generated(self, count: int) -> None:
        self._generated_tokens.inc(count)

    def generation_ended(self, outcome: str, seconds: float, tokens: int) -> None:
        self._in_flight.dec()
        child = self._generations.get(outcome)
        (child if child is not None else self._generations_family.labels(outcome)).inc()
        self._generation_seconds.observe(seconds)
        if outcome == "responded" and tokens and seconds > 0:
            self._tokens_per_second.observe(tokens / seconds)

    # -- pauses ----------------------------------------------------------------------------------------------------

    def pause_acknowledged(self, seconds: float, generations_cut: int) -> None:
        self._pause_ack_seconds.observe(seconds)
        if generations_cut:
            self._pause_cut.inc(generations_cut)

    def pause_tokens(self, kept: int, discarded: int) -> None:
        if kept:
            self._pause_kept.inc(kept)
        if discarded:
            self._pause_discarded.inc(discarded)

    # -- sessions and the store ------------------------------------------------------------------------------------

    def session_exported(
        self, export: SessionExport, segments: Sequence[dict[str, Any]], export_all_checkpoints: bool
    ) -> None:
        self._finalized[export.reason.value].inc()
        for segment in segments:
            reason = str(segment.get("boundary_reason"))
            child = self._segments.get(reason)
            (child if child is not None else self._segments_family.labels(reason)).inc()
        for spread in segment_version_spreads(export.tips, export_all_checkpoints):
            if spread is not None:
                self._version_spread.observe(spread)

    def store_written(self, seconds: float, written_bytes: int | None) -> None:
        self._store_write_seconds.observe(seconds)
        if written_bytes:
            self._store_write_bytes.inc(written_bytes)

    # -- tokenization ----------------------------------------------------------------------------------------------

    def tokenized(self, seconds: float, *, off_loop: bool) -> None:
        (self._tokenization_off_loop if off_loop else self._tokenization_inline).observe(seconds)

    def tito_checked(self, outcome: str) -> None:
        child = self._tito.get(outcome)
        (child if child is not None else self._tito_family.labels(outcome)).inc()

    # -- exposition ------------------------------------------------------------------------------------------------

    def exposition(self, snapshot: ScrapeSnapshot) -> bytes:
        """The registry in the Prometheus text format, the scrape-time families read from ``snapshot``. Sync: no
        other task runs between setting the snapshot and the collector reading it."""
        self._scrape.snapshot = snapshot
        try:
            return generate_latest(self.registry)
        finally:
            self._scrape.snapshot = None


def metrics_for(enabled: bool) -> MetricsHooks:
    """The proxy's metrics (``--metrics``), or the hooks that do nothing (``--no-metrics``)."""
    return ProxyMetrics() if enabled else NO_METRICS


__all__ = [
    "GENERATION_OUTCOMES", "MetricsHooks", "NO_METRICS", "PREFIX", "ProxyMetrics", "TITO_OUTCOMES", "UNMATCHED",
    "metrics_for",
    "protocol_of",
]
