"""The Grafana dashboard (issue 19, item 5): ``docs/grafana/dressage-proxy.json`` imports as is and queries only
metrics a real proxy exposes.

- the committed JSON is exactly what ``docs/grafana/build_dashboard.py`` writes (no hand edits that the next run of
  the generator would lose);
- it is a Grafana export for sharing: a ``DS_PROMETHEUS`` input, every panel, target and variable on
  ``${DS_PROMETHEUS}``, unique panel ids, panels inside the 24-column grid and not overlapping, every target with
  an expression and a unique refId, every ``$variable`` defined;
- every PromQL expression is well formed as far as a small check can tell (balanced brackets and quotes, metric
  names found), and accepted by Prometheus's own parser (``promtool`` from Debian's ``prometheus`` package);
- a real proxy (``run_proxy`` on its embedded engine, real sockets), after real requests, exposes at ``/metrics``
  every series the dashboard queries (a ``_bucket`` only where the metric is a histogram, a ``_total`` only where it
  is a counter), every label the dashboard groups or filters by, and no ``dressage_`` metric the dashboard leaves
  out.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.debian_packages import PackageUnavailable, ensure_extracted
from tests.e2e.conftest import start_proxy  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "docs" / "grafana" / "build_dashboard.py"
DASHBOARD = ROOT / "docs" / "grafana" / "dressage-proxy.json"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s"}
#: labels Prometheus attaches to every scraped series (the proxy does not expose them)
TARGET_LABELS = {"job", "instance"}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                   "offset", "inf", "nan"}


def generator() -> Any:
    spec = importlib.util.spec_from_file_location("build_dashboard", GENERATOR)
    assert spec is not None and spec.loader is not None, f"no generator at {GENERATOR}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load() -> dict[str, Any]:
    assert DASHBOARD.exists(), f"{DASHBOARD} is missing"
    return json.loads(DASHBOARD.read_text())


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, also those inside collapsed rows."""
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def targets(board: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(p["title"], t) for p in panels(board) for t in p.get("targets", [])]


# ---- a small PromQL reader -----------------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


def check_balanced(expr: str) -> None:
    text = _STRING.sub("s", expr)
    assert '"' not in text, f"unterminated string in {expr!r}"
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for char in text:
        if char in "([{":
            stack.append(char)
        elif char in pairs:
            assert stack and stack.pop() == pairs[char], f"unbalanced {char!r} in {expr!r}"
    assert not stack, f"unclosed {stack} in {expr!r}"


