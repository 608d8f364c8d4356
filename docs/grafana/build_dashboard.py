"""Writes ``docs/grafana/dressage-proxy.json``, the Grafana dashboard of the proxy's metrics (issue 19, item 5).

The dashboard is generated, not hand-typed: each panel below is a title, a unit and its PromQL, and the JSON model
around them (ids, grid positions, datasource references, legends) is filled in the same way for every panel.
Re-run after changing a panel and commit both files; ``tests/observability/test_grafana_dashboard.py`` checks that
the committed JSON is exactly what this script produces, and that every metric it queries is one a real proxy
exposes at ``/metrics``.

    .venv/bin/python docs/grafana/build_dashboard.py          # rewrite the JSON
    .venv/bin/python docs/grafana/build_dashboard.py --check  # exit 1 if the JSON is stale

The JSON is an *export for sharing* (Grafana 10/11): a ``DS_PROMETHEUS`` datasource input that Grafana asks for on
import, ``${DS_PROMETHEUS}`` in every panel and template variable, and no numeric dashboard id. Metric names are the
contract of ``docs/observability.md`` (the Metrics section); the metrics themselves live in
``proxy/observability/metrics.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

import attrs

OUTPUT = Path(__file__).resolve().parent / "dressage-proxy.json"
UID = "dressage-proxy"
TITLE = "dressage-proxy"
#: the Grafana release whose export format this follows; Grafana 10.0+ and 11 import it (schemaVersion 39)
GRAFANA_VERSION = "10.4.0"
SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
#: every selector filters on the two template variables (target labels Prometheus adds at scrape time)
SELECTOR = 'job=~"$job", instance=~"$instance"'
#: Grafana's own rate window: at least four scrape intervals, whatever the scrape interval and zoom
WINDOW = "$__rate_interval"
GRID_COLUMNS = 24


# ---- PromQL pieces -------------------------------------------------------------------------------------------


def series(metric: str, matchers: str = "") -> str:
    """``metric{job, instance[, matchers]}``."""
    return f"{metric}{{{SELECTOR}{', ' + matchers if matchers else ''}}}"


def rate(metric: str, matchers: str = "") -> str:
    return f"rate({series(metric, matchers)}[{WINDOW}])"


def sum_rate(metric: str, by: str = "", matchers: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} ({rate(metric, matchers)})"


def quantile(q: float, histogram: str, by: str = "") -> str:
    """The ``q`` quantile of a histogram over the rate window (across instances), optionally per label ``by``."""
    grouping = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({grouping}) ({rate(histogram + '_bucket')}))"


# ---- panels --------------------------------------------------------------------------------------------------


@attrs.frozen
class Query:
    expr: str
    legend: str


@attrs.frozen
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"
    width: int = 8
    height: int = 8
    stacked: bool = False


@attrs.frozen
class Row:
    title: str
    panels: tuple[Panel, ...]


def quantiles(histogram: str, qs: Iterable[float] = (0.5, 0.9, 0.99), by: str = "",
              legend_by: str = "") -> tuple[Query, ...]:
    """One query per quantile (p50, p90, p99 by default)."""
    prefix = f"{{{{{legend_by}}}}} " if legend_by else ""
    return tuple(Query(quantile(q, histogram, by), f"{prefix}p{round(q * 100):g}") for q in qs)


def q(expr: str, legend: str) -> Query:
    return Query(expr, legend)


ROWS: tuple[Row, ...] = (
    Row("Overview", (
        Panel("Requests/s", "Every HTTP request the proxy answered, all endpoints.",
              (q(sum_rate("dressage_requests_total"), "requests/s"),), "reqps", "stat", 4, 4),
        # (`or vector(0)`: with no 5xx series at all the share is 0, not "No data")
        Panel("Errors (5xx)", "Share of requests answered 5xx.",
              (q("(" + sum_rate("dressage_requests_total", matchers='status=~"5.."') + " or vector(0)) / "
                 + sum_rate("dressage_requests_total"), "5xx share"),), "percentunit", "stat", 4, 4),
        Panel("Generations in flight", "Generations running now (summed over instances).",
              (q(f"sum ({series('dressage_generations_in_flight')})", "in flight"),), "short", "stat", 4, 4),
        Panel("Live sessions", "Sessions open in the registry now.",
              (q("sum (" + series("dressage_sessions", 'state="live"') + ")", "live"),),
              "short", "stat", 4, 4),
        Panel("Generated tokens/s", "Tokens generated through the proxy per second.",
              (q(sum_rate("dressage_generated_tokens_total"), "tokens/s"),), "short", "stat", 4, 4),
        Panel("Resident memory", "Resident set size of the proxy process (largest instance).",
              (q(f"max ({series('process_resident_memory_bytes')})", "RSS"),), "bytes", "stat", 4, 4),
    )),
    Row("Requests", (
        Panel("Request rate by endpoint",
              "HTTP requests per second by route (`other` for unmatched paths).",
              (q(sum_rate("dressage_requests_total", "endpoint"), "{{endpoint}}"),), "reqps", stacked=True),
        Panel("Errors by endpoint and status",
              "Requests answered 4xx or 5xx per second, by route and status code.",
              (q(sum_rate("dressage_requests_total", "endpoint, status", 'status=~"[45].."'),
                 "{{endpoint}} {{status}}"),), "reqps", stacked=True),
        Panel("Request rate by protocol",
              "Requests per second by API surface (chat_completions, responses, messages, rollout, admin).",
              (q(sum_rate("dressage_requests_total", "protocol"), "{{protocol}}"),), "reqps", stacked=True),
        Panel("Request duration p99 by endpoint",
              "99th percentile of the time from request to the last byte of the answer, per route.",
              quantiles("dressage_request_duration_seconds", (0.99,), "endpoint", "endpoint"), "s", width=12),
        Panel("Request duration p50 by endpoint", "Median request duration per route.",
              quantiles("dressage_request_duration_seconds", (0.5,), "endpoint", "endpoint"), "s", width=12),
    )),
    Row("Generations", (
        Panel("Generation latency", "One generation from start to end (quantiles over all generations).",
              quantiles("dressage_generation_duration_seconds"), "s"),
        Panel("Time to first token", "From a generation's start to its first generated token.",
              quantiles("dressage_time_to_first_token_seconds"), "s"),
        Panel("Tokens/s per generation", "Decode speed of one generation; the low quantiles are the slow ones.",
              quantiles("dressage_generation_tokens_per_second", (0.1, 0.5, 0.9)), "short"),
        Panel("Generations by outcome", "Generations ended per second, by how they ended.",
              (q(sum_rate("dressage_generations_total", "outcome"), "{{outcome}}"),), "ops", stacked=True),
        Panel("Generations in flight", "Generations running now, per instance.",
              (q(series("dressage_generations_in_flight"), "{{instance}}"),), "short"),
        Panel("Generated tokens/s", "Tokens generated per second through the proxy, all generations.",
              (q(sum_rate("dressage_generated_tokens_total"), "tokens/s"),), "short"),
    )),
    Row("Sessions and segments", (
        Panel("Sessions by state", "Sessions in the registry now: live, finalized (waiting to be drained), tombstones.",
              (q(f"sum by (state) ({series('dressage_sessions')})", "{{state}}"),), "short", stacked=True),
        Panel("Sessions finalized by reason", "Sessions finalized per second: explicitly, by the idle reaper, ...",
              (q(sum_rate("dressage_sessions_finalized_total", "reason"), "{{reason}}"),), "ops", stacked=True),
        Panel("Sessions evicted by kind", "Registry entries dropped per second (idle-finalized, expired tombstones).",
              (q(sum_rate("dressage_sessions_evicted_total", "kind"), "{{kind}}"),), "ops", stacked=True),
        Panel("Segments by boundary reason",
              "Exported segments per second by why the segment ended (why a session split into several).",
              (q(sum_rate("dressage_segments_total", "boundary_reason"), "{{boundary_reason}}"),), "ops",
              stacked=True, width=12),
        Panel("Weight-version spread per segment",
              "Newest minus oldest weight version inside one exported segment (0: one policy version). The share "
              "is segments with a spread of 1 or more.",
              (*quantiles("dressage_segment_weight_version_spread", (0.5, 0.99)),
               # "0.0" is how prometheus-client writes the bound, "0" how Prometheus 3 stores it: accept both
               q("1 - " + sum_rate("dressage_segment_weight_version_spread_bucket", matchers='le=~"0|0[.]0"')
                 + " / " + sum_rate("dressage_segment_weight_version_spread_count"), "share with spread >= 1")),
              "short", width=12),
    )),
    Row("Correctness: TITO drift and parsers", (
        Panel("TITO drift audits by outcome",
              "Token-in-token-out drift audits per second by outcome (a drift: the re-encoded prompt disagreed).",
              (q(sum_rate("dressage_tito_drift_audits_total", "outcome"), "{{outcome}}"),), "ops", stacked=True,
              width=12),
        Panel("Parser mismatches by parser",
              "Times per second a parse backend disagreed with the reference parse, by parser.",
              (q(sum_rate("dressage_parser_mismatches_total", "parser"), "{{parser}}"),), "ops", stacked=True,
              width=12),
    )),
    Row("Pauses (partial rollout)", (
        Panel("Pauses", "Pauses started in each rate window.",
              (q(f"sum (increase({series('dressage_pauses_total')}[{WINDOW}]))", "pauses"),), "short", width=6),
        Panel("Pause-ack latency", "From a pause request until every in-flight generation acknowledged it.",
              quantiles("dressage_pause_ack_seconds"), "s", width=6),
        Panel("Generations cut per pause", "Generations cut by pauses, per pause (over the rate window).",
              (q(f"sum (increase({series('dressage_pause_generations_cut_total')}[{WINDOW}])) / "
                 f"sum (increase({series('dressage_pauses_total')}[{WINDOW}]))", "cut / pause"),), "short", width=6),
        Panel("Tokens kept / discarded per pause",
              "Tokens of cut generations kept in the trajectory or discarded, per pause.",
              (q(f"sum by (fate) (increase({series('dressage_pause_tokens_total')}[{WINDOW}])) / ignoring (fate) "
                 f"group_left sum (increase({series('dressage_pauses_total')}[{WINDOW}]))", "{{fate}}"),),
              "short", width=6),
    )),
    Row("Trajectory store", (
        Panel("Store write latency", "One write to the trajectory store.",
              quantiles("dressage_store_write_seconds"), "s", width=6),
        Panel("Store write throughput", "Bytes written to the store per second.",
              (q(sum_rate("dressage_store_write_bytes_total"), "written"),), "Bps", width=6),
        Panel("Store bytes", "Bytes held by the store now (segments written and not yet drained).",
              (q(f"sum ({series('dressage_store_bytes')})", "bytes"),), "bytes", width=6),
        Panel("Store segments", "Segments held by the store now.",
              (q(f"sum ({series('dressage_store_segments')})", "segments"),), "short", width=6),
    )),
    Row("Tokenization", (
        Panel("Tokenization time, inline vs off loop",
              "Median and 99th percentile of one tokenization, on the event loop (inline) or in the off-loop thread.",
              quantiles("dressage_tokenization_seconds", (0.5, 0.99), "where", "where"), "s"),
        Panel("Tokenizations/s by where", "How many tokenizations ran inline or off the loop.",
              (q(sum_rate("dressage_tokenization_seconds_count", "where"), "{{where}}"),), "ops", stacked=True),
        Panel("Tokenization busy time by where",
              "Seconds spent tokenizing per second (1.0 = one core's worth), inline vs off loop.",
              (q(sum_rate("dressage_tokenization_seconds_sum", "where"), "{{where}}"),), "percentunit",
              stacked=True),
    )),
    Row("Process", (
        Panel("CPU", "CPU used by each proxy process, in cores (1.0 = one core busy).",
              (q(rate("process_cpu_seconds_total"), "{{instance}}"),), "short"),
        Panel("Resident memory", "Resident set size of each proxy process.",
              (q(series("process_resident_memory_bytes"), "{{instance}}"),), "bytes"),
        Panel("Open file descriptors", "Open descriptors (sockets, store files) of each proxy process.",
              (q(series("process_open_fds"), "{{instance}}"),), "short"),
    )),
)


# ---- the JSON model ------------------------------------------------------------------------------------------


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    targets = [
        {"datasource": DATASOURCE, "editorMode": "code", "expr": query.expr, "legendFormat": query.legend,
         "range": True, "refId": chr(ord("A") + i)}
        for i, query in enumerate(panel.queries)
    ]
    common = {
        "datasource": DATASOURCE,
        "description": panel.description,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "id": panel_id,
        "targets": targets,
        "title": panel.title,
        "type": panel.kind,
    }
    if panel.kind == "stat":
        return {**common,
                "fieldConfig": {"defaults": {"unit": panel.unit, "color": {"mode": "thresholds"},
                                             "thresholds": {"mode": "absolute",
                                                            "steps": [{"color": "green", "value": None}]}},
                                "overrides": []},
                "options": {"colorMode": "value", "graphMode": "area", "justifyMode": "auto",
                            "orientation": "auto", "textMode": "auto",
                            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}}
    return {**common,
            "fieldConfig": {"defaults": {
                "unit": panel.unit,
                "color": {"mode": "palette-classic"},
                "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 20 if panel.stacked else 0,
                           "showPoints": "never", "spanNulls": False,
                           "stacking": {"group": "A", "mode": "normal" if panel.stacked else "none"}},
            }, "overrides": []},
            "options": {"legend": {"calcs": ["mean", "max"], "displayMode": "table", "placement": "bottom",
                                   "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


def layout(rows: tuple[Row, ...]) -> list[dict]:
    """Rows and their panels, left to right, wrapping at 24 columns; ids are 1, 2, ... in reading order."""
    panels: list[dict] = []
    y = 0
    for row in rows:
        panels.append({"collapsed": False, "gridPos": {"h": 1, "w": GRID_COLUMNS, "x": 0, "y": y},
                       "id": len(panels) + 1, "panels": [], "title": row.title, "type": "row"})
        y += 1
        x, line_height = 0, 0
        for panel in row.panels:
            if x + panel.width > GRID_COLUMNS:
                x, y, line_height = 0, y + line_height, 0
            panels.append(panel_json(panel, len(panels) + 1, x, y))
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return panels


def variable(name: str, query: str) -> dict:
    return {"current": {}, "datasource": DATASOURCE, "definition": query, "hide": 0, "includeAll": True,
            "allValue": ".*", "label": name, "multi": True, "name": name, "options": [],
            "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "refresh": 2, "regex": "", "skipUrlSync": False, "sort": 1, "type": "query"}


def dashboard() -> dict:
    kinds = sorted({p.kind for row in ROWS for p in row.panels})
    names = {"stat": "Stat", "timeseries": "Time series"}
    return {
        "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "description": "The Prometheus that scrapes "
                      "the proxies' /metrics", "type": "datasource", "pluginId": "prometheus",
                      "pluginName": "Prometheus"}],
        "__elements": {},
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
            *({"type": "panel", "id": kind, "name": names[kind], "version": ""} for kind in kinds),
        ],
        "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                                  "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                                  "name": "Annotations & Alerts", "type": "dashboard"}]},
        "description": "dressage-proxy: requests, generations, sessions and segments, TITO drift, pauses, the "
                       "trajectory store, tokenization and the process (docs/observability.md).",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [],
        "panels": layout(ROWS),
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["dressage-proxy", "rl", "inference"],
        "templating": {"list": [
            variable("job", "label_values(dressage_requests_total, job)"),
            variable("instance", 'label_values(dressage_requests_total{job=~"$job"}, instance)'),
        ]},
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": TITLE,
        "uid": UID,
        "version": 1,
        "weekStart": "",
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed JSON is not what this writes")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            sys.exit(f"{OUTPUT} is stale: run {Path(__file__).name}")
        return
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT} ({len(text.splitlines())} lines)")


if __name__ == "__main__":
    main()
