"""Scale-out for real: the replicator on a Spark standalone cluster (master + 2 workers on loopback)
loses a worker, with its executor and Python workers, in the middle of replication and stays exact.

The driver runs here in client mode (`--master spark://...`); shard copies run on executors the
workers spawned. The worker is killed while its executor's task holds its shard's transaction open
on the target (seen on the target's coordinator, the worker frozen meanwhile); Spark retries the task
on the surviving executor, whose producer takes the same transactional id and aborts the dead one's
transaction, so `replicator verify` must find no duplicate, loss, reordering or open transaction.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import yaml
from confluent_kafka import Producer
from kafka import KafkaAdminClient

from tests.kafka_helpers import (
    assert_identical,
    create_topic,
    end_offsets,
    fake_group_offsets,
    produce_records,
    produce_transactional,
)
from tests.replicator_process import ReplicatorProcess, wait_until
from tests.spark_standalone import LOOPBACK, SPARK_HOME, SparkStandalone, Task

BIN = Path(sys.executable).with_name("replicator")
PARTITIONS = 8
WARMUP = 24_000  # copied while the executors start; one transaction in six aborted
BURST = 200_000  # preloaded in one held transaction, made visible at once when both executors are up


def records(n: int, start: int) -> list[tuple]:
    # Recent timestamps: the broker refuses records too far in the future, retention deletes old ones.
    base_ts = int(time.time() * 1000) - 600_000 - start
    return [(i % PARTITIONS, None if i % 11 == 0 else f"k{i % 101}".encode(), f"v{i}".encode() + bytes(i % 40),
             [("seq", str(i).encode())] if i % 2 else None, base_ts + i) for i in range(start, start + n)]


def feed(bootstrap: str, topic: str, unique: str, stop: threading.Event, committed: list[int],
         errors: list[BaseException]) -> None:
    """Keeps the source moving during the run, with every third transaction aborted."""
    start = 10_000_000
    try:
        while not stop.is_set():
            committed[0] += produce_transactional(bootstrap, topic, records(600, start), f"bg-{unique}",
                                                  per_txn=200, abort_every=3)
            start += 600
            time.sleep(0.5)
    except BaseException as e:  # noqa: BLE001 - handed to the test, which fails on it
        errors.append(e)


def held_transaction(bootstrap: str, topic: str, recs: list[tuple], txn_id: str) -> Producer:
    """Writes `recs` in one transaction left open: read_committed readers (the job) see nothing from
    its first offset on until it is committed."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 10,
                         "transaction.timeout.ms": 600_000})
    producer.init_transactions(60)
    producer.begin_transaction()
    produce_records(producer, topic, recs)
    producer.flush(60)  # before the commit: see the INVALID_TXN_STATE quirk in kafka_helpers
    return producer


@pytest.fixture
def cluster(tmp_path: Path):
    spark = SparkStandalone(tmp_path / "spark", workers=2, cores=1, memory="1g")
    try:
        yield spark.start()
    finally:
        spark.stop()


def caught_up(bootstrap_source: str, bootstrap_target: str, topic: str, group: str):
    def check() -> bool:
        ends = end_offsets(bootstrap_source, topic, PARTITIONS)
        done = fake_group_offsets(bootstrap_target, group)
        return all(done.get((topic, p), -1) == ends[p] for p in range(PARTITIONS))
    return check


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def open_shards(admin: KafkaAdminClient, name: str) -> set[int]:
    """Shards whose transaction the target's coordinator holds open (records written, no marker yet)."""
    prefix = f"{name}-shard-"
    ids = [t.transactional_id for rows in admin.list_transactions().values() for t in rows
           if t.transactional_id.startswith(prefix)]
    described = admin.describe_transactions(ids) if ids else {}
    return {int(txn_id[len(prefix):]) for txn_id, d in described.items() if d.state.value == "Ongoing"}


def kill_a_worker_mid_transaction(cluster: SparkStandalone, shards_open: Callable[[], set[int]]
                                  ) -> tuple[int, list[int], list[Task]] | None:
    """SIGKILLs a worker whose executor's task holds an open transaction on the target, or returns
    None. The worker is frozen (SIGSTOP) while its executor's log and the target are read, so its task
    cannot finish before the kill. The planner sends one task per shard in shard order, so in a
    micro-batch of every shard (checked by the test afterwards) task index i copies shard i."""
    for n in (0, 1):
        if all(t.finished for t in cluster.tasks(n)):
            continue
        daemon = cluster.worker(n)
        daemon.signal_tree(signal.SIGSTOP)
        try:
            in_flight = [t for t in cluster.tasks(n) if not t.finished]
            if {t.index for t in in_flight} & shards_open():
                return n, daemon.kill(), in_flight
        finally:
            daemon.signal_tree(signal.SIGCONT)
    return None


