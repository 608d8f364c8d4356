"""The metrics objects themselves: one registry per proxy, both variants with the same hooks, the fixed label sets
and the pure helpers behind two labels (session state groups, weight-version spread, protocol)."""

from __future__ import annotations

import inspect

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.observability.metrics import NO_METRICS, MetricsHooks, ProxyMetrics, metrics_for, protocol_of
from proxy.observability.scrape import SESSION_GROUPS, SESSION_STATE_GROUPS, ScrapeSnapshot
from proxy.observability.segment_versions import version_spread
from statemachines.session import State as SessionState

#: the metric contract of issue 19 (docs/observability.md): the Grafana dashboard reads exactly these families
CONTRACT = {
    "dressage_requests": "counter", "dressage_request_duration_seconds": "histogram",
    "dressage_generation_duration_seconds": "histogram", "dressage_time_to_first_token_seconds": "histogram",
    "dressage_generation_tokens_per_second": "histogram", "dressage_generated_tokens": "counter",
    "dressage_generations": "counter", "dressage_generations_in_flight": "gauge", "dressage_sessions": "gauge",
    "dressage_sessions_finalized": "counter", "dressage_sessions_evicted": "counter",
    "dressage_segments": "counter", "dressage_tito_drift_audits": "counter", "dressage_parser_mismatches": "counter",
    "dressage_pauses": "counter", "dressage_pause_ack_seconds": "histogram",
    "dressage_pause_generations_cut": "counter", "dressage_pause_tokens": "counter",
    "dressage_segment_weight_version_spread": "histogram", "dressage_store_write_seconds": "histogram",
    "dressage_store_write_bytes": "counter", "dressage_store_bytes": "gauge", "dressage_store_segments": "gauge",
    "dressage_tokenization_seconds": "histogram", "process_cpu_seconds": "counter",
    "process_resident_memory_bytes": "gauge",
}


def families(metrics: ProxyMetrics, snapshot: ScrapeSnapshot | None = None) -> dict[str, object]:
    text = metrics.exposition(snapshot or ScrapeSnapshot()).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_the_exposition_has_every_contract_family_with_its_type() -> None:
    found = families(ProxyMetrics())
    assert {name: found[name].type for name in CONTRACT if name in found} == CONTRACT


def test_both_variants_have_the_same_hooks_and_the_real_one_overrides_each() -> None:
    hooks = {name for name, _ in inspect.getmembers(MetricsHooks, inspect.isfunction) if not name.startswith("_")}
    assert hooks >= {"generation_started", "first_token", "generation_ended", "exposition"}
    for name in hooks:
        assert getattr(ProxyMetrics, name) is not getattr(MetricsHooks, name), f"ProxyMetrics does not record {name}"
        assert inspect.signature(getattr(ProxyMetrics, name)) == inspect.signature(getattr(MetricsHooks, name))
    assert metrics_for(False) is NO_METRICS and isinstance(metrics_for(True), ProxyMetrics)


def test_each_proxy_has_its_own_registry_and_the_global_one_is_untouched() -> None:
    first, second = ProxyMetrics(), ProxyMetrics()  # the same names twice: no "Duplicated timeseries"
    first.tokens_generated(7)
    assert families(first)["dressage_generated_tokens"].samples[0].value == 7
    assert families(second)["dressage_generated_tokens"].samples[0].value == 0
    global_names = {family.name for family in prometheus_client.REGISTRY.collect()}
    assert not any(name.startswith("dressage_") for name in global_names)


def test_every_session_state_has_a_state_label() -> None:
    assert set(SESSION_STATE_GROUPS) == {state.name for state in SessionState}
    assert set(SESSION_STATE_GROUPS.values()) == set(SESSION_GROUPS)
    snapshot = ScrapeSnapshot(session_states={"ACTIVE": 2, "FINALIZING": 1, "FINALIZED": 3, "DRAINED": 4,
                                              "ABORTED": 1})
    samples = {s.labels["state"]: s.value for s in families(ProxyMetrics(), snapshot)["dressage_sessions"].samples}
    assert samples == {"live": 2, "finalized": 4, "tombstone": 5}


@pytest.mark.parametrize(("versions", "spread"), [
    ([], None), (["7"], 0), (["1", "3", "2"], 2), (["step-7", "step-9"], 1), (["default"], 0), (["1", "v2"], 1),
])
def test_version_spread(versions: list[str], spread: int | None) -> None:
    assert version_spread(versions) == spread


@pytest.mark.parametrize(("endpoint", "protocol"), [
    ("/v1/chat/completions", "chat_completions"), ("/v1/responses", "responses"), ("/v1/messages", "messages"),
    ("/v1/rollout/pause", "rollout"), ("/session/finalize", "rollout"), ("/session/<path:session_id>", "rollout"),
    ("/trajectory/read", "rollout"), ("/v1/models", "other"), ("other", "other"), ("/metrics", "admin"),
    ("/health", "admin"), ("/ui/", "admin"),
])
def test_protocol_label_of_each_route_rule(endpoint: str, protocol: str) -> None:
    assert protocol_of(endpoint) == protocol


def test_a_generation_outcome_the_table_did_not_bind_is_still_counted() -> None:
    metrics = ProxyMetrics()
    metrics.generation_started()
    metrics.generation_ended("streaming", 1.0, 3)  # a live state: only a driver bug ends there
    samples = {s.labels.get("outcome"): s.value for s in families(metrics)["dressage_generations"].samples
               if s.name == "dressage_generations_total"}
    assert samples["streaming"] == 1 and samples["responded"] == 0
