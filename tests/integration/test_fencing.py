"""Start-up fencing on real brokers: every earlier writer of the job's transactional ids is fenced
before the first record moves, including ones the fake group cannot name."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition

from replicator.config import ReplicatorConfig
from replicator.engine import fencing
from replicator.engine.transactional_ids import FenceError
from replicator.offsets import CommitMetadata
from tests.kafka_helpers import assert_identical, create_topic, end_offsets, fake_group_offsets
from tests.replicator_process import ReplicatorProcess, wait_until


def open_transaction(bootstrap: str, txn_id: str, topic: str, group: str | None = None,
                     metadata: CommitMetadata | None = None) -> Producer:
    """A writer of `txn_id` left with an open transaction on `topic` (a zombie or a killed run).
    With `group`, it first commits an offset with `metadata`, as a shard of that job would."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 600_000})
    producer.init_transactions(30)
    if group is not None:
        from confluent_kafka import Consumer

        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        producer.begin_transaction()
        producer.produce(topic, b"copied", partition=0)
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1, metadata=metadata.encode())],
                                             reader.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        reader.close()
    producer.begin_transaction()
    producer.produce(topic, b"left open", partition=0)
    producer.flush(30)
    return producer


def assert_fenced(zombie: Producer, bootstrap: str, topic: str) -> None:
    lso = end_offsets(bootstrap, topic, 1, committed=True)
    hw = end_offsets(bootstrap, topic, 1, committed=False)
    assert lso == hw, "the earlier writer's transaction is still open: read_committed readers are stalled"
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)


def test_a_layout_killed_before_its_first_commit_is_fenced(sandbox, unique):
    """A run with 5 shards died before committing anything, so the fake group records no layout;
    the coordinators' transaction listing still names its ids."""
    name, topic = f"fence-nc-{unique}", f"fence-nc-{unique}"
    create_topic(sandbox.target.bootstrap, topic)
    zombie = open_transaction(sandbox.target.bootstrap, f"{name}-shard-4", topic)
    cfg = ReplicatorConfig(name=name, shards=2, target_bootstrap_servers=sandbox.target.bootstrap)
    assert fencing.fence_previous_layouts(cfg) >= 3
    assert_fenced(zombie, sandbox.target.bootstrap, topic)


def test_a_renamed_job_fences_the_ids_of_its_old_name(sandbox, unique):
    """`--name` changed, `--offsets-group` kept: the group's metadata names the old job."""
    old, new, group, topic = f"old-{unique}", f"new-{unique}", f"grp-{unique}", f"fence-rn-{unique}"
    create_topic(sandbox.target.bootstrap, topic)
    meta = CommitMetadata("src", topic, 1, 0, 0, 0, old)
    zombie = open_transaction(sandbox.target.bootstrap, f"{old}-shard-0", topic, group, meta)
    cfg = ReplicatorConfig(name=new, offsets_group=group, shards=1,
                           target_bootstrap_servers=sandbox.target.bootstrap)
    fencing.fence_previous_layouts(cfg)
    assert_fenced(zombie, sandbox.target.bootstrap, topic)


def test_a_run_killed_mid_commit_restarts_without_waiting_for_its_transaction(sandbox, unique):
    """Killed after sending its offsets to the transaction and before committing: the group's stable
    offsets wait for that transaction (here up to its 10-minute timeout). Start-up fences the
    current layout before it reads the group, so it aborts the transaction instead of waiting."""
    name, topic = f"fence-mc-{unique}", f"fence-mc-{unique}"
    create_topic(sandbox.target.bootstrap, topic)
    group = f"__replicator.{name}"
    zombie = open_transaction(sandbox.target.bootstrap, f"{name}-shard-0", topic)
    from confluent_kafka import Consumer

    reader = Consumer({"bootstrap.servers": sandbox.target.bootstrap, "group.id": group})
    meta = CommitMetadata("src", topic, 1, 0, 0, 0, name)
    zombie.send_offsets_to_transaction([TopicPartition(topic, 0, 7, metadata=meta.encode())],
                                       reader.consumer_group_metadata(), 30)
    reader.close()
    cfg = ReplicatorConfig(name=name, shards=1, target_bootstrap_servers=sandbox.target.bootstrap)
    # The unfixed order read the group first and raised when its 60 s read limit ran out.
    fencing.fence_previous_layouts(cfg)
    assert_fenced(zombie, sandbox.target.bootstrap, topic)
    assert (topic, 0) not in fake_group_offsets(sandbox.target.bootstrap, group), "the aborted offsets were kept"


def test_a_fence_the_broker_refuses_stops_the_start(sandbox, unique):
    """Any id that cannot be fenced stops pre-flight with the ids and the broker's reason. The
    transaction timeout here is above the broker's transaction.max.timeout.ms (15 min), which config
    validation normally refuses: it makes init_transactions() fail for every id."""
    cfg = ReplicatorConfig(name=f"fence-fail-{unique}", shards=2, transaction_timeout_ms=900_001,
                           target_bootstrap_servers=sandbox.target.bootstrap)
    with pytest.raises(FenceError) as e:
        fencing.fence_previous_layouts(cfg)
    assert f"fence-fail-{unique}-shard-0" in str(e.value) and f"fence-fail-{unique}-shard-1" in str(e.value)
    assert "timeout" in str(e.value).lower()


def test_idle_offset_refresh_never_fences_the_running_writer(sandbox, unique, tmp_path):
    """Partition 1 is idle while partition 0 keeps its shard's task busy. The old refresh called
    init_transactions() on the shard's id from the driver and fenced that running task, which
    raised a false "another instance" alarm; the owning task now re-commits in its own transaction."""
    topic, name = f"refresh-{unique}", f"refresh-{unique}"
    create_topic(sandbox.source.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": sandbox.source.bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, f"idle-{i}".encode(), partition=1)
    producer.flush(30)
    stop, sent = threading.Event(), [0]

    def trickle() -> None:
        while not stop.is_set():
            producer.produce(topic, f"busy-{sent[0]}".encode(), partition=0)
            producer.flush(10)
            sent[0] += 1
            time.sleep(0.02)

    env = {"REPLICATOR_OFFSETS_REFRESH_INTERVAL_SECONDS": "3"}
    thread = threading.Thread(target=trickle, daemon=True)
    # A task re-commits its stale partitions when it starts: short batches make four of them quick.
    with ReplicatorProcess(sandbox, topic, name, tmp_path / "job.log", "--shards", "1",
                           "--batch-duration-seconds", "5", env=env) as job:
        thread.start()
        try:
            wait_until(lambda: job.log().count("re-committed the offsets of 1 idle partitions") >= 4, 300,
                       "four refreshes of the idle partition", job)
        finally:
            stop.set()
            thread.join()
        source_end = end_offsets(sandbox.source.bootstrap, topic, 2)
        wait_until(lambda: fake_group_offsets(sandbox.target.bootstrap, f"__replicator.{name}") == {
            (topic, p): source_end[p] for p in range(2)}, 120, "catch-up", job)
        assert job.sigterm() == 0
    log = job.log()
    assert "shard fenced" not in log, "a refresh fenced the shard's own writer"
    assert assert_identical(sandbox.source.bootstrap, sandbox.target.bootstrap, topic, 2) == 10 + sent[0]
