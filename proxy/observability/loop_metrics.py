"""Counters, gauges and histograms moved only by the event loop's thread: plain numbers, exposed through
prometheus-client's own families and registry.

Why not prometheus-client's ``Counter``, ``Gauge`` and ``Histogram``: they are built for threaded servers, so every
``inc`` and ``observe`` takes a lock (a histogram two, and walks its buckets in Python). The proxy's hooks
(``proxy/observability/metrics.py``) all run on the trio thread, and so does the scrape (``ProxyMetrics.exposition``
is synchronous), so nothing here needs a lock. Measured inside the proxy under the bench's load (thread CPU around
each hook, 2,000 requests; issue 21 item 2): the seven hooks of a short request took ~25 us with prometheus-client's
instruments, ~10 us with these (docs/benchmarks.md). The exposition is prometheus-client's: :class:`LoopCollector`
is a custom collector (its documented extension point) that turns these numbers into its ``CounterMetricFamily``,
``GaugeMetricFamily`` and ``HistogramMetricFamily`` at scrape time, with the same names, labels, buckets and
``_created`` samples as the library's instruments (``tests/observability/test_loop_metrics.py`` holds the two
expositions equal for the same operations).

Not thread-safe by design: a hook called from a worker thread would need prometheus-client's instruments back.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import accumulate

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class LoopCounter:
    """A counter's (or a gauge's) value for one set of label values."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        """For gauges only (a counter's family never hands this out to a hook that lowers it)."""
        self.value -= amount


class LoopHistogram:
    """A histogram's bucket counts and sum for one set of label values; a value falls in the first bucket whose
    upper bound is at least the value (Prometheus' ``le``), or in ``+Inf``."""

    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class LoopFamily:
    """One metric: its name, help, label names, kind, and a child per set of label values (made on first use; an
    unlabelled metric has its one child from the start, as prometheus-client's do)."""

    def __init__(self, kind: str, name: str, documentation: str, labelnames: Sequence[str] = (),
                 buckets: Sequence[float] = ()) -> None:
        if kind not in ("counter", "gauge", "histogram"):
            raise ValueError(f"unknown metric kind {kind!r}")
        bounds = tuple(float(bound) for bound in buckets if bound != math.inf)
        if kind == "histogram" and (not bounds or list(bounds) != sorted(set(bounds))):
            raise ValueError(f"{name}: histogram buckets must be increasing")
        self.kind, self.name, self.documentation = kind, name, documentation
        self.labelnames = tuple(labelnames)
        self.bounds = bounds
        self._children: dict[tuple[str, ...], LoopCounter | LoopHistogram] = {}
        if not self.labelnames:
            self.labels()

    def labels(self, *values: str) -> LoopCounter | LoopHistogram:
        """The child for these label values (in ``labelnames``' order)."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
        key = tuple(str(value) for value in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = LoopHistogram(self.bounds) if self.kind == "histogram" else LoopCounter()
        return child

    def family(self) -> Metric:
        """prometheus-client's family of this metric, with every child's samples."""
        if self.kind == "counter":
            counters = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
            for values, child in self._children.items():
                counters.add_metric(values, child.value, created=child.created)
            return counters
        if self.kind == "gauge":
            gauges = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
            for values, child in self._children.items():
                gauges.add_metric(values, child.value)
            return gauges
        histograms = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        upper = [floatToGoString(bound) for bound in (*self.bounds, math.inf)]
        for values, child in self._children.items():
            assert isinstance(child, LoopHistogram)
            histograms.add_metric(values, list(zip(upper, accumulate(child.counts))), child.sum)
            histograms.add_sample(self.name + "_created", dict(zip(self.labelnames, values)), child.created)
        return histograms


class LoopCollector(Collector):
    """Exposes loop families through a prometheus-client registry."""

    def __init__(self) -> None:
        self._families: list[LoopFamily] = []

    def add(self, family: LoopFamily) -> LoopFamily:
        self._families.append(family)
        return family

    def collect(self) -> Iterator[Metric]:
        for family in self._families:
            yield family.family()


__all__ = ["LoopCollector", "LoopCounter", "LoopFamily", "LoopHistogram"]
