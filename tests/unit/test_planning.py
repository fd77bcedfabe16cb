"""The driver's planning, without Spark or brokers: epochs, shard assignment, refresh, stats merging."""

from __future__ import annotations

import json
import logging

from confluent_kafka import KafkaError, KafkaException

from replicator.clients import kafka_clients
from replicator.config import ReplicatorConfig
from replicator.engine.shard_copy import needs_refresh
from replicator.engine.sharding import shard_of
from replicator.engine.spark_source import EPOCH_KEY, ReplicationPlanner, epoch_of
from replicator.offsets import NO_OFFSET, CommitMetadata, Committed
from replicator.topics import sync as topic_sync


def ends(offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): e for t, parts in offsets.items() for p, e in parts.items()}


def test_shard_assignment_is_stable_and_spreads_consecutive_partitions():
    shards = [shard_of("orders", p, 4) for p in range(8)]
    assert shards == [shard_of("orders", p, 4) for p in range(8)]  # same answer on every process
    assert sorted(shards[:4]) == [0, 1, 2, 3]


def test_partitions_give_each_shard_the_partitions_it_owns_under_the_batch_epoch():
    cfg = ReplicatorConfig(name="plan", shards=3)
    planner = ReplicationPlanner({"config": cfg.to_json()})
    planner._topics = {"orders": ("dr.orders", 6), "audit": ("dr.audit", 1)}
    plans = planner.partitions({EPOCH_KEY: {"n": 4}}, {EPOCH_KEY: {"n": 5}})
    seen = set()
    for plan in plans:
        work = json.loads(plan.ranges)
        assert work["batch"] == 5
        for src, dst, p in work["copy"]:
            assert dst == "dr." + src
            assert shard_of(src, p, 3) == plan.shard
            seen.add((src, p))
    assert seen == {("orders", p) for p in range(6)} | {("audit", 0)}
    assert [p.shard for p in plans] == sorted({p.shard for p in plans})


def test_every_trigger_after_a_batch_plans_the_next_epoch_until_stopping(tmp_path):
    cfg = ReplicatorConfig(name="plan", shards=2)
    stop = tmp_path / "stop"
    planner = ReplicationPlanner({"config": cfg.to_json(), "stop_flag": str(stop)})
    forced = []
    planner._refresh_topics = lambda force=False: forced.append(force)  # no brokers here
    start = planner.initialOffset()
    assert planner.latestOffset(start) == start  # nothing selected yet: no batch
    planner._topics = {"t": ("t", 2)}
    first = planner.latestOffset(start)
    assert first == {EPOCH_KEY: {"n": 1}}
    planner.commit(first)
    assert planner.latestOffset(first) == {EPOCH_KEY: {"n": 2}}
    assert forced == [True, False, True]  # topics re-read after every finished batch
    stop.touch()
    assert planner.latestOffset(first) == first


def test_an_idle_partition_is_re_committed_once_its_last_commit_is_stale():
    meta = CommitMetadata("c", "t", 2, 0, 5, 5, "job", committed_at=1_000)
    assert needs_refresh(Committed(7, meta), stale_before=1_001)
    assert not needs_refresh(Committed(7, meta), stale_before=1_000)
    assert needs_refresh(Committed(7, None), stale_before=0)  # written before commit times were kept
    assert not needs_refresh(Committed(NO_OFFSET, None), stale_before=10**10)  # nothing to keep alive
    assert not needs_refresh(None, stale_before=10**10)


def test_a_progress_events_end_offset_gives_the_batch_epoch():
    assert epoch_of('{"#epoch":{"n":7}}') == 7
    assert epoch_of("not json") is None and epoch_of(None) is None  # the caller falls back to batchId + 1


def test_a_failed_topic_lookup_warns_naming_the_cluster_and_asks_through_new_clients(monkeypatch, caplog):
    class Admin:
        polled = 0

        def poll(self, timeout):
            self.polled += 1

    built: list[Admin] = []

    def admin(cfg):
        built.append(Admin())
        return built[-1]

    def down(cfg, source):
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport"))

    monkeypatch.setattr(kafka_clients, "source_admin", admin)
    monkeypatch.setattr(kafka_clients, "target_admin", admin)
    monkeypatch.setattr(topic_sync, "selection", down)
    planner = ReplicationPlanner({"config": ReplicatorConfig(name="plan").to_json()})
    start = planner.initialOffset()
    logger = logging.getLogger("replicator.spark_source")
    logger.addHandler(caplog.handler)  # the job's loggers do not propagate
    try:
        assert planner.latestOffset(start) == start  # nothing planned this trigger
        assert planner.latestOffset(start) == start
    finally:
        logger.removeHandler(caplog.handler)
    assert len(built) == 4  # a new source and target client for each try
    assert all(a.polled == 1 for a in built)  # their librdkafka lines were served to the log
    assert "source topics unavailable (source: Failed to get metadata" in caplog.text
