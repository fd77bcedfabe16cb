"""Consumer-group failover on real brokers: the translation index is written atomically with the data."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from replicator import config
from replicator.clients import kafka_clients
from replicator.engine.faults import InjectedFault
from replicator.engine.shard_copy import CopyRange, ShardCopier
from replicator.groups.index import index_partition
from replicator.groups.index_topic import ensure_index_topic
from replicator.names import index_topic
from replicator.topics import sync as topic_sync
from tests.engine_checks import sample_records
from tests.index_helpers import assert_index_exact, read_index
from tests.kafka_helpers import create_topic, end_offsets, produce_transactional


def _job_config(sandbox, topic: str, name: str, **extra) -> config.ReplicatorConfig:
    return config.load({"source_bootstrap_servers": sandbox.source.bootstrap,
                        "target_bootstrap_servers": sandbox.target.bootstrap, "topics": re.escape(topic),
                        "name": name, "shards": 1, **extra}, environ={})


def _offsets(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """(last stable offset, high watermark): they differ while a transaction is open there."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = []
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        fut = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.latest()}, isolation_level=level)
        out.append(next(iter(fut.values())).result().offset)
    return out[0], out[1]


class _CrashAfterIndex(ShardCopier):
    """Dies (as a killed task would) after producing its first transaction's index entries, before
    the offsets and the commit: what the target shows at that moment is recorded."""

    seen: dict = {}

    def _produce_index(self, producer, advanced, landed) -> None:
        super()._produce_index(producer, advanced, landed)
        producer.flush(30)
        st = advanced[0]
        ip = index_partition(st.r.target_topic, st.r.partition)
        _CrashAfterIndex.seen = {
            "data": _offsets(self.cfg.target_bootstrap_servers, st.r.target_topic, st.r.partition),
            "index": _offsets(self.cfg.target_bootstrap_servers, index_topic(self.cfg.name), ip)}
        raise InjectedFault("test: killed between the index entries and the commit")


def test_index_entries_are_visible_exactly_when_their_data_is(sandbox, unique):
    topic, name = f"ixatomic-{unique}", f"ixa-{unique}"
    create_topic(sandbox.source.bootstrap, topic, 2)
    produce_transactional(sandbox.source.bootstrap, topic, sample_records(6_000, partitions=2), f"s-{unique}",
                          per_txn=200, abort_every=3)
    cfg = _job_config(sandbox, topic, name, max_records_per_transaction=500)
    source, target = kafka_clients.source_admin(cfg), kafka_clients.target_admin(cfg)
    mappings = topic_sync.ensure_target_topics(cfg, source, target, topic_sync.discover(cfg, source))
    assert ensure_index_topic(cfg, target, [topic]) == index_topic(name)
    ends = end_offsets(sandbox.source.bootstrap, topic, 2)
    ranges = [CopyRange(m.source, m.target, p, 0, ends[p]) for m in mappings for p in range(2)]

    with pytest.raises(InjectedFault):
        _CrashAfterIndex(cfg, 0).copy(ranges)
    # Written but not committed: both the data and its index entries sit in the open transaction.
    (data_lso, data_hw), (index_lso, index_hw) = _CrashAfterIndex.seen["data"], _CrashAfterIndex.seen["index"]
    assert data_lso < data_hw and index_lso < index_hw
    assert read_index(sandbox.target.bootstrap, name) == {}
    assert read_index(sandbox.target.bootstrap, name, isolation="read_uncommitted") != {}

    # The next holder of the shard's transactional id aborts that transaction and copies everything,
    # in three plans ending at arbitrary offsets (inside aborted transactions, on markers) like
    # micro-batches do.
    transactions = 0
    for third in (1, 2, 3):
        part = [CopyRange(r.source_topic, r.target_topic, r.partition, 0, r.end * third // 3) for r in ranges]
        transactions += ShardCopier(cfg, 0).copy(part).transactions
    assert transactions >= 3
    for p in range(2):
        lso, hw = _offsets(sandbox.target.bootstrap, topic, p)
        assert lso == hw
    # The aborted entries stay invisible; the committed ones map every source record exactly.
    entries = assert_index_exact(sandbox.source.bootstrap, sandbox.target.bootstrap, name, topic, topic, 2)
    # Each of the three copies commits an entry per partition it copied records of. A commit that only
    # stepped over aborted records or markers has no records to map and writes no entry, so how many
    # transactions there are depends on how the fetches fell (7 transactions with 6 entries, once).
    assert entries >= 3 * len(ranges)
    uncommitted = read_index(sandbox.target.bootstrap, name, isolation="read_uncommitted")
    assert sum(map(len, uncommitted.values())) > entries


def test_index_off_writes_no_index(sandbox, unique):
    topic, name = f"ixoff-{unique}", f"ixoff-{unique}"
    create_topic(sandbox.source.bootstrap, topic, 1)
    produce_transactional(sandbox.source.bootstrap, topic, sample_records(500, partitions=1), f"s-{unique}")
    cfg = _job_config(sandbox, topic, name, translation_index=False)
    source, target = kafka_clients.source_admin(cfg), kafka_clients.target_admin(cfg)
    mappings = topic_sync.ensure_target_topics(cfg, source, target, topic_sync.discover(cfg, source))
    assert ensure_index_topic(cfg, target, [topic]) is None
    end = end_offsets(sandbox.source.bootstrap, topic, 1)[0]
    assert ShardCopier(cfg, 0).copy([CopyRange(mappings[0].source, mappings[0].target, 0, 0, end)]).records == 500
    assert index_topic(name) not in target.list_topics(timeout=30).topics

