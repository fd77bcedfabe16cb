"""A shard task whose source consumer stops fetching replaces it and copies on (clients.fetch_watch),
on real brokers. The stall is librdkafka #5153's (no error, no record, partitions filling up
behind), made on purpose by pausing the consumer's partitions behind the copy loop's back."""

from __future__ import annotations

import logging
import re
import threading
import time

from confluent_kafka import Producer

from replicator import config
from replicator.clients import fetch_watch, kafka_clients
from replicator.engine.shard_copy import CopyRange, ShardCopier
from replicator.groups.index_topic import ensure_index_topic
from replicator.topics import sync as topic_sync
from tests.kafka_helpers import assert_identical, create_topic, produce_transactional


def _records(first: int, n: int) -> list[tuple]:
    # Recent timestamps: records older than the brokers' retention (7 days) are deleted from both
    # clusters whenever a retention check happens to run (it failed that way with 2023's timestamps).
    now_ms = int(time.time() * 1000)
    return [(i % 2, f"k{i}".encode(), f"v{i}".encode(), [("h", str(i).encode())], now_ms - 60_000 + i)
            for i in range(first, first + n)]


def test_a_source_consumer_that_stops_fetching_is_replaced_and_the_copy_goes_on(sandbox, unique, monkeypatch,
                                                                                   caplog):
    monkeypatch.setattr(fetch_watch, "WINDOW_S", 3.0)
    src, dst = sandbox.source.bootstrap, sandbox.target.bootstrap
    topic = name = f"stall-{unique}"
    create_topic(src, topic, 2)
    produce_transactional(src, topic, _records(0, 1_000), f"src-{unique}", per_txn=250)
    cfg = config.load({"source_bootstrap_servers": src, "target_bootstrap_servers": dst, "name": name,
                       "topics": re.escape(topic), "shards": 1}, environ={})
    source, target = kafka_clients.source_admin(cfg), kafka_clients.target_admin(cfg)
    mappings = topic_sync.ensure_target_topics(cfg, source, target, topic_sync.discover(cfg, source))
    ensure_index_topic(cfg, target, [m.target for m in mappings])
    # Records that arrive while the consumer is stalled, then a source transaction left open to the
    # end: the source's end (its last stable offset) stops there, so it must not look like a stall.
    still_open = Producer({"bootstrap.servers": src, "transactional.id": f"open-{unique}"})
    still_open.init_transactions(60)

    def later() -> None:
        time.sleep(2)
        produce_transactional(src, topic, _records(1_000, 500), f"src2-{unique}", per_txn=250)
        still_open.begin_transaction()
        for _ in range(100):
            still_open.produce(topic, b"never-committed", partition=0)
        still_open.flush(30)

    arrivals = threading.Thread(target=later)
    arrivals.start()
    try:
        with caplog.at_level(logging.WARNING, logger="replicator.shard_copy"):
            stats = ShardCopier(cfg, 0, fault="stall-fetch").run(
                [CopyRange(topic, topic, p, 0) for p in range(2)], time.monotonic() + 25)
    finally:
        arrivals.join()
        still_open.abort_transaction(30)

    stalls = [r for r in caplog.records if getattr(r, "event", None) == "source_consumer_stalled"]
    assert len(stalls) == 1 and stats.source_consumer_restarts == 1  # the open transaction did not count
    assert assert_identical(src, dst, topic, 2) == 1_500
