"""deploy/grafana/vmqpy.json: valid JSON with what Grafana's dashboard import needs, whose queries only name
metrics that GET /metrics really exposes (admin.metric_table, the one table of names, read by admin.prometheus)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from admin.metric_table import SPECS
from admin.prometheus import exposed_names

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "vmqpy.json"
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")  # a metric with a label matcher: name{...}
IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def every_name() -> set[str]:
    """What a clustered node that has seen every kind of traffic exposes."""
    raw: dict[str, int | float] = {key: 1 for spec in SPECS for key in spec.sources}
    raw.update({"broker.sessions": 2, "broker.sessions_online": 1, "broker.mqtt_connack_success_sent": 1,
                "netsplit.refused_register": 1, "broker.connect_latency_le_inf": 1,
                "broker.delivery_latency_le_inf": 1, "registration.handover_duration_le_inf": 1})
    return exposed_names(raw)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return doc


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in doc["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # a collapsed row holds its panels
    return out


def test_top_level_fields_of_an_importable_dashboard(dashboard: dict[str, Any]) -> None:
    assert isinstance(dashboard["title"], str) and dashboard["title"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", dashboard["uid"])
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert isinstance(dashboard["panels"], list) and dashboard["panels"]
    assert "id" not in dashboard or dashboard["id"] is None  # an id would collide with the importing server's
    # The data source is chosen at import: one input, used by every panel and query.
    [source] = dashboard["__inputs"]
    assert source["type"] == "datasource" and source["pluginId"] == "prometheus"
    uses = json.dumps(dashboard["panels"]) + json.dumps(dashboard["templating"])
    assert "${" + source["name"] + "}" in uses


def test_every_panel_has_type_title_position_and_queries(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard):
        assert panel["type"] in ("row", "stat", "timeseries", "gauge", "table"), panel["title"]
        assert panel["title"]
        grid = panel["gridPos"]
        assert {"h", "w", "x", "y"} <= set(grid) and 0 <= grid["x"] and grid["x"] + grid["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids))
        for target in panel["targets"]:
            assert target["expr"].strip()


def test_the_sections_the_issue_asks_for(dashboard: dict[str, Any]) -> None:
    rows = [p["title"] for p in panels(dashboard) if p["type"] == "row"]
    assert rows == ["Cluster overview", "Per-node throughput", "Netsplits", "Replication"]


def test_queries_name_only_exposed_metrics(dashboard: dict[str, Any]) -> None:
    exposed = every_name()
    used: set[str] = set()
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            expr = target["expr"]
            selected = SELECTOR.findall(expr)
            assert selected, f"{panel['title']}: no metric selector in {expr!r}"
            unknown = set(selected) - exposed
            assert not unknown, f"{panel['title']}: {sorted(unknown)} are not exposed by /metrics"
            # A metric named without a matcher would escape the check above: every exposed name used in the
            # expression must be a selector.
            bare = {name for name in IDENTIFIER.findall(expr) if name in exposed} - set(selected)
            assert not bare, f"{panel['title']}: {sorted(bare)} used without a label matcher"
            used.update(selected)
    variable = dashboard["templating"]["list"][0]
    assert variable["name"] == "node"
    label_metric = re.search(r"label_values\((\w+), node\)", variable["definition"])
    assert label_metric is not None and label_metric.group(1) in exposed
    # the headline metrics are on the board
    assert {"mqtt_publish_received", "netsplit_detected", "vmqpy_metadata_exchanges_total", "vmqpy_takeovers_total",
            "vmqpy_connect_latency_seconds_bucket", "active_sessions"} <= used


def test_the_check_catches_a_misspelt_metric() -> None:
    assert "mqtt_publish_received_total" not in every_name()  # VerneMQ's counters have no suffix
    assert "vmqpy_takeovers" not in every_name()  # ours do: vmqpy_takeovers_total
    assert SELECTOR.findall('rate(mqtt_publish_recieved{node=~"$node"}[1m])') == ["mqtt_publish_recieved"]