def test_worker_killed_mid_run_on_a_standalone_cluster_stays_exact(sandbox, cluster, unique, tmp_path):
    src, dst = sandbox.source.bootstrap, sandbox.target.bootstrap
    topic, name = f"scale-{unique}", f"scale-{unique}"
    group = f"__replicator.{name}"
    create_topic(src, topic, PARTITIONS)
    preloaded = produce_transactional(src, topic, records(WARMUP, 0), f"pre-{unique}", per_txn=2_000,
                                      abort_every=6)
    burst = held_transaction(src, topic, records(BURST, WARMUP), f"burst-{unique}")
    config = tmp_path / "replicator.yaml"
    # Everything on loopback; one 1-core executor per worker; Spark retries a task lost with its executor.
    config.write_text(yaml.safe_dump({"spark": {
        "spark.driver.host": LOOPBACK, "spark.driver.bindAddress": LOOPBACK,
        "spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "2",
        "spark.task.maxFailures": "4"}}))
    env = {"SPARK_LOCAL_IP": LOOPBACK, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable}
    txn_admin = KafkaAdminClient(bootstrap_servers=dst)

    stop, fed, feed_errors = threading.Event(), [0], []
    feeder = threading.Thread(target=feed, args=(src, topic, unique, stop, fed, feed_errors))
    feeder.start()
    with ReplicatorProcess(sandbox, topic, name, tmp_path / "job.log", "--config", str(config), "--master",
                           cluster.url, "--shards", "2", "--batch-duration-seconds", "5", env=env) as job:
        try:
            wait_until(lambda: "progress:" in job.log(), 240, "the job to run", job)
            # One application holding an executor on each worker; the warm-up records are copied.
            wait_until(lambda: all(cluster.worker_state(n)["coresused"] == 1 for n in (0, 1)), 240,
                       "an executor on each worker", job)
            assert [a["name"] for a in cluster.state()["activeapps"]] == [f"replicator-{name}"]
            wait_until(lambda: fake_group_offsets(dst, group), 240, "the warm-up records to be copied", job)
            # The burst becomes visible at once: a backlog the shards copy in large catch-up
            # transactions, which stay open long enough to be caught by the kill below.
            burst.commit_transaction(60)
            preloaded += BURST
            # Both executors run shard copies.
            wait_until(lambda: all(cluster.tasks(n) for n in (0, 1)), 240, "tasks on both workers", job)

            outcome: list[tuple[int, list[int], list[Task]] | None] = [None]

            def killed() -> bool:
                outcome[0] = kill_a_worker_mid_transaction(cluster, lambda: open_shards(txn_admin, name))
                return outcome[0] is not None
            wait_until(killed, 240, "a worker whose task holds an open transaction on the target", job,
                       interval=0.2)
            assert outcome[0] is not None
            victim, pids, lost = outcome[0]
            survivor = 1 - victim
            # The worker JVM, its executor JVM and the executor's Python workers: all gone.
            assert len(pids) >= 3 and not [p for p in pids if running(p)], pids
            wait_until(lambda: cluster.worker_state(victim)["state"] == "DEAD", 120, "the master to see the loss",
                       job)
            wait_until(lambda: "Lost executor" in job.log(), 120, "the driver to see the executor lost", job)
            # Each task lost with the executor is attempted again on the surviving worker.
            retried = {(t.stage, t.index, t.attempt + 1) for t in lost}
            wait_until(lambda: retried <= {(t.stage, t.index, t.attempt) for t in cluster.tasks(survivor)}, 240,
                       f"the lost tasks {lost} to be retried on the surviving worker", job)
            # Replication carries on there alone, with the feeder still producing.
            done_before = sum(t.finished for t in cluster.tasks(survivor))
            wait_until(lambda: sum(t.finished for t in cluster.tasks(survivor)) >= done_before + 8, 240,
                       "eight more tasks on the surviving worker", job)
        finally:
            stop.set()
            feeder.join()
            txn_admin.close()
        assert not feed_errors, feed_errors
        wait_until(caught_up(src, dst, topic, group), 300, "catch-up after the worker loss", job)
        assert job.sigterm() == 0
    assert "stopped cleanly" in job.log()
    # The micro-batch the kill hit had a task for every shard: the lost task was the open transaction's.
    stage = lost[0].stage
    assert {t.index for n in (0, 1) for t in cluster.tasks(n) if t.stage == stage} == {0, 1}

    verify = subprocess.run([str(BIN), "verify", "--source-bootstrap-servers", src, "--target-bootstrap-servers",
                             dst, "--topics", topic, "--name", name, "--format", "json"],
                            capture_output=True, text=True, timeout=300)
    report = json.loads(verify.stdout)
    assert verify.returncode == 0, (verify.stderr, report["violations"])
    assert report["ok"] is True and report["violations"] == []
    # The dead executor's open transaction was fenced by its retry: nothing open or hanging is left.
    assert report["open_transactions"] == [] and report["hanging_transactions"] == []
    assert fed[0] > 0
    assert report["totals"]["source_records"] == preloaded + fed[0]
    assert assert_identical(src, dst, topic, PARTITIONS) == preloaded + fed[0]