def metric_names(expr: str) -> set[str]:
    """The series names an expression selects: the identifiers that are not functions, keywords or labels."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery windows
    text = _GROUPING.sub(" ", text)  # by (...), on (...): label lists
    text = re.sub(r"\$\w+", " ", text)  # Grafana variables
    names = set()
    for match in _NAME.finditer(text):
        if match.start() > 0 and (text[match.start() - 1].isdigit() or text[match.start() - 1] == "."):
            continue  # the exponent or tail of a number
        follows = text[match.end():].lstrip()[:1]
        if follows == "(" or match.group().lower() in PROMQL_KEYWORDS:
            continue
        names.add(match.group())
    return names


def labels_used(expr: str) -> dict[str, set[str]]:
    """series name -> label names matched in its selector; ``""`` -> labels grouped by anywhere in the expression."""
    text = _STRING.sub(lambda m: m.group()[0] + "x" * (len(m.group()) - 2) + m.group()[-1], expr)
    used: dict[str, set[str]] = {"": set()}
    for name, matchers in _SELECTOR.findall(text):
        used.setdefault(name, set()).update(_MATCHER.findall(matchers))
    for grouping in _GROUPING.findall(text):
        used[""].update(label.strip() for label in grouping.split(",") if label.strip())
    return used


def test_the_promql_reader_finds_names_and_rejects_unbalanced_expressions() -> None:
    """The checker itself: it must be able to fail."""
    expr = ('histogram_quantile(0.99, sum by (le, endpoint) (rate(a_bucket{job=~"$job", x="a(b"}[5m]))) '
            '/ ignoring (fate) group_left sum(increase(b_total[1m])) * 1e3 + c')
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}
    assert labels_used(expr) == {"": {"le", "endpoint", "fate"}, "a_bucket": {"job", "x"}}
    for bad in ("sum(rate(a[5m])", "sum(rate(a[5m)))", 'a{x="1}', "a{x=\"1\"]"):
        with pytest.raises(AssertionError):
            check_balanced(bad)


# ---- the file ------------------------------------------------------------------------------------------------


def test_the_committed_dashboard_is_what_the_generator_writes() -> None:
    assert GENERATOR.exists() and DASHBOARD.exists(), "docs/grafana/ holds the dashboard and its generator"
    assert DASHBOARD.read_text() == generator().render(), (
        "docs/grafana/dressage-proxy.json differs from what build_dashboard.py writes: run "
        ".venv/bin/python docs/grafana/build_dashboard.py and commit both")


def test_the_dashboard_is_an_importable_grafana_export() -> None:
    board = load()
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    assert board["__inputs"][0]["type"] == "datasource" and board["__inputs"][0]["pluginId"] == "prometheus"
    assert board["id"] is None, "an export for sharing carries no numeric id"
    assert board["uid"] and board["title"] and isinstance(board["schemaVersion"], int)
    assert board["schemaVersion"] >= 36, "Grafana 10 and 11 write schemaVersion 36 and later"
    assert board["time"]["from"].startswith("now-") and board["time"]["to"] == "now"

    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert {"job", "instance"} <= set(variables)
    assert "label_values(dressage_requests_total" in variables["instance"]["definition"]
    assert variables["instance"]["definition"].rstrip(")").endswith("instance")
    for variable in variables.values():
        assert variable["datasource"] == DATASOURCE, variable["name"]

    all_panels = panels(board)
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    occupied: dict[tuple[int, int], str] = {}
    for panel in all_panels:
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["y"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, f"{panel['title']} runs past the 24 columns"
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in occupied, f"{panel['title']} overlaps {occupied[(x, y)]}"
                occupied[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), f"{panel['title']}: a target without an expression"

    defined = set(variables) | GRAFANA_BUILTINS
    for title, target in targets(board):
        for used in re.findall(r"\$\{?(\w+)", target["expr"]):
            assert used in defined, f"{title}: ${used} is not a dashboard variable"


def test_every_expression_is_well_formed_and_names_metrics() -> None:
    board = load()
    for title, target in targets(board):
        check_balanced(target["expr"])
        names = metric_names(target["expr"])
        assert names, f"{title}: no metric in {target['expr']!r}"
        assert all(n.startswith(("dressage_", "process_")) for n in names), (title, names)
        if "histogram_quantile(" in target["expr"]:
            assert all(n.endswith("_bucket") for n in names), title
            assert "le" in labels_used(target["expr"])[""], f"{title}: a quantile must keep le"


def test_promtool_parses_every_expression(tmp_path: Path) -> None:
    """Prometheus's own parser: ``promtool`` on the PATH, else unpacked from Debian's ``prometheus`` package (a
    static binary; ``tests/debian_packages.py``, no server installed). Skips, loudly, only when neither works."""
    promtool = shutil.which("promtool")
    if promtool is None:
        try:
            promtool = str(ensure_extracted("prometheus", "usr/bin/promtool", print))
        except PackageUnavailable as error:
            pytest.skip(f"LOUD SKIP: no promtool (Debian package `prometheus`): {error}; the expressions were "
                        "checked only by the small reader above")
    rules = []
    for i, (_title, target) in enumerate(targets(load())):
        expr = target["expr"].replace("$__rate_interval", "5m")
        expr = re.sub(r"\$\{?\w+\}?", ".*", expr)
        rules.append({"record": f"dashboard:expr_{i}", "expr": expr})
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))  # JSON is YAML
    run = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(rules)} rules found" in run.stdout + run.stderr


# ---- against a real proxy ------------------------------------------------------------------------------------


def metrics_module_present() -> bool:
    return importlib.util.find_spec("proxy.observability.metrics") is not None


def exposed_series(exposition: str) -> tuple[dict[str, str], dict[str, set[str]]]:
    """series name -> its metric type, and series name -> the label names seen on its samples, from the text
    format (a family with no sample yet still has its HELP and TYPE lines)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",),
                "summary": ("", "_sum", "_count"), "unknown": ("",), "info": ("_info",)}
    kinds: dict[str, str] = {}
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(exposition):
        for suffix in suffixes.get(family.type, ("",)):
            kinds[family.name + suffix] = family.type
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return kinds, labels


