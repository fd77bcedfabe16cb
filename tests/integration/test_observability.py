"""Observability end to end: a real Prometheus server scrapes the real job on loopback.

The backlog is made stable, so equalities are exact rather than "close enough at some moment": the
first run plans one micro-batch of 60 offsets and then waits for a trigger interval of 10^12 ms
(Spark aligns processing-time triggers to multiples of the interval since the epoch: the next one
is in 2033). The clusters therefore hold still while Prometheus, the job's lag lookup, the test
and `replicator lag` all look at them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.kafka_helpers import (
    assert_identical,
    create_topic,
    end_offsets,
    fake_group_offsets,
    produce_transactional,
    read_all,
)
from tests.replicator_process import BIN, ReplicatorProcess, wait_until
from tests.unit.test_dashboard_alerts import DASHBOARD, dashboard_exprs, expand

PARTITIONS = 3
PER_PARTITION = 100
STEP_MS = 600_000  # record o of each partition is o * 10 minutes younger than the first
FIRST_BATCH = 20  # records per partition that exist when run 1 starts
JOB_ENV = {"REPLICATOR_METRICS_HOST": "127.0.0.1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusServer:
    """The Debian `prometheus` binary on loopback, scraping the targets given to `scrape()` every second."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.targets = workdir / "targets.json"
        self.proc: subprocess.Popen | None = None

    def start(self) -> PrometheusServer:
        binary = shutil.which("prometheus")
        assert binary, "the prometheus server is missing: `make debs` (or apt-get install prometheus) installs it"
        self.scrape()
        config = self.workdir / "prometheus.yml"
        config.write_text(json.dumps({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "replicator",
                                "file_sd_configs": [{"files": [str(self.targets)], "refresh_interval": "1s"}]}],
        }))
        log = open(self.workdir / "prometheus.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h",
             "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(self._ready, 60, "prometheus to be ready")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, \
            f"prometheus exited: {(self.workdir / 'prometheus.log').read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def scrape(self, *addresses: str) -> None:
        tmp = self.targets.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": list(addresses)}] if addresses else []))
        tmp.rename(self.targets)  # atomically: Prometheus watches the file

    def query(self, expr: str, at: float | None = None) -> tuple[float, dict[tuple, float]]:
        """Evaluation time and {sorted label items: value} of an instant query."""
        params = {"query": expr, **({"time": repr(at)} if at is not None else {})}
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=30) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        result = body["data"]["result"]
        if body["data"]["resultType"] == "scalar":
            return result[0], {(): float(result[1])}
        at = float(result[0]["value"][0]) if result else float(at or time.time())
        return at, {tuple(sorted(s["metric"].items())): float(s["value"][1]) for s in result}

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    if shutil.which("prometheus") is None and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-qq", "prometheus"], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    server = PrometheusServer(tmp_path_factory.mktemp("prometheus")).start()
    yield server
    server.stop()


def metrics_port(job: ReplicatorProcess) -> int:
    found: list[int] = []

    def bound() -> bool:
        m = re.search(r"metrics listening on 127\.0\.0\.1:(\d+)", job.log())
        if m:
            found.append(int(m.group(1)))
        return bool(m)

    wait_until(bound, 120, "the metrics endpoint", job)
    return found[0]


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def by_partition(series: dict[tuple, float]) -> dict[int, float]:
    return {int(dict(labels)["partition"]): v for labels, v in series.items()}


def lag_cli(sandbox, topic: str, name: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), "lag", "--source-bootstrap-servers", sandbox.source.bootstrap,
                           "--target-bootstrap-servers", sandbox.target.bootstrap, "--topics", topic,
                           "--name", name, *extra], capture_output=True, text=True, timeout=120)


