"""Failover as an application sees it: consumers read part of the data on the source and commit;
the source is lost; `replicator failover`; the same group ids consume on the target. Together they
read every source record exactly once. Then `run` refuses the old direction."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from replicator.sandbox.jars import classpath
from tests.index_helpers import committed_offsets
from tests.kafka_helpers import create_topic, end_offsets, produce_transactional
from tests.replicator_process import BIN, ReplicatorProcess, wait_until

PARTITIONS = 2


def _records(n: int) -> list[tuple]:
    base = int(time.time() * 1000) - 600_000
    return [(i % PARTITIONS, f"k{i % 31}".encode(), f"v-{i}".encode(), [("h", b"x")], base + i) for i in range(n)]


def _python_app(bootstrap: str, group: str, topic: str, limit: int | None) -> list[str]:
    """A confluent-kafka application: reads up to `limit` records (all when None), commits, leaves."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    c.subscribe([topic])
    out, eof, deadline = [], set(), time.monotonic() + 120
    while (limit is None or len(out) < limit) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:
                eof.add(m.partition())
                if limit is None and len(eof) == PARTITIONS:
                    break
            continue
        eof.discard(m.partition())
        out.append(m.value().decode())
        c.commit(message=m, asynchronous=False)
    c.close()
    return out


def _java_app(bootstrap: str, group: str, topic: str, limit: int | None) -> list[str]:
    """Kafka's own console consumer (one record per poll, so what it commits is what it printed)."""
    cmd = ["java", "-cp", classpath(), "org.apache.kafka.tools.consumer.ConsoleConsumer",
           "--bootstrap-server", bootstrap, "--topic", topic, "--group", group, "--timeout-ms", "15000",
           "--consumer-property", "max.poll.records=1", "--consumer-property", "auto.offset.reset=earliest",
           "--consumer-property", "isolation.level=read_committed",
           "--consumer-property", "enable.auto.commit=true", "--consumer-property", "auto.commit.interval.ms=100"]
    if limit is not None:
        cmd += ["--max-messages", str(limit)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return [line for line in proc.stdout.splitlines() if line.startswith("v-")]


def _replicator(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=600)


def test_failover_as_an_application_sees_it(sandbox, unique, tmp_path: Path):
    src, dst = sandbox.source.bootstrap, sandbox.target.bootstrap
    topic, name = f"fo-{unique}", f"fo-{unique}"
    create_topic(src, topic, PARTITIONS)
    committed = produce_transactional(src, topic, _records(3_000), f"s-{unique}", per_txn=100, abort_every=5)
    expected = {f"v-{i}" for i in range(3_000) if (i // 100 + 1) % 5}
    assert len(expected) == committed
    apps = {f"fo-{unique}-python": _python_app, f"fo-{unique}-java": _java_app}
    before = {g: app(src, g, topic, 700) for g, app in apps.items()}
    assert all(len(v) == 700 for v in before.values()), {g: len(v) for g, v in before.items()}
    source_positions = {g: committed_offsets(src, g, topic, PARTITIONS) for g in apps}

    conn = ["--source-bootstrap-servers", src, "--target-bootstrap-servers", dst, "--topics", topic, "--name", name]
    env = {"REPLICATOR_GROUP_SYNC_INTERVAL_SECONDS": "1", "REPLICATOR_GROUPS": f"fo-{unique}-.*"}
    with ReplicatorProcess(sandbox, topic, name, tmp_path / "job.log", "--shards", "1", env=env) as job:
        ends = end_offsets(src, topic, PARTITIONS)

        def synced() -> bool:
            fake = committed_offsets(dst, f"__replicator.{name}", topic, PARTITIONS)
            return fake == ends and all(
                committed_offsets(dst, g, topic, PARTITIONS).keys() == source_positions[g].keys() for g in apps)
        wait_until(synced, 300, "replication and group sync", job, interval=2)
        listed = _replicator("groups", *conn, "--format", "json")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        doc = json.loads(listed.stdout)
        assert doc["source_reachable"] and {g["group"] for g in doc["groups"]} == set(apps)
        ids = {c.name: AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(timeout=30).cluster_id
               for c in sandbox.clusters}
        assert doc["clusters"] == {role: {"bootstrap": getattr(sandbox, role).bootstrap, "cluster_id": ids[role]}
                                   for role in ("source", "target")}, doc["clusters"]
        assert all(g["state"] == "synced" and g["ahead"] == 0 for g in doc["groups"]), doc
        assert job.sigterm() == 0

    sandbox.source.stop()  # the source cluster is lost
    try:
        dry = _replicator("failover", *conn, "--dry-run", "--format", "json")
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert json.loads(dry.stdout)["marker"] is None
        out = _replicator("failover", *conn, "--format", "json")
        assert out.returncode == 0, out.stdout + out.stderr
        report = json.loads(out.stdout)
        assert report["marker"]["kind"] == "failover" and report["fenced_shards"] >= 1
        # The source is gone: no id for it, the target's as it was.
        assert report["clusters"]["source"]["cluster_id"] is None, report["clusters"]
        assert report["clusters"]["target"] == {"bootstrap": dst, "cluster_id": ids["target"]}, report["clusters"]
        assert {g["group"]: g["rpo_offsets"] for g in report["groups"]} == dict.fromkeys(apps, 0)

        # The same applications, same group ids, now on the target: every record exactly once.
        for group, app in apps.items():
            after = app(dst, group, topic, None)
            seen = before[group] + after
            assert len(seen) == len(set(seen)), f"{group}: {len(seen) - len(set(seen))} records read twice"
            assert set(seen) == expected, f"{group}: {len(expected - set(seen))} records never read"
    finally:
        sandbox.source.start()
        sandbox.source.wait_ready()
    # No split brain: with the old source back, the old direction refuses to start.
    refused = _replicator("run", *conn, "--metrics-port", "0", "--metrics-host", "127.0.0.1")
    assert refused.returncode == 1 and "promoted" in (refused.stdout + refused.stderr), refused.stderr[-2000:]


def test_failover_of_a_job_that_never_replicated_here_writes_nothing(sandbox, unique):
    """A mistyped --name in the middle of an outage: an error that says so, not a "failed over" that
    fenced nothing and moved no group while the real job copies on."""
    from confluent_kafka.admin import AdminClient

    from replicator.names import marker_topic

    name = f"never-{unique}"
    for dry in ([], ["--dry-run"]):
        proc = subprocess.run([str(BIN), "failover", "--source-bootstrap-servers", "127.0.0.1:1",
                               "--target-bootstrap-servers", sandbox.target.bootstrap, "--topics", ".*",
                               "--name", name, *dry], capture_output=True, text=True, timeout=180)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"no job named '{name}' replicated to it" in proc.stderr, proc.stderr
    topics = AdminClient({"bootstrap.servers": sandbox.target.bootstrap}).list_topics(timeout=30).topics
    assert marker_topic(name) not in topics, "a promotion marker was written for a job that is not there"