# (a skipif mark, not pytest.skip() inside: pytest-trio drops the reason of a skip raised in an async test)
@pytest.mark.skipif(not metrics_module_present(), reason=(
    "LOUD SKIP: proxy/observability/metrics.py is not in this tree yet (issue 19's metrics part, branch "
    "i19-metrics): the dashboard's queries could not be checked against a real /metrics"))
async def test_every_series_the_dashboard_queries_is_exposed_by_a_running_proxy(start_proxy) -> None:  # noqa: F811
    proxy = await start_proxy(script=[{"session": "*", "output": "<think>\nAdd them.\n</think>\n\nIt is 5."}] * 4,
                              metrics=True)
    async with httpx.AsyncClient(base_url=proxy.url, timeout=60) as http:
        for stream in (False, True):
            answer = await http.post("/v1/chat/completions", headers={"X-Session-Id": "dash"}, json={
                "model": "m", "stream": stream, "messages": [{"role": "user", "content": "What is 2 + 3?"}]})
            assert answer.status_code == 200, answer.text
        assert (await http.post("/session/finalize", json={"session_id": "dash"})).status_code == 200
        assert (await http.post("/trajectory/read", json={"session_id": "dash"})).status_code == 200
        scrape = await http.get("/metrics")
    assert scrape.status_code == 200, f"/metrics answered {scrape.status_code}: {scrape.text[:300]}"
    kinds, labels = exposed_series(scrape.text)
    assert labels.get("dressage_requests_total"), "no request was counted"

    board = load()
    queried: set[str] = set()
    for title, target in targets(board):
        expr = target["expr"]
        names = metric_names(expr)
        queried |= names
        missing = sorted(n for n in names if n not in kinds)
        assert not missing, f"{title}: {missing} not exposed at /metrics (exposed: {sorted(kinds)})"
        used = labels_used(expr)
        seen = set().union(*(labels.get(n, set()) for n in names)) | TARGET_LABELS
        # a label is checked only where a sample shows the metric's labels (a family with no sample shows none)
        if all(labels.get(n) for n in names):
            assert used[""] <= seen, f"{title}: groups by {sorted(used[''] - seen)}, not a label of {sorted(names)}"
        for name in names & used.keys():
            if labels.get(name):
                unknown = used[name] - labels[name] - TARGET_LABELS
                assert not unknown, f"{title}: {name} has no label {sorted(unknown)}"

    # (``*_created``: the creation-time gauges prometheus-client adds to counters and histograms)
    families = {name for name in kinds if name.startswith("dressage_") and not name.endswith("_created")}
    by_family = {re.sub(r"_(bucket|sum|count)$", "", n) if kinds[n] == "histogram" else n for n in families}
    shown = {re.sub(r"_(bucket|sum|count)$", "", n) if kinds.get(n) == "histogram" else n for n in queried}
    assert not by_family - shown, f"exposed but on no panel of the dashboard: {sorted(by_family - shown)}"
