"""The lag's age (`replicator_lag_seconds`, `replicator lag`) reads the oldest record still to copy
of each lagging partition from the source, and only about that much: it runs every progress line
(5 s) while a backlog lasts, and with the source across a WAN link its reads cross the link too.

The target cluster stands in for the source here: it is the sandbox cluster with a proxied
listener, so a counting proxy (tests/chaos/delayproxy.py) sees every byte the lookup fetches.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition

from replicator import config
from replicator.ops.lag import AgesSeen, PartitionLag, with_ages
from tests.chaos.delayproxy import WanLink
from tests.kafka_helpers import create_topic

PARTITIONS = 8
RECORDS = 1_500  # per partition, 1 KiB each: a backlog of ~1.5 MB per partition
RESUME = 700  # where the copy stands in every partition


def test_the_age_lookup_reads_a_batch_per_lagging_partition_not_its_backlog(sandbox, unique):
    far = sandbox.target
    topic = f"ages-{unique}"
    create_topic(far.bootstrap, topic, PARTITIONS)
    # Batches of 16 KiB, as a Java producer's default writes them.
    producer = Producer({"bootstrap.servers": far.bootstrap, "batch.size": 16 * 1024, "linger.ms": 5})
    base = int(time.time() * 1000) - 3_600_000
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            producer.produce(topic, b"v" * 1024, partition=p, timestamp=base + p * 10_000 + i)
        producer.poll(0)
    assert producer.flush(60) == 0
    lags = [PartitionLag(topic, topic, p, RECORDS, RESUME, 0) for p in range(PARTITIONS)]

    seen = AgesSeen()
    with WanLink(far) as link:
        cfg = config.load({"source_bootstrap_servers": link.bootstrap, "target_bootstrap_servers": far.bootstrap,
                           "topics": topic, "name": f"ages-{unique}"}, environ={})

        def fetching(lookup: list[PartitionLag]) -> tuple[dict[int, int | None], int]:
            before = sum(proxy.bytes for proxy in link.proxies)
            aged = with_ages(cfg, lookup, seen=seen)
            return {x.partition: x.oldest_timestamp_ms for x in aged}, sum(p.bytes for p in link.proxies) - before

        first, fetched = fetching(lags)
        # The next progress line with the copy where it was: the same ages, nothing read.
        again, fetched_again = fetching(lags)
        # Partition 3's copy moved on: only its oldest record is read again.
        moved, fetched_moved = fetching([PartitionLag(topic, topic, p, RECORDS, RESUME + 100 * (p == 3), 0)
                                         for p in range(PARTITIONS)])

    # The records' own timestamps at those offsets (a producer retry can shift offsets from the loop's order).
    expected = {p: _timestamp_at(far.bootstrap, topic, p, RESUME) for p in range(PARTITIONS)}
    assert first == again == expected
    assert moved == {**expected, 3: _timestamp_at(far.bootstrap, topic, 3, RESUME + 100)}
    # The copy's own fetch sizes (4 MiB per partition) pulled the whole 12 MB backlog for these
    # eight records; a few 16 KiB batches per partition are what finding them takes.
    backlog = PARTITIONS * (RECORDS - RESUME) * 1024
    assert fetched < PARTITIONS * 256 * 1024 < backlog / 3
    assert fetched_again == 0
    assert 0 < fetched_moved < 256 * 1024


def _timestamp_at(bootstrap: str, topic: str, partition: int, offset: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ages-truth", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                assert m.offset() == offset
                return m.timestamp()[1]
        raise AssertionError(f"no record at {topic}[{partition}]@{offset} within 30 s")
    finally:
        consumer.close()
