"""A source a link away (a 50 ms round trip through tests/chaos/delayproxy.py) is noticed by the shard,
whose consumer then fetches with twice the sizes (`clients.source_link`), and the copy stays exact:
every record once, in order, with its key, value, headers and timestamp, and the offsets in the group.

The target cluster stands in for the source: it is the sandbox cluster with a proxied listener. The
copy goes from one of its topics, read through the link, to another, written directly.
"""

from __future__ import annotations

import logging
import re
import time

from confluent_kafka import Producer

from replicator import config
from replicator.clients import kafka_clients
from replicator.engine import client_cache
from replicator.engine.shard_copy import CopyRange, ShardCopier
from replicator.groups.index_topic import ensure_index_topic
from tests.chaos.delayproxy import WanLink
from tests.kafka_helpers import assert_identical, create_topic, end_offsets, fake_group_offsets, produce_records

PARTITIONS = 3
RECORDS = 2_000  # per partition


def test_a_source_across_a_link_is_copied_exactly_with_the_larger_fetches(sandbox, unique, caplog, monkeypatch):
    far = sandbox.target
    topic, copy, name = f"linked-{unique}", f"linked-copy-{unique}", f"linked-{unique}"
    create_topic(far.bootstrap, topic, PARTITIONS)
    create_topic(far.bootstrap, copy, PARTITIONS)
    producer = Producer({"bootstrap.servers": far.bootstrap, "linger.ms": 5})
    now = int(time.time() * 1000)
    produce_records(producer, topic, [(p, f"k{p}-{i}".encode(), bytes([65 + i % 26]) * 512,
                                       [("n", str(i).encode())], now + i)
                                      for p in range(PARTITIONS) for i in range(RECORDS)])
    assert producer.flush(60) == 0
    ends = end_offsets(far.bootstrap, topic, PARTITIONS)

    # A process of its own judges the link once: this one starts without a judgement.
    monkeypatch.setattr(client_cache, "_consumers", {})
    monkeypatch.setattr(client_cache, "_across_a_link", {})
    with WanLink(far) as link:
        link.slow(0.025)
        cfg = config.load({"source_bootstrap_servers": link.bootstrap, "target_bootstrap_servers": far.bootstrap,
                           "name": name, "topics": re.escape(topic), "shards": 1}, environ={})
        ensure_index_topic(cfg, kafka_clients.target_admin(cfg), [copy])
        with caplog.at_level(logging.INFO, logger="replicator.shard_copy"):
            stats = ShardCopier(cfg, 0).copy([CopyRange(topic, copy, p, 0, ends[p]) for p in range(PARTITIONS)])
        fetched = sum(proxy.bytes for proxy in link.proxies)

    judged = [r for r in caplog.records if getattr(r, "event", None) == "source_link"]
    assert [r.crosses_a_link for r in judged] == [True] and judged[0].round_trip_ms >= 40  # 25 ms each way
    assert stats.records == PARTITIONS * RECORDS
    assert fetched >= PARTITIONS * RECORDS * 512  # the records did cross the link
    assert assert_identical(far.bootstrap, far.bootstrap, topic, PARTITIONS, target_topic=copy) == PARTITIONS * RECORDS
    assert fake_group_offsets(far.bootstrap, f"__replicator.{name}") == {(copy, p): ends[p] for p in range(PARTITIONS)}


def test_a_source_beside_the_job_keeps_the_default_sizes(sandbox, unique, caplog, monkeypatch):
    src_bs = sandbox.source.bootstrap
    topic, name = f"near-{unique}", f"near-{unique}"
    create_topic(src_bs, topic, 1)
    create_topic(sandbox.target.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": src_bs})
    produce_records(producer, topic, [(0, b"k", str(i).encode(), [], 0) for i in range(10)])
    assert producer.flush(60) == 0
    monkeypatch.setattr(client_cache, "_consumers", {})
    monkeypatch.setattr(client_cache, "_across_a_link", {})
    cfg = config.load({"source_bootstrap_servers": src_bs, "target_bootstrap_servers": sandbox.target.bootstrap,
                       "name": name, "topics": re.escape(topic), "shards": 1}, environ={})
    ensure_index_topic(cfg, kafka_clients.target_admin(cfg), [topic])
    with caplog.at_level(logging.INFO, logger="replicator.shard_copy"):
        stats = ShardCopier(cfg, 0).copy([CopyRange(topic, topic, 0, 0, 10)])
    judged = [r for r in caplog.records if getattr(r, "event", None) == "source_link"]
    assert stats.records == 10
    assert [r.crosses_a_link for r in judged] == [False]
