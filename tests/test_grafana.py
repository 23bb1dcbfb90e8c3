"""The Grafana dashboard in deploy/grafana charts only metrics that a mount's /metrics endpoint serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import trio
from helpers import metrics_config, metrics_text
from prometheus_client.parser import text_string_to_metric_families

from aifs.config import load_config
from aifs.metrics import serve_metrics
from aifs.vfs.volume import Volume

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "aifs.json"

# The series a family of each type puts into the exposition, after its own name.
SERIES_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}
PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right"}
REQUIRED = {  # what the dashboard is for: requests, tiers, uploads
    "aifs_fuse_ops_total", "aifs_fuse_op_seconds_bucket", "aifs_tier_read_bytes_total", "aifs_tier_hits_total",
    "aifs_tier_misses_total", "aifs_upload_backlog_blocks", "aifs_uploaded_bytes_total",
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> set[str]:
    """The series names a mount's endpoint serves, from the families it declares (a labelled
    family that saw no sample yet still declares its type)."""
    volume = Volume(load_config(metrics_config(tmp_path_factory.mktemp("grafana"), "127.0.0.1:0")))
    server = serve_metrics(volume.config.metrics)
    try:
        server.watch(volume)
        text = metrics_text(server.port)
    finally:
        server.close()
        trio.run(volume.close)
    return {family.name + suffix for family in text_string_to_metric_families(text)
            for suffix in SERIES_SUFFIXES[family.type]}


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target, rows' panels included, and of every query variable."""
    found = []
    panels = list(dashboard["panels"])
    while panels:
        panel = panels.pop()
        panels.extend(panel.get("panels", []))
        found += [(panel["title"], target["expr"]) for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            found.append((f"variable {variable['name']}", query["query"] if isinstance(query, dict) else query))
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana label_values query) reads."""
    expr = re.sub(r"label_values\(\s*([^,()]*?)\s*,\s*\w+\s*\)", r"\1", expr)
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings hold no names
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)  # label matchers, ranges
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)  # label lists
    expr = re.sub(r"\$\{?\w+\}?", "", expr)  # Grafana variables
    names = re.findall(r"(?<![\w.$])[A-Za-z_:][\w:]*+(?!\s*\()", expr)  # not functions
    return set(names) - PROMQL_KEYWORDS


def test_every_query_names_only_exported_metrics(exported):
    dashboard = json.loads(DASHBOARD.read_text())
    found = queries(dashboard)
    assert found
    named: set[str] = set()
    for where, expr in found:
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        assert names <= exported, f"{where}: {sorted(names - exported)} not exported by aifs, in {expr!r}"
        named |= names
    assert REQUIRED <= named, f"no panel charts {sorted(REQUIRED - named)}"


@pytest.mark.parametrize("expr, wrong", [
    ('sum by (op) (rate(aifs_fuse_ops{instance=~"$instance"}[$__rate_interval]))', {"aifs_fuse_ops"}),
    ("rate(aifs_tier_hits_total[5m]) / on (tier) group_left up", {"up"}),
    ("histogram_quantile(0.99, sum by (le) (rate(aifs_tier_read_seconds[1m])))", {"aifs_tier_read_seconds"}),
    ("label_values(aifs_fuse_op_total, instance)", {"aifs_fuse_op_total"}),
])
def test_a_name_aifs_does_not_export_is_caught(exported, expr, wrong):
    assert metric_names(expr) - exported == wrong


def test_panels_have_unique_ids_and_use_the_chosen_data_source():
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for row in dashboard["panels"] for p in [row, *row.get("panels", [])]]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]
