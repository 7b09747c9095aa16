"""The Grafana dashboard (contrib/grafana/vdifrec.json) against the recorder's `GET /metrics`.

Offline: the file is an importable dashboard (one Prometheus datasource input that every panel,
target and the `instance` variable refer to; unique panel ids; every panel placed on the grid
without overlap) and every PromQL expression is well formed: balanced brackets, only `vdifrec_`
metrics, each filtered by the `instance` variable, counters only under rate()/increase() and
gauges never.

Live: a recorder on loopback with the latency histogram and the live monitor, fed a tone until
the monitor has looked at it, exports every metric family the dashboard names (a histogram's
`_bucket`, `_sum` and `_count` are its family; a counter's `_total` is its family), each of the
type its use needs, with the labels the panels group and name series by.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import first_live_look, metric

DASHBOARD = Path(__file__).resolve().parent.parent / "contrib" / "grafana" / "vdifrec.json"
GRID_WIDTH = 24
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
COUNTER_FUNCTIONS = ("rate", "irate", "increase")
# Words of PromQL that look like names but are not metrics.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
            "offset", "inf", "nan"}
# Labels Prometheus itself adds to every scraped sample.
TARGET_LABELS = {"instance", "job"}
PAIRS = {"(": ")", "[": "]", "{": "}"}


# -- reading the dashboard ---------------------------------------------------------------------

def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return doc


def all_panels(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    for p in doc["panels"]:
        yield p
        yield from p.get("panels", [])


def targets(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for p in all_panels(doc):
        for t in p.get("targets", []):
            yield p, t


def exprs(doc: dict[str, Any]) -> list[str]:
    return [t["expr"] for _, t in targets(doc)]


# -- reading PromQL (enough of it for what a dashboard writes) ---------------------------------

def without_strings(expr: str) -> str:
    """`expr` with each string literal ("...", '...', `...`) emptied."""
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def balanced(expr: str) -> bool:
    stack: list[str] = []
    for c in without_strings(expr):
        if c in PAIRS:
            stack.append(PAIRS[c])
        elif c in PAIRS.values():
            if not stack or stack.pop() != c:
                return False
    return not stack


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects: identifiers that are not functions, keywords, label
    names (matchers, grouping clauses), durations, numbers or Grafana variables."""
    s = without_strings(expr)
    s = re.sub(r"\$\{[^}]*\}|\$\w+", " ", s)  # $__rate_interval, ${instance}
    s = re.sub(r"\{[^{}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\[\]]*\]", " ", s)  # ranges and subqueries
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?", s):
        name, call = m.group(1), m.group(2)
        if call is None and name.lower() not in KEYWORDS:
            names.add(name)
    return names


def counter_calls(expr: str) -> list[tuple[int, int]]:
    """Spans of the rate()/irate()/increase() calls in `expr` (strings emptied first)."""
    s = without_strings(expr)
    spans = []
    for m in re.finditer(r"\b(?:%s)\s*\(" % "|".join(COUNTER_FUNCTIONS), s):
        depth, i = 0, m.end() - 1
        for i in range(m.end() - 1, len(s)):
            depth += {"(": 1, ")": -1}.get(s[i], 0)
            if depth == 0:
                break
        spans.append((m.start(), i + 1))
    return spans


def names_by_use(expr: str) -> tuple[set[str], set[str]]:
    """(names inside rate()/irate()/increase(), names elsewhere)."""
    s = without_strings(expr)
    inside: set[str] = set()
    outside = s
    for a, b in counter_calls(expr):
        inside |= metric_names(s[a:b])
        outside = outside[:a] + " " * (b - a) + outside[b:]
    return inside, metric_names(outside)


def counter_like(name: str) -> bool:
    return name.endswith(("_total",) + HISTOGRAM_SUFFIXES)


def labels_named(target: dict[str, Any]) -> set[str]:
    """Labels a target names series by (legend) or groups by (by/without clauses)."""
    named = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
    for clause in re.findall(r"\b(?:by|without)\s*\(([^()]*)\)", without_strings(target["expr"])):
        named |= {x.strip() for x in clause.split(",") if x.strip()}
    return named


def test_the_promql_reader() -> None:
    e = ('histogram_quantile(0.99, sum by (le, stage) (rate(vdifrec_latency_seconds_bucket'
         '{instance=~"$instance", stage!="a{b"}[1m]))) / on(instance) group_left vdifrec_x offset 5m > bool 1e3')
    assert balanced(e) and metric_names(e) == {"vdifrec_latency_seconds_bucket", "vdifrec_x"}
    assert names_by_use(e) == ({"vdifrec_latency_seconds_bucket"}, {"vdifrec_x"})
    assert metric_names("sum(up) without (job) * $__range_s + ${x}") == {"up"}
    assert not balanced("rate(x[1m]") and not balanced("x{a=\"b\"]") and balanced('x{a=")"}')
    assert labels_named({"expr": "sum by (instance, cause) (x)", "legendFormat": "{{instance}} {{ cause }}"}) \
        == {"instance", "cause"}


# -- offline -----------------------------------------------------------------------------------

