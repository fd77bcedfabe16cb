"""The Grafana dashboard and the Prometheus alert rules: valid, tested with promtool, and referring
only to metrics the job really exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from replicator import config as config_mod
from replicator.groups.sync import GroupStatus, PartitionStatus
from replicator.ops.lag import PartitionLag
from replicator.ops.metrics import MetricsObserver

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "replicator-dashboard.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
ALERTS_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yaml"
# Series Prometheus itself adds for every scrape target.
PROMETHEUS_OWN = {"up"}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or",
             "unless", "inf", "nan"}
# Grafana's variables, as Grafana would expand them for "All".
GRAFANA_VARS = {"$__rate_interval": "1m", "$job": ".*", "$instance": ".*", "$topic": ".*"}


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: `make debs` (or apt-get install prometheus) installs it"
    return path


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (functions, keywords and label names excluded)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*", e):
        if e[m.end():].lstrip().startswith("(") or m.group().lower() in _KEYWORDS:
            continue
        names.add(m.group())
    return names


def test_metric_names_parser():
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(a_bucket{job=~"$job"}[5m])))') == {"a_bucket"}
    assert metric_names("time() - max(b_seconds) > 1e3 unless on (job) c_total offset 5m") == \
        {"b_seconds", "c_total"}


def dashboard_exprs(dashboard: dict) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((.+),\s*\w+\)", q)
            assert m, f"template variable {var['name']}: unexpected query {q!r}"
            exprs.append(m.group(1))
    return exprs


def expand(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


def observer_after_traffic() -> MetricsObserver:
    """The job's metrics once they have seen a batch, a lag lookup and a batch end."""
    cfg = config_mod.load({"source_bootstrap_servers": "h:1", "target_bootstrap_servers": "h:2", "topics": "t"},
                          environ={})
    obs = MetricsObserver(cfg)
    obs.on_batch({"records": 1, "bytes": 1, "transactions": 1, "aborted": 0, "fenced": 0, "producer_recreations": 0,
                  "data_loss_events": 0, "transaction_seconds": [0.1], "latency_seconds": [0.2],
                  "partitions": {"t|0": [1, 1, 1, 1.0]}})
    obs.on_lag([PartitionLag("t", "t", 0, 1, 1, 0)])
    obs.on_batch({"batch": 1, "batches": 1, "batch_records": 1, "batch_seconds": 0.1})
    part = PartitionStatus("t", 0, "t", 5, 4, True, 0, "index")
    obs.metrics.on_groups([GroupStatus("app", "synced", [part])])
    obs.metrics.translation_failures.inc(0)
    return obs


def exported_metric_names() -> set[str]:
    return {s.name for family in observer_after_traffic().metrics.registry.collect() for s in family.samples}


def test_dashboard_is_valid_grafana_json():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "job", "instance", "topic"} <= variables
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, f"panel {panel['title']!r} is wider than the grid"
        own = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not own & cells, f"panel {panel['title']!r} overlaps another"
        cells |= own
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        assert all(t["expr"] and t["refId"] for t in panel["targets"])
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for subject in ("lag", "throughput", "latency", "transaction", "fenc", "batch", "ready"):
        assert subject in titles or subject in json.dumps(dashboard).lower(), f"no panel about {subject}"


def test_every_dashboard_query_uses_exported_metrics():
    exported = exported_metric_names() | PROMETHEUS_OWN
    exprs = dashboard_exprs(json.loads(DASHBOARD.read_text()))
    used = set()
    for expr in exprs:
        names = metric_names(expand(expr))
        assert names, f"no metric in {expr!r}"
        assert names <= exported, f"{expr!r} uses {sorted(names - exported)}, which the job does not export"
        used |= names
    # The dashboard covers the whole per-partition picture.
    assert {"replicator_lag_records", "replicator_lag_seconds", "replicator_replicated_records_total",
            "replicator_replicated_bytes_total", "replicator_replication_latency_seconds_bucket",
            "replicator_ready"} <= used


def test_dashboard_queries_are_valid_promql(tmp_path):
    """promtool parses each query (as a recording rule), as Prometheus would."""
    exprs = dashboard_exprs(json.loads(DASHBOARD.read_text()))
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": expand(e)} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard_rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    out = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout


def test_alert_rules_pass_promtool_check():
    out = subprocess.run([promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_alert_rules_pass_their_promtool_unit_tests():
    out = subprocess.run([promtool(), "test", "rules", str(ALERTS_TEST)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_alerts_cover_the_failure_modes_and_use_exported_metrics():
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    names = {r["alert"] for r in rules}
    assert {"ReplicatorDown", "ReplicatorLagHigh", "ReplicatorNoProgress", "ReplicatorFenced",
            "ReplicatorAbortsSpiking", "ReplicatorDataLoss"} <= names
    exported = exported_metric_names() | PROMETHEUS_OWN
    for rule in rules:
        used = metric_names(rule["expr"])
        assert used <= exported, f"{rule['alert']} uses {sorted(used - exported)}"
    tested = {t["alertname"] for case in yaml.safe_load(ALERTS_TEST.read_text())["tests"]
              for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert names == tested, f"alerts without a firing promtool test: {sorted(names - tested)}"


def test_exported_metrics_follow_prometheus_conventions():
    families = list(observer_after_traffic().metrics.registry.collect())
    for family in families:
        name = family.name
        assert name.startswith("replicator_")
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), name
        if re.search(r"duration|latency|timestamp|lag_seconds", name):
            assert name.endswith("_seconds"), f"{name}: time in seconds, named _seconds"
        assert not re.search(r"millis|_ms$|_kb|_mb", name), f"{name}: base units only"
        if name != "replicator_build":  # build info's labels are its payload (version)
            labels = {k for s in family.samples for k in s.labels} - {"le"}
            assert labels <= {"topic", "partition", "target_topic", "shard", "group", "state"}, f"{name}: {labels}"