def test_prometheus_sees_exact_lag_and_throughput(sandbox, prometheus, unique, tmp_path):
    src, dst = sandbox.source.bootstrap, sandbox.target.bootstrap
    topic, name = f"obs-{unique}", f"obs-{unique}"
    create_topic(src, topic, PARTITIONS, {"retention.ms": "-1"})
    base_ms = int(time.time() * 1000) - 3 * 86_400_000
    records = [(p, f"k{o}".encode(), b"v" * 100, None, base_ms + o * STEP_MS)
               for o in range(PER_PARTITION) for p in range(PARTITIONS)]
    # Run 1 copies what exists when it starts, in its one and only batch (a trigger interval that never
    # comes again); what is produced after that batch is a stable backlog.
    first = [r for r in records if r[4] < base_ms + FIRST_BATCH * STEP_MS]
    assert produce_transactional(src, topic, first, f"obs-producer-{unique}", per_txn=50) == len(first)

    # -- run 1: one batch, then a stable backlog ------------------------------------------------
    stalled_env = {**JOB_ENV, "REPLICATOR_TRIGGER_INTERVAL_MS": str(10**12),
                   "REPLICATOR_READINESS_WINDOW_SECONDS": "15"}
    with ReplicatorProcess(sandbox, topic, name, tmp_path / "run1.log", "--batch-duration-seconds", "5",
                           "--shards", "2", env=stalled_env) as job:
        port = metrics_port(job)
        instance = f"127.0.0.1:{port}"
        sel = f'{{instance="{instance}"}}'
        prometheus.scrape(instance)
        wait_until(lambda: prometheus.query(f"replicator_batches_total{sel} > 0")[1], 240, "the first batch", job)
        rest = records[len(first):]
        assert produce_transactional(src, topic, rest, f"obs-producer-{unique}", per_txn=50) == len(rest)
        source_end = end_offsets(src, topic, PARTITIONS)
        # The batch's transactions committed before its stats reached the driver (last_batch); a
        # lag lookup that starts after a lookup that itself started after that sees the final state.
        last_batch = prometheus.query(f"replicator_last_batch_timestamp_seconds{sel}")[1]
        _, first_lookup = _wait_refresh_after(prometheus, sel, max(last_batch.values()), job)
        at, _ = _wait_refresh_after(prometheus, sel, first_lookup, job)

        group = {p: o for (t, p), o in fake_group_offsets(dst, f"__replicator.{name}").items() if t == topic}
        assert sorted(group) == list(range(PARTITIONS))
        lag_records = by_partition(prometheus.query(f"replicator_lag_records{sel}", at)[1])
        assert lag_records == {p: source_end[p] - group[p] for p in range(PARTITIONS)}
        assert all(v > 0 for v in lag_records.values()), "a backlog exists"
        assert by_partition(prometheus.query(f"replicator_committed_offset{sel}", at)[1]) == group

        # Lag in seconds: the age, at the lookup, of the first committed source record not yet copied.
        source = read_all(src, topic, PARTITIONS)
        oldest_ms = {p: next(m.timestamp()[1] for m in source[p] if m.offset() >= group[p]) for p in group}
        refreshed = prometheus.query(f"replicator_lag_refresh_timestamp_seconds{sel}", at)[1]
        refreshed_at = next(iter(refreshed.values()))
        lag_seconds = by_partition(prometheus.query(f"replicator_lag_seconds{sel}", at)[1])
        for p in range(PARTITIONS):
            assert lag_seconds[p] == pytest.approx(refreshed_at - oldest_ms[p] / 1000, abs=1e-3)

        copied = {p: len(v) for p, v in read_all(dst, topic, PARTITIONS).items()}
        assert by_partition(prometheus.query(f"replicator_replicated_records_total{sel}", at)[1]) == copied
        assert list(prometheus.query(f"replicator_batches_total{sel}", at)[1].values()) == [1.0]
        # That batch's duration, from the same batch end (Spark's progress event).
        assert list(prometheus.query(f"replicator_batch_duration_seconds_count{sel}", at)[1].values()) == [1.0]

        # Stalled with a backlog: alive, but not ready once the readiness window has passed.
        assert http_status(f"http://{instance}/healthz") == 200
        wait_until(lambda: http_status(f"http://{instance}/readyz") == 503, 120, "readiness to drop", job)
        assert job.sigterm() == 0

    # -- `replicator lag` with the job stopped agrees with what Prometheus scraped -------------------
    out = lag_cli(sandbox, topic, name, "--format", "json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert {r["partition"]: r["lag_records"] for r in report["partitions"]} == lag_records
    assert report["lag_records"] == sum(lag_records.values())
    for r in report["partitions"]:
        assert r["committed_offset"] == group[r["partition"]]
        assert report["computed_at"] - r["lag_seconds"] == pytest.approx(oldest_ms[r["partition"]] / 1000, abs=1e-3)
    total = int(sum(lag_records.values()))
    assert lag_cli(sandbox, topic, name, "--max-lag", str(total - 1)).returncode == 1
    assert lag_cli(sandbox, topic, name, "--max-lag", str(total)).returncode == 0

    # -- run 2: catches up; lag returns to 0 and the counters add up to what was copied -----------------
    # Short batches: the micro-batch panels need batches that end while the test watches (300 s by default).
    with ReplicatorProcess(sandbox, topic, name, tmp_path / "run2.log", "--shards", "2", "--batch-duration-seconds",
                           "5", env=JOB_ENV) as job:
        port2 = metrics_port(job)
        instance2 = f"127.0.0.1:{port2}"
        sel2 = f'{{instance="{instance2}"}}'
        prometheus.scrape(instance2)
        at2: list[float] = []

        def offsets_reached_source_end() -> bool:
            t, committed = prometheus.query(f"replicator_committed_offset{sel2}")
            at2[:] = [t]
            return by_partition(committed) == source_end

        wait_until(offsets_reached_source_end, 240, "run 2 to commit up to the source's end", job)
        # Scrapes are batch-consistent: the sample that shows the final offsets also holds the records.
        copied_by_run2 = by_partition(prometheus.query(f"replicator_replicated_records_total{sel2}", at2[0])[1])
        on_target = {p: len(v) for p, v in read_all(dst, topic, PARTITIONS).items()}
        assert copied_by_run2 == {p: on_target[p] - copied[p] for p in range(PARTITIONS)}
        assert sum(on_target.values()) == len(records)

        wait_until(lambda: set(by_partition(prometheus.query(f"replicator_lag_records{sel2}")[1]).values()) == {0},
                   120, "the lag metric to return to 0", job)
        assert set(by_partition(prometheus.query(f"replicator_lag_seconds{sel2}")[1]).values()) == {0}
        group = {p: o for (t, p), o in fake_group_offsets(dst, f"__replicator.{name}").items() if t == topic}
        assert group == source_end
        wait_until(lambda: http_status(f"http://{instance2}/readyz") == 200, 120, "readiness", job)

        # Every dashboard query returns data from the live job through Prometheus; the per-group
        # panels have series only once an application consumer group exists, and this job has none.
        for expr in dashboard_exprs(json.loads(DASHBOARD.read_text())):
            if "replicator_group" in expr:
                continue
            query = expand(expr)
            wait_until(lambda q=query: bool(prometheus.query(q)[1]), 60, f"data for dashboard query {query}", job)
        assert job.sigterm() == 0

    out = lag_cli(sandbox, topic, name, "--max-lag", "0")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "total lag 0 offsets over 3 partitions" in out.stdout
    assert_identical(src, dst, topic, PARTITIONS)


def _wait_refresh_after(prometheus: PrometheusServer, sel: str, after: float,
                        job: ReplicatorProcess) -> tuple[float, float]:
    """Waits for a lag lookup that started after `after` (unix time); returns the evaluation time of
    a query that sees it and the lookup's start."""
    seen: list[float] = []

    def refreshed() -> bool:
        t, values = prometheus.query(f"replicator_lag_refresh_timestamp_seconds{sel}")
        if values and max(values.values()) > after:
            seen[:] = [t, max(values.values())]
            return True
        return False

    wait_until(refreshed, 120, "a lag lookup", job)
    return seen[0], seen[1]


def _metric_sum(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def test_a_quiet_source_after_a_burst_shows_every_copied_record_while_the_task_runs(sandbox, unique, tmp_path):
    """A shard task runs for minutes (batch_duration_seconds). Each burst below lands within a second
    of the previous report, the window in which a commit's stats used to wait for the next record."""
    from confluent_kafka import Producer

    src = sandbox.source.bootstrap
    topic = name = f"quiet-{unique}"
    create_topic(src, topic, 1, {"retention.ms": "-1"})
    producer = Producer({"bootstrap.servers": src, "linger.ms": 0})
    with ReplicatorProcess(sandbox, topic, name, tmp_path / "job.log", "--shards", "1", env=JOB_ENV) as job:
        url = f"http://127.0.0.1:{metrics_port(job)}/metrics"
        wait_until(lambda: "progress:" in job.log(), 240, "the job to run", job)
        for burst in range(1, 4):
            for i in range(10):
                producer.produce(topic, key=f"k{burst}-{i}".encode(), value=b"v", partition=0)
            assert producer.flush(30) == 0
            wait_until(lambda b=burst: _metric_sum(url, "replicator_replicated_records_total") == 10 * b,
                       60, f"burst {burst}'s records in the metrics", job, interval=0.05)
        # Still the first task: nothing above came from a batch's end.
        assert _metric_sum(url, "replicator_batches_total") == 0
    assert len(read_all(sandbox.target.bootstrap, topic, 1)[0]) == 30