def test_the_dashboard_is_importable_anywhere() -> None:
    doc = dashboard()
    assert 36 <= doc["schemaVersion"] <= 41
    assert doc["uid"] and doc["title"] and doc.get("id") is None
    inputs = [i for i in doc["__inputs"] if i["type"] == "datasource"]
    assert len(inputs) == 1 and inputs[0]["pluginId"] == "prometheus", inputs
    ds = {"type": "prometheus", "uid": "${%s}" % inputs[0]["name"]}
    panels = list(all_panels(doc))
    assert panels
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: dict[tuple[int, int], int] = {}
    for p in panels:
        assert p.get("datasource") == ds, (p["id"], p.get("title"), p.get("datasource"))
        assert "gridPos" in p, (p["id"], p.get("title"))
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in "hwxy"), (p["id"], g)
        assert g["h"] > 0 and g["w"] > 0 and g["x"] >= 0 and g["y"] >= 0 and g["x"] + g["w"] <= GRID_WIDTH, (p["id"], g)
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panels {cells[(x, y)]} and {p['id']} overlap"
                cells[(x, y)] = p["id"]
        if p["type"] != "row":
            assert p.get("title") and p.get("targets"), p["id"]
    for p, t in targets(doc):
        assert t.get("datasource", ds) == ds, (p["id"], t)
        assert t["expr"].strip() and t["refId"], (p["id"], t)
    for p in all_panels(doc):
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), p["id"]
    # The recorder variable: every target exporting vdifrec_recording.
    (var,) = [v for v in doc["templating"]["list"] if v["name"] == "instance"]
    assert var["type"] == "query" and var["datasource"] == ds
    query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
    assert re.fullmatch(r"label_values\(\s*vdifrec_recording\s*,\s*instance\s*\)", query), query


def test_every_expression_is_well_formed_and_names_only_vdifrec_metrics() -> None:
    doc = dashboard()
    for expr in exprs(doc):
        assert balanced(expr), expr
        names = metric_names(expr)
        assert names, expr
        assert all(n.startswith("vdifrec_") for n in names), (expr, names)
        assert "__name__" not in expr, expr  # every metric is named where the test can see it
        # Each selector is filtered by the recorder variable.
        for m in re.finditer(r"(?<![\w:])(vdifrec_\w+)\s*(\{[^{}]*\})?", expr):
            assert m.group(2) and 'instance=~"$instance"' in m.group(2), (expr, m.group(1))
        # Counters (and a histogram's series) are rated; gauges are shown as they are.
        inside, outside = names_by_use(expr)
        assert all(counter_like(n) for n in inside), (expr, inside)
        assert not any(counter_like(n) for n in outside), (expr, outside)


# -- live --------------------------------------------------------------------------------------

def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        body: bytes = r.read()
        return body.decode()


def family_of(name: str, families: dict[str, str]) -> str | None:
    """The family (as prometheus_client names it) a name in an expression belongs to: a
    histogram's `_bucket`, `_sum` and `_count` are the histogram, a counter's `_total` the counter."""
    for suffix in HISTOGRAM_SUFFIXES:
        stem = name.removesuffix(suffix)
        if stem != name and families.get(stem) in ("histogram", "gaugehistogram", "summary"):
            return stem
    stem = name.removesuffix("_total")
    if stem != name and families.get(stem) == "counter":
        return stem
    return name if name in families else None


@pytest.mark.slow
@pytest.mark.network
def test_every_metric_the_dashboard_uses_is_exported() -> None:
    import vdifrec

    with vdifrec.Recorder(port=0, ring="64MiB", status_listen="127.0.0.1:0", latency=True) as rec:
        assert rec.address is not None and rec.status_address is not None
        base = "http://%s:%d" % rec.status_address
        # The stream goes on until the live monitor has described a second (bounded; it looks
        # only while frames arrive), and is stopped then.
        sender = vdifrec.Sender(rec.address, duration=300.0, fps=20000, tone_mhz=10.0)
        try:
            first_live_look(lambda: metric(base, "vdifrec_live_spectra_total") > 0, base)
        finally:
            sender.stop()
        text = get(base + "/metrics")
    assert_dashboard_served_by(text)


def assert_dashboard_served_by(text: str) -> None:
    """Every metric of the dashboard is a family of the exposition `text`, of the type its use
    needs, with the labels its panels name and group by."""
    from prometheus_client.parser import text_string_to_metric_families

    parsed = list(text_string_to_metric_families(text))
    families = {f.name: f.type for f in parsed}
    labels: dict[str, set[str]] = {f.name: {k for s in f.samples for k in s.labels} for f in parsed}
    has_samples = {f.name for f in parsed if f.samples}
    exported = sorted(n + "_total" if kind == "counter" else n for n, kind in families.items())
    doc = dashboard()
    used: dict[str, str] = {}
    for _, t in targets(doc):
        expr = t["expr"]
        inside, outside = names_by_use(expr)
        for name in inside | outside:
            family = family_of(name, families)
            assert family is not None, f"{name} (in {expr}) is not exported; /metrics has {exported}"
            used[name] = family
            # rate()/increase() need a counter (or a histogram's series); the rest, gauges.
            kind = families[family]
            if name in inside:
                assert kind in ("counter", "histogram"), (name, kind, expr)
            else:
                assert kind in ("gauge", "unknown", "untyped"), (name, kind, expr)
        # The labels the panel names and groups series by are on the samples (where there are
        # any here: a monitoring recorder has no disks).
        for name in inside | outside:
            family = used[name]
            if family in has_samples:
                missing = labels_named(t) - TARGET_LABELS - labels[family]
                assert not missing, f"{expr} names labels {sorted(missing)} that {name} does not have: {sorted(labels[family])}"
    assert used, "the dashboard names no metric"
