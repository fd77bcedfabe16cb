"""Metrics observer, readiness and the HTTP endpoints, driven with the writer stats the job sends."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from replicator import config as config_mod
from replicator.commands.lag import _rows, _table
from replicator.ops.health import HealthServer
from replicator.ops.lag import PartitionLag
from replicator.ops.metrics import MetricsObserver

CFG = config_mod.load({"source_bootstrap_servers": "127.0.0.1:1", "target_bootstrap_servers": "127.0.0.1:2",
                       "topics": "orders.*", "replication_policy": "prefix", "source_alias": "east",
                       "readiness_window_seconds": "30"}, environ={})

BATCH = {
    "batch": 3, "records": 30, "bytes": 3000, "transactions": 2, "aborted": 1, "fenced": 0,
    "producer_recreations": 1, "data_loss_events": 0, "transaction_seconds": [0.2, 0.4],
    "latency_seconds": [1.5, 2.5, 0.02, -0.001],
    "partitions": {"orders|0": [20, 2000, 120, 1_700_000_000.5], "orders|1": [10, 1000, 61, 1_700_000_001.0]},
}


class _Query:
    def __init__(self) -> None:
        self.isActive = True
        self.recentProgress: list = []


class _Job:
    """What the observer reads of a running `Replicator` (no Spark in unit tests)."""

    def __init__(self) -> None:
        self.query = _Query()


def value(observer: MetricsObserver, name: str, **labels) -> float | None:
    return observer.metrics.registry.get_sample_value(name, labels)


def labels(partition: int) -> dict:
    return {"topic": "orders", "partition": str(partition), "target_topic": "east.orders"}


def test_batch_stats_become_counters_histograms_and_offsets():
    obs = MetricsObserver(CFG)
    obs.on_batch(BATCH)
    obs.on_batch({**BATCH, "partitions": {"orders|0": [5, 500, 125, 1_700_000_002.0]}, "records": 5})
    # The end of a micro-batch: the shard tasks reported their transactions live already.
    obs.on_batch({"batch": 3, "batches": 1, "batch_records": 35})
    assert value(obs, "replicator_replicated_records_total", **labels(0)) == 25
    assert value(obs, "replicator_replicated_records_total", **labels(1)) == 10
    assert value(obs, "replicator_replicated_bytes_total", **labels(0)) == 2500
    assert value(obs, "replicator_committed_offset", **labels(0)) == 125
    assert value(obs, "replicator_committed_offset", **labels(1)) == 61
    assert value(obs, "replicator_last_commit_timestamp_seconds", **labels(0)) == 1_700_000_002.0
    assert value(obs, "replicator_transactions_committed_total") == 4
    assert value(obs, "replicator_transactions_aborted_total") == 2
    assert value(obs, "replicator_producer_recreations_total") == 2
    assert value(obs, "replicator_producer_fenced_total") == 0
    assert value(obs, "replicator_batches_total") == 1
    assert value(obs, "replicator_batch_records_sum") == 35
    assert value(obs, "replicator_transaction_duration_seconds_count") == 4
    # A clock step between hosts can make a latency sample negative: counted as 0, not dropped.
    assert value(obs, "replicator_replication_latency_seconds_count") == 8
    assert value(obs, "replicator_replication_latency_seconds_bucket", le="0.005") == 2
    assert value(obs, "replicator_replication_latency_seconds_bucket", le="2.5") == 8


def test_rare_batch_events_are_logged_with_metric_names(caplog):
    obs = MetricsObserver(CFG)
    with caplog.at_level("WARNING", logger="replicator.metrics"):
        obs.on_batch(BATCH)
        obs.on_batch({**BATCH, "aborted": 0, "producer_recreations": 0})
    [record] = caplog.records
    assert record.getMessage() == "batch 3: transactions_aborted=1, producer_recreations=1"
    assert record.replicator_transactions_aborted_total == 1
    assert record.replicator_producer_recreations_total == 1


def test_lag_gauges_follow_the_partitions_looked_up(monkeypatch):
    monkeypatch.setattr("replicator.ops.metrics.with_ages", lambda cfg, lags, **kw: lags)  # ages: integration tests
    obs = MetricsObserver(CFG)
    caught_up = [PartitionLag("orders", "east.orders", p, 100, 100, 0) for p in range(3)]
    obs.on_lag(caught_up)
    assert [value(obs, "replicator_lag_records", **labels(p)) for p in range(3)] == [0, 0, 0]
    assert value(obs, "replicator_lag_seconds", **labels(2)) == 0
    refreshed = value(obs, "replicator_lag_refresh_timestamp_seconds")
    assert refreshed > 0
    # A failed lookup (empty list) keeps the last values rather than pretending there is no lag.
    obs.on_lag([])
    assert value(obs, "replicator_lag_records", **labels(0)) == 0
    assert value(obs, "replicator_lag_refresh_timestamp_seconds") == refreshed
    # A partition leaving the selection leaves the metrics too.
    obs.on_lag(caught_up[:1])
    assert value(obs, "replicator_lag_records", **labels(2)) is None
    assert value(obs, "replicator_lag_seconds", **labels(2)) is None
    # Unchanged values are not set again, changed ones are, whatever came in between.
    behind = [PartitionLag("orders", "east.orders", 0, 105, 100, 0, oldest_timestamp_ms=-1)]
    for lags, want in ((behind, 5), (behind, 5), (caught_up[:1], 0), (caught_up[:1], 0), (behind, 5)):
        obs.on_lag(lags)
        assert value(obs, "replicator_lag_records", **labels(0)) == want


def test_lag_gauges_when_the_lookup_hands_back_the_same_objects(monkeypatch):
    """The lookup reuses a caught-up partition's object between ticks; the observer skips those, and
    must still see every change of value, of age and of the selection itself."""
    monkeypatch.setattr("replicator.ops.metrics.with_ages", lambda cfg, lags, **kw: lags)
    obs = MetricsObserver(CFG)
    lags = [PartitionLag("orders", "east.orders", p, 100, 100, 0, -1) for p in range(3)]
    obs.on_lag(lags)
    obs.on_lag(list(lags))
    assert [value(obs, "replicator_lag_records", **labels(p)) for p in range(3)] == [0, 0, 0]
    # One partition falls behind: a new object in the same place.
    lags[1] = PartitionLag("orders", "east.orders", 1, 107, 100, 0, oldest_timestamp_ms=1_000)
    obs.on_lag(list(lags))
    assert value(obs, "replicator_lag_records", **labels(1)) == 7 and obs.lag_total == 7
    first_age = value(obs, "replicator_lag_seconds", **labels(1))
    # The same lagging object again: its age still grows with the clock.
    monkeypatch.setattr("replicator.ops.metrics.time.time", lambda: 2e9)
    obs.on_lag(list(lags))
    assert value(obs, "replicator_lag_seconds", **labels(1)) == 2e9 - 1 > first_age
    # Caught up again.
    lags[1] = PartitionLag("orders", "east.orders", 1, 107, 107, 0, -1)
    obs.on_lag(list(lags))
    assert value(obs, "replicator_lag_records", **labels(1)) == 0 and obs.lag_total == 0
    # As many partitions, but another topic's in the last place: the old one's gauges go.
    other = PartitionLag("payments", "east.payments", 0, 3, 0, 0, oldest_timestamp_ms=1_000)
    obs.on_lag([*lags[:2], other])
    assert value(obs, "replicator_lag_records", **labels(2)) is None
    assert value(obs, "replicator_lag_records", topic="payments", partition="0", target_topic="east.payments") == 3
    assert obs.lag_total == 3


def test_deleted_source_topics_are_counted():
    obs = MetricsObserver(CFG)
    obs.on_topic_deleted("orders")
    assert value(obs, "replicator_source_topics_deleted_total", topic="orders") == 1


def test_partition_lag_records_and_seconds():
    fresh = PartitionLag("t", "t", 0, source_end=50, committed=-1, log_start=10)
    assert fresh.records == 40 and fresh.resume == 10
    assert fresh.seconds(1000.0) is None  # lagging, timestamp not looked up
    aged = PartitionLag("t", "t", 0, 50, 20, 0, oldest_timestamp_ms=990_500)
    assert aged.records == 30 and aged.seconds(1000.0) == pytest.approx(9.5)
    # Offsets left are markers or aborted records only: nothing committed waits.
    assert PartitionLag("t", "t", 0, 50, 48, 0, oldest_timestamp_ms=-1).seconds(1000.0) == 0
    assert PartitionLag("t", "t", 0, 50, 50, 0).seconds(1000.0) == 0


def test_readiness_needs_a_running_query_and_recent_progress_or_caught_up(monkeypatch):
    # Ages are read from the source cluster (integration tests); here only the offsets matter.
    monkeypatch.setattr("replicator.ops.metrics.with_ages", lambda cfg, lags, **kw: lags)
    obs = MetricsObserver(CFG)
    assert obs.readiness() == (False, "the streaming query has not started yet")
    job = _Job()
    obs.on_start(job)
    ready, reason = obs.readiness()
    assert not ready and "no micro-batch committed in the last 30s" in reason and "unknown" in reason
    obs.on_lag([PartitionLag("orders", "east.orders", 0, 100, 100, 0)])
    assert obs.readiness() == (True, "caught up")
    obs.on_lag([PartitionLag("orders", "east.orders", 0, 100, 40, 0, oldest_timestamp_ms=-1)])
    assert obs.readiness()[0] is False
    obs.on_batch(BATCH)
    assert obs.readiness()[0] is True
    assert value(obs, "replicator_ready") == 1
    job.query.isActive = False
    assert obs.readiness() == (False, "the streaming query is not active")
    job.query.isActive = True
    obs.on_stop()
    assert obs.readiness() == (False, "stopping")
    assert value(obs, "replicator_ready") == 0


def test_batch_durations_come_from_batch_ends_only():
    obs = MetricsObserver(CFG)
    obs.on_batch({"batch": 1, "batches": 1, "batch_records": 10, "batch_seconds": 2.5})
    obs.on_batch({"records": 4, "transactions": 1})  # live stats of running tasks: no batch ended
    obs.on_batch({"batch": 2, "batches": 1, "batch_records": 0, "batch_seconds": 0.1})
    assert value(obs, "replicator_batch_duration_seconds_count") == 2
    assert value(obs, "replicator_batch_duration_seconds_sum") == pytest.approx(2.6)
    assert value(obs, "replicator_batches_total") == 2


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_http_endpoints_serve_metrics_health_and_readiness():
    obs = MetricsObserver(CFG)
    obs.on_batch(BATCH)
    server = HealthServer("127.0.0.1", 0, obs.metrics.exposition, obs.readiness).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        status, ctype, body = _get(base + "/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=")
        families = {f.name: f for f in text_string_to_metric_families(body)}
        records = [s for s in families["replicator_replicated_records"].samples if s.name.endswith("_total")]
        assert {(s.labels["partition"], s.value) for s in records} == {("0", 20.0), ("1", 10.0)}
        assert families["replicator_build_info"].samples[0].labels["version"]
        assert not [n for n in body.splitlines() if "_created" in n]
        assert _get(base + "/healthz")[:1] == (200,)
        status, _, body = _get(base + "/readyz")
        assert status == 503 and body.startswith("not ready: the streaming query has not started")
        obs.on_start(_Job())
        status, _, body = _get(base + "/readyz")
        assert status == 200 and body.startswith("ready: a micro-batch committed")
        assert _get(base + "/nope")[0] == 404
    finally:
        server.close()


def test_port_in_use_is_a_clear_error():
    first = HealthServer("127.0.0.1", 0, lambda: b"", lambda: (True, ""))
    try:
        with pytest.raises(OSError, match=f"cannot serve metrics on 127.0.0.1:{first.port}"):
            HealthServer("127.0.0.1", first.port, lambda: b"", lambda: (True, ""))
    finally:
        first.close()


def test_metrics_host_option():
    assert config_mod.load({"metrics_host": "127.0.0.1", **_required()}, environ={}).metrics_host == "127.0.0.1"
    assert config_mod.load(_required(), environ={}).metrics_host == "0.0.0.0"
    with pytest.raises(config_mod.ConfigError, match="metrics_host"):
        config_mod.load({"metrics_host": "a b", **_required()}, environ={})


def _required() -> dict:
    return {"source_bootstrap_servers": "h:1", "target_bootstrap_servers": "h:2", "topics": "t"}


def test_lag_table_lists_every_partition():
    lags = [PartitionLag("orders", "east.orders", 0, 100, 40, 0, oldest_timestamp_ms=990_000),
            PartitionLag("orders", "east.orders", 1, 7, -1, 0)]
    rows = _rows(lags, 1000.0)
    assert rows[0]["lag_records"] == 60 and rows[0]["lag_seconds"] == pytest.approx(10.0)
    assert rows[1]["lag_records"] == 7 and rows[1]["lag_seconds"] is None
    lines = _table(rows).splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "TARGET", "TOPIC", "SOURCE", "END", "COMMITTED",
                                "LAG", "RECORDS", "LAG", "SECONDS"]
    assert lines[1].split() == ["orders", "0", "east.orders", "100", "40", "60", "10.0"]
    assert lines[2].split() == ["orders", "1", "east.orders", "7", "-", "7", "?"]
