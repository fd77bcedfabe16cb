"""Translation of source offsets on real brokers: exact at every kind of position, deep lookups by
binary search, and no guess where the index cannot answer."""

from __future__ import annotations

import re
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from replicator import config
from replicator.clients import kafka_clients
from replicator.engine import source_reader
from replicator.engine.shard_copy import CopyRange, ShardCopier
from replicator.groups.index_topic import ensure_index_topic
from replicator.groups.translate import Translator, read_records
from replicator.topics import sync as topic_sync
from tests.engine_checks import sample_records
from tests.index_helpers import positions_of_every_kind, read_index
from tests.kafka_helpers import create_topic, end_offsets, produce_transactional, record_view


def _next_record(bootstrap: str, topic: str, partition: int, offset: int):
    """What a read_committed consumer positioned at `offset` reads next (None at the end)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-next", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "auto.offset.reset": "error"})
    try:
        found = read_records(consumer, topic, partition, offset, limit=1)
        return found[0] if found else None
    finally:
        consumer.close()


def _compacted_source(bootstrap: str, topic: str) -> None:
    """A compacted topic whose log the cleaner has already holed (waits for the cleaner)."""
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact", "segment.ms": "100",
                                       "min.cleanable.dirty.ratio": "0.001", "min.compaction.lag.ms": "0",
                                       "delete.retention.ms": "100"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    base = int(time.time() * 1000) - 60_000
    for wave in range(4):
        for i in range(300):
            producer.produce(topic, value=f"v{wave}-{i}".encode(), key=f"k{i % 40}".encode(), partition=0,
                             headers=[("w", str(wave).encode())], timestamp=base + wave * 1000 + i)
        producer.flush(30)
        time.sleep(0.3)  # the next wave rolls the segment (segment.ms), making this one cleanable
    deadline = time.monotonic() + 120
    while _survivors(bootstrap, topic) >= 1000:
        if time.monotonic() > deadline:
            raise AssertionError(f"the log cleaner did not compact {topic} within 120s")
        producer.produce(topic, value=b"roll", key=b"roll", partition=0, timestamp=base + 9_000)
        producer.flush(30)
        time.sleep(2)
    # The test compares the copy with the source read afterwards: a cleaner still at work then would
    # remove records the copy holds (a clean-clone `make test` saw exactly that). No more cleaning.
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.cleanable.dirty.ratio", "0.99", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.ms", "604800000", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    last = -1
    while (now := _survivors(bootstrap, topic)) != last:  # a cleaning already under way ends
        if time.monotonic() > deadline + 60:
            raise AssertionError(f"the log cleaner did not settle on {topic}")
        last = now
        time.sleep(3)


def _survivors(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        return len(read_records(consumer, topic, 0, 0))
    finally:
        consumer.close()


def test_translation_is_exact_at_every_kind_of_position(sandbox, unique, monkeypatch):
    src_bs, dst_bs = sandbox.source.bootstrap, sandbox.target.bootstrap
    txn_topic, compact_topic, mid_topic = f"xl-txn-{unique}", f"xl-compact-{unique}", f"xl-mid-{unique}"
    name = f"xl-{unique}"
    create_topic(src_bs, txn_topic, 1)
    # Small source transactions, every 4th aborted: markers and aborted runs all through the log.
    produce_transactional(src_bs, txn_topic, sample_records(4_200, partitions=1), f"s-{unique}", per_txn=7,
                          abort_every=4)
    _compacted_source(src_bs, compact_topic)
    create_topic(src_bs, mid_topic, 1)
    produce_transactional(src_bs, mid_topic, sample_records(900, partitions=1), f"m-{unique}", per_txn=50)
    # Copied from mid-log: the source deleted its first 300 offsets before replication began.
    _delete_below(src_bs, mid_topic, 300)

    topics = [txn_topic, compact_topic, mid_topic]
    cfg = config.load({"source_bootstrap_servers": src_bs, "target_bootstrap_servers": dst_bs, "name": name,
                       "topics": "|".join(re.escape(t) for t in topics), "shards": 1,
                       "max_records_per_transaction": 1}, environ={})
    source, target = kafka_clients.source_admin(cfg), kafka_clients.target_admin(cfg)
    mappings = topic_sync.ensure_target_topics(cfg, source, target, topic_sync.discover(cfg, source))
    ensure_index_topic(cfg, target, [m.target for m in mappings])
    ends = {t: end_offsets(src_bs, t, 1)[0] for t in topics}
    # Transactions of at most a handful of records: well over 1,000 index entries for the first topic.
    monkeypatch.setattr(source_reader, "_CONSUME_BATCH", 2)
    stats = ShardCopier(cfg, 0).copy([CopyRange(t, t, 0, 0, ends[t]) for t in topics])
    assert stats.transactions > 1_000
    # Produced after the copy: groups that read these are ahead of the replica.
    produce_transactional(src_bs, txn_topic, sample_records(30, start=10_000, partitions=1), f"s2-{unique}")

    translator = Translator(cfg)
    try:
        entries = read_index(dst_bs, name)
        assert len(entries[(txn_topic, 0)]) > 1_000
        checked = 0
        for topic in topics:
            consumer = Consumer({"bootstrap.servers": src_bs, "group.id": "t", "enable.auto.commit": False,
                                 "isolation.level": "read_committed", "enable.partition.eof": True,
                                 "auto.offset.reset": "earliest"})
            log_start = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[0]
            src = read_records(consumer, topic, 0, log_start, ends[topic])
            consumer.close()
            for kind, x in positions_of_every_kind(src, log_start, ends[topic]).items():
                before = (translator.index.probes, translator.index.records_read)
                tr = translator.translate(topic, 0, x)
                assert tr.exact and tr.method == "index" and tr.ahead == 0, (topic, kind, x, tr)
                want, got = _next_record(src_bs, topic, 0, x), _next_record(dst_bs, topic, 0, tr.target_offset)
                if want is None or want.offset() >= ends[topic]:
                    assert got is None, (topic, kind, x, tr)  # at the end of what is replicated
                else:
                    assert got is not None and record_view(got) == record_view(want), (topic, kind, x, tr)
                checked += 1
                if topic == txn_topic and kind in ("start", "second"):
                    # Far behind (> 1,000 entries back): a binary search, not a scan of the index.
                    probes = translator.index.probes - before[0]
                    read = translator.index.records_read - before[1]
                    assert probes <= 2 * 11 + 4 and read < 200, (probes, read)
        assert checked >= 20

        # Ahead of the replica: the end of what is replicated, and by how much.
        tr = translator.translate(txn_topic, 0, ends[txn_topic] + 12)
        at_end = translator.translate(txn_topic, 0, ends[txn_topic])
        assert tr.target_offset == at_end.target_offset and tr.ahead == 12 and tr.exact
        # Before what was ever replicated (the mid-log topic's deleted prefix): no guess.
        tr = translator.translate(mid_topic, 0, 299)
        assert tr.target_offset is None and not tr.exact and "older than the translation index" in tr.reason
    finally:
        translator.close()


def _delete_below(bootstrap: str, topic: str, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_records([TopicPartition(topic, 0, offset)]).values():
        fut.result()
