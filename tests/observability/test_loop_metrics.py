"""Loop metrics (``proxy/observability/loop_metrics.py``) expose what prometheus-client's own instruments expose
after the same operations: the same families, samples, labels and values (``_created`` timestamps compared by
presence), through prometheus-client's text exposition and parser."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from proxy.observability.loop_metrics import LoopCollector, LoopFamily

BUCKETS = (0.001, 0.01, 0.1, 1.0, 10.0)
LABELS = ("a", "b", "c")
amounts = st.one_of(st.floats(min_value=-5, max_value=50, allow_nan=False), st.sampled_from([*BUCKETS, 0.0, math.inf]))
operations = st.lists(
    st.tuples(st.sampled_from(["counter", "labelled", "gauge_inc", "gauge_dec", "histogram", "histogram_labelled"]),
              st.sampled_from(LABELS), amounts),
    max_size=40,
)


def _exposed(registry: CollectorRegistry) -> dict:
    samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            key = (family.type, sample.name, tuple(sorted(sample.labels.items())))
            value = None if sample.name.endswith("_created") else sample.value
            samples[key] = "nan" if value is not None and math.isnan(value) else value  # inf - inf, on both sides
    return samples


@settings(max_examples=200, deadline=None)
@given(ops=operations)
def test_the_same_operations_expose_the_same_samples(ops):
    theirs = CollectorRegistry()
    lib = {
        "counter": Counter("t_events", "events", registry=theirs),
        "labelled": Counter("t_labelled", "events by kind", ("kind",), registry=theirs),
        "gauge": Gauge("t_level", "a level", registry=theirs),
        "histogram": Histogram("t_seconds", "durations", registry=theirs, buckets=BUCKETS),
        "histogram_labelled": Histogram("t_sized", "sizes", ("kind",), registry=theirs, buckets=BUCKETS),
    }
    ours = CollectorRegistry()
    collector = LoopCollector()
    loop = {
        "counter": collector.add(LoopFamily("counter", "t_events", "events")),
        "labelled": collector.add(LoopFamily("counter", "t_labelled", "events by kind", ("kind",))),
        "gauge": collector.add(LoopFamily("gauge", "t_level", "a level")),
        "histogram": collector.add(LoopFamily("histogram", "t_seconds", "durations", buckets=BUCKETS)),
        "histogram_labelled": collector.add(LoopFamily("histogram", "t_sized", "sizes", ("kind",), BUCKETS)),
    }
    ours.register(collector)
    for op, label, amount in ops:
        if op == "counter":
            lib["counter"].inc(abs(amount))
            loop["counter"].labels().inc(abs(amount))
        elif op == "labelled":
            lib["labelled"].labels(label).inc(abs(amount))
            loop["labelled"].labels(label).inc(abs(amount))
        elif op == "gauge_inc":
            lib["gauge"].inc(amount)
            loop["gauge"].labels().inc(amount)
        elif op == "gauge_dec":
            lib["gauge"].dec(amount)
            loop["gauge"].labels().dec(amount)
        elif op == "histogram":
            lib["histogram"].observe(amount)
            loop["histogram"].labels().observe(amount)
        else:
            lib["histogram_labelled"].labels(label).observe(amount)
            loop["histogram_labelled"].labels(label).observe(amount)
    assert _exposed(ours) == _exposed(theirs)


def test_a_family_refuses_wrong_labels_and_unordered_buckets():
    family = LoopFamily("counter", "t", "t", ("kind",))
    with pytest.raises(ValueError):
        family.labels()
    with pytest.raises(ValueError):
        LoopFamily("histogram", "h", "h", buckets=(1.0, 0.5))
    with pytest.raises(ValueError):
        LoopFamily("summary", "s", "s")
