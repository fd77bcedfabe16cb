"""The cluster behind an address is pinned (issue 50): a target or source replaced by a freshly
formatted cluster at the same address stops the running job, a restart refuses before writing a
record, and --accept-target-cluster-id moves the job to a new target deliberately, once."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from replicator.sandbox import Sandbox
from replicator.sandbox.cluster import _port_shift, port_open
from tests.engine_checks import PARTITIONS, caught_up, sample_records
from tests.kafka_helpers import create_topic, end_offsets, produce_records
from tests.replicator_process import ReplicatorProcess, wait_until

RECORDS = 2_000
# The driver compares the clusters' ids every refresh_topics_interval_seconds (10 s): the promise is
# a stop within a minute of the new cluster answering.
DETECTED_WITHIN_S = 60
# Its own pair of clusters: the tests format fresh ones at these addresses (+ 50, + 60, + 70, + 80..111
# and + 120 are other tests' pairs).
SHIFT = 30


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    box = Sandbox(root=tmp_path_factory.mktemp("identity"), port_shift=_port_shift() + SHIFT)
    box.up(fresh=True)
    yield box
    box.down()


def _cluster_id(bootstrap: str) -> str:
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).cluster_id


def _produce(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    produce_records(producer, topic, sample_records(n))
    assert producer.flush(30) == 0


def _records(bootstrap: str) -> dict[str, int]:
    """Every topic's records (end offsets, uncommitted included) but the brokers' own."""
    topics = {name: len(t.partitions) for name, t in
              AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics.items()
              if name not in ("__consumer_offsets", "__transaction_state")}
    return {name: sum(end_offsets(bootstrap, name, n, committed=False).values()) for name, n in topics.items()}


def _replicated(pair, topic: str, name: str, log) -> ReplicatorProcess:
    job = ReplicatorProcess(pair, topic, name, log).start()
    wait_until(caught_up(pair, topic, f"__replicator.{name}"), 240, "the job to copy every record", job)
    return job


def _refused(pair, topic: str, name: str, log, *extra: str) -> str:
    """A restart that must exit 1 before copying: returns its log."""
    job = ReplicatorProcess(pair, topic, name, log, *extra).start()
    try:
        code = job.wait(180)
    finally:
        job.sigkill()
    assert code == 1, job.tail()
    return job.log()


def _replace(cluster) -> None:
    """A freshly formatted cluster (a new id) at the same address, as a rebuilt one would be."""
    cluster.kill()
    # A killed JVM's main thread can be reaped while its other threads still hold the listening sockets.
    wait_until(lambda: not port_open(cluster.port) and not port_open(cluster.controller_port), 30,
               f"the killed {cluster.name} broker's ports to close", interval=0.2)
    cluster.start(fresh=True)


def test_a_replaced_target_stops_the_job_a_restart_refuses_and_the_move_is_accepted_once(pair, unique, tmp_path):
    topic, name = f"pin-t-{unique}", f"pin-t-{unique}"
    create_topic(pair.source.bootstrap, topic, PARTITIONS)
    _produce(pair.source.bootstrap, topic, RECORDS)
    old = _cluster_id(pair.target.bootstrap)
    job = _replicated(pair, topic, name, tmp_path / "job.log")
    try:
        _replace(pair.target)
        answering = time.monotonic()
        new = _cluster_id(pair.target.bootstrap)
        assert new != old
        code = job.wait(DETECTED_WITHIN_S + 30)
        took = time.monotonic() - answering
    finally:
        job.sigkill()
    log = job.log()
    assert code == 1, log[-3000:]
    assert took <= DETECTED_WITHIN_S, f"the job stopped {took:.0f} s after the new target answered"
    changed = [line for line in log.splitlines() if f"is now cluster {new}, not cluster {old}" in line]
    assert len(changed) == 1 and "--accept-target-cluster-id" in changed[0], log[-3000:]

    log = _refused(pair, topic, name, tmp_path / "restart.log")
    line = next(line for line in log.splitlines() if "ERROR replicator.job" in line)
    assert f"is cluster {new}, but job {name!r} copies into cluster {old}" in line, line
    assert f"--accept-target-cluster-id {new}" in line, line
    on_new = _records(pair.target.bootstrap)
    assert topic not in on_new, f"the refused start created the topic on the new target: {on_new}"
    assert sum(on_new.values()) == 0, f"records on the new target: {on_new}"

    moved = ReplicatorProcess(pair, topic, name, tmp_path / "moved.log", "--accept-target-cluster-id", new).start()
    try:
        wait_until(caught_up(pair, topic, f"__replicator.{name}"), 240, "the accepted target to get every record",
                   moved)
        assert moved.sigterm() == 0
    finally:
        moved.sigkill()
    assert f"accepting target cluster {new}" in moved.log()
    assert sum(end_offsets(pair.target.bootstrap, topic, PARTITIONS).values()) >= RECORDS

    # Accepted once: pinned, the next start needs no flag.
    again = ReplicatorProcess(pair, topic, name, tmp_path / "again.log").start()
    try:
        wait_until(lambda: re.search(r"progress: \d+ records copied", again.log()), 240, "the job to run", again)
        assert again.sigterm() == 0
    finally:
        again.sigkill()


def test_a_replaced_source_stops_the_job_and_a_restart_refuses_without_copying(pair, unique, tmp_path):
    topic, name = f"pin-s-{unique}", f"pin-s-{unique}"
    create_topic(pair.source.bootstrap, topic, PARTITIONS)
    _produce(pair.source.bootstrap, topic, RECORDS)
    old = _cluster_id(pair.source.bootstrap)
    job = _replicated(pair, topic, name, tmp_path / "job.log")
    try:
        _replace(pair.source)
        answering = time.monotonic()
        # The rebuilt source holds the topic again, with other records at the same offsets.
        create_topic(pair.source.bootstrap, topic, PARTITIONS)
        _produce(pair.source.bootstrap, topic, RECORDS // 2)
        new = _cluster_id(pair.source.bootstrap)
        code = job.wait(DETECTED_WITHIN_S + 30)
        took = time.monotonic() - answering
    finally:
        job.sigkill()
    log = job.log()
    assert code == 1, log[-3000:]
    assert took <= DETECTED_WITHIN_S, f"the job stopped {took:.0f} s after the new source answered"
    assert sum(1 for line in log.splitlines() if f"is now cluster {new}, not cluster {old}" in line) == 1, log[-3000:]
    copied = end_offsets(pair.target.bootstrap, topic, PARTITIONS)

    log = _refused(pair, topic, name, tmp_path / "restart.log")
    line = next(line for line in log.splitlines() if "ERROR replicator.job" in line)
    assert f"is cluster {new}" in line and f"records copying from cluster {old}" in line, line
    assert end_offsets(pair.target.bootstrap, topic, PARTITIONS) == copied, "the refused start copied records"
