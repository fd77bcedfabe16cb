"""`replicator lag` against the real clusters, with no job running: the target's offsets group and the
source's offsets are all it needs."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.kafka_helpers import commit_member_less, create_topic, produce_transactional
from tests.replicator_process import BIN


def lag(*args: str, config=None) -> subprocess.CompletedProcess:
    extra = ["--config", str(config)] if config else []
    return subprocess.run([str(BIN), "lag", *extra, *args], capture_output=True, text=True, timeout=180)


def commit_group(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Writes the fake group as the job would (offsets only; the metadata does not matter here)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        commit_member_less(consumer, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])
    finally:
        consumer.close()


@pytest.fixture
def replication(sandbox, unique, tmp_path):
    """Source topic A (3 partitions) half replicated, with an aborted transaction in the way, and
    source topic B never replicated (no target topic yet)."""
    src, dst = sandbox.source.bootstrap, sandbox.target.bootstrap
    a, b, name = f"lagcmd-{unique}-a", f"lagcmd-{unique}-b", f"lagcmd-{unique}"
    create_topic(src, a, 3)
    create_topic(src, b, 1)
    create_topic(dst, a, 3)
    base = int(time.time() * 1000) - 86_400_000  # a day old
    ts = {"first": base, "aborted": base + 10_000, "after_abort": base + 20_000}
    txn = f"lagcmd-producer-{unique}"
    # p0: offsets 0-9 records, 10 marker; p1: 0-3, 4 marker; p2: 0-2, 3 marker.
    first = [(0, None, b"x", None, ts["first"] + i) for i in range(10)] + \
            [(1, None, b"x", None, ts["first"] + i) for i in range(4)] + \
            [(2, None, b"x", None, ts["first"] + i) for i in range(3)]
    produce_transactional(src, a, first, txn, per_txn=100)
    # p0: 11-15 aborted, 16 abort marker; then 17-21 committed, 22 marker.
    produce_transactional(src, a, [(0, None, b"y", None, ts["aborted"] + i) for i in range(5)], txn, abort_every=1)
    produce_transactional(src, a, [(0, None, b"z", None, ts["after_abort"] + i) for i in range(5)], txn)
    produce_transactional(src, b, [(0, None, b"w", None, ts["first"] + i) for i in range(2)], txn)
    # Copied: p0 up to its first marker, p1 everything but its marker, p2 nothing yet.
    commit_group(dst, f"__replicator.{name}", {(a, 0): 10, (a, 1): 4})
    config = tmp_path / "replicator.yaml"
    config.write_text(f"source_bootstrap_servers: {src}\ntarget_bootstrap_servers: {dst}\n"
                      f"topics: lagcmd-{unique}-.*\nname: {name}\n")
    return {"a": a, "b": b, "name": name, "ts": ts, "config": config, "dst": dst}


def test_lag_per_partition_from_the_target_group(replication):
    r = replication
    out = lag("--format", "json", config=r["config"])
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    rows = {(x["topic"], x["partition"]): x for x in report["partitions"]}
    a, b = r["a"], r["b"]
    assert {k: (x["source_end_offset"], x["committed_offset"], x["lag_records"]) for k, x in rows.items()} == {
        (a, 0): (23, 10, 13),  # marker + aborted batch + marker + 5 records + marker
        (a, 1): (5, 4, 1),  # only the commit marker is left
        (a, 2): (4, -1, 4),  # nothing committed yet: lag from the log start
        (b, 0): (3, -1, 3),
    }
    assert report["lag_records"] == 21 and report["group"] == f"__replicator.{r['name']}"
    # Age: the oldest *committed* record still to copy; aborted records and markers do not count.
    age = {k: x["lag_seconds"] for k, x in rows.items()}
    now = report["computed_at"]
    assert age[(a, 0)] == pytest.approx(now - r["ts"]["after_abort"] / 1000, abs=1e-3)
    assert age[(a, 1)] == 0
    assert age[(a, 2)] == pytest.approx(now - r["ts"]["first"] / 1000, abs=1e-3)
    assert report["max_lag_seconds"] == pytest.approx(now - r["ts"]["first"] / 1000, abs=1e-3)


def test_table_and_thresholds(replication):
    r = replication
    out = lag(config=r["config"])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:2] == ["TOPIC", "PARTITION"]
    assert [ln.split()[:6] for ln in lines[1:5]] == [
        [r["a"], "0", r["a"], "23", "10", "13"], [r["a"], "1", r["a"], "5", "4", "1"],
        [r["a"], "2", r["a"], "4", "-", "4"], [r["b"], "0", r["b"], "3", "-", "3"]]
    assert lines[5].startswith("total lag 21 offsets over 4 partitions")

    over = lag("--max-lag", "20", config=r["config"])
    assert over.returncode == 1 and "over threshold: total lag 21 > 20" in over.stderr
    assert lag("--max-lag", "21", config=r["config"]).returncode == 0
    assert lag("--max-lag-seconds", "3600", config=r["config"]).returncode == 1
    assert lag("--max-lag-seconds", "864000", "--max-lag", "100", config=r["config"]).returncode == 0
    # Flags override the file, as for `run`: another group has no offsets at all.
    other = json.loads(lag("--format", "json", "--offsets-group", "nobody", config=r["config"]).stdout)
    assert other["lag_records"] == 23 + 5 + 4 + 3


def test_read_only(replication):
    """Looking never creates target topics or commits offsets."""
    r = replication
    assert lag(config=r["config"]).returncode == 0
    target = AdminClient({"bootstrap.servers": r["dst"]})
    assert r["b"] not in target.list_topics(timeout=30).topics


def test_errors_have_their_exit_codes(sandbox, tmp_path):
    out = lag("--source-bootstrap-servers", sandbox.source.bootstrap, "--target-bootstrap-servers",
              sandbox.target.bootstrap)
    assert out.returncode == 2 and "invalid configuration 'topics'" in out.stderr
    # Nothing listens on port 1 of loopback.
    out = lag("--source-bootstrap-servers", "127.0.0.1:1", "--target-bootstrap-servers", sandbox.target.bootstrap,
              "--topics", "x")
    assert out.returncode == 3 and "error: cannot reach the source cluster at 127.0.0.1:1: " in out.stderr
    out = lag("--source-bootstrap-servers", sandbox.source.bootstrap, "--target-bootstrap-servers", "127.0.0.1:1",
              "--topics", ".*")
    assert out.returncode == 3 and "error: cannot compute the lag: " in out.stderr
