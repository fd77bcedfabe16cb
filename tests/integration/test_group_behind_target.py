"""A fake group behind the target's committed copies (make chaos, TV 0: a transaction's data and index
entries committed, its offsets never showed) is found at start from the translation index, and the
copy resumes where the copies end instead of copying them again; on real brokers."""

from __future__ import annotations

import dataclasses
import logging
import re
import time

from confluent_kafka import Producer, TopicPartition

from replicator import config
from replicator.clients import kafka_clients
from replicator.engine import index_floors
from replicator.engine.shard_copy import CopyRange, ShardCopier
from replicator.groups.index_topic import ensure_index_topic
from replicator.groups.translate import IndexReader
from replicator.offsets import read_committed
from replicator.topics import sync as topic_sync
from tests.kafka_helpers import (
    assert_identical,
    commit_member_less,
    create_topic,
    end_offsets,
    fake_group_offsets,
    produce_transactional,
)


def _copied(sandbox, unique: str) -> tuple[config.ReplicatorConfig, str, dict[int, int]]:
    """A 2-partition topic of 4,000 records copied whole by one shard."""
    src = sandbox.source.bootstrap
    topic = name = f"behind-{unique}"
    create_topic(src, topic, 2)
    produce_transactional(src, topic, [(i % 2, f"k{i}".encode(), f"v{i}".encode(), [], 0) for i in range(4_000)],
                          f"src-{unique}", per_txn=250)
    cfg = config.load({"source_bootstrap_servers": src, "target_bootstrap_servers": sandbox.target.bootstrap,
                       "name": name, "topics": re.escape(topic), "shards": 1}, environ={})
    source, target = kafka_clients.source_admin(cfg), kafka_clients.target_admin(cfg)
    mappings = topic_sync.ensure_target_topics(cfg, source, target, topic_sync.discover(cfg, source))
    ensure_index_topic(cfg, target, [m.target for m in mappings])
    ends = end_offsets(src, topic, 2)
    # In two copies, so that partition 0 has at least two index entries.
    ShardCopier(cfg, 0).copy([CopyRange(topic, topic, p, 0, ends[p] // 2) for p in range(2)])
    ShardCopier(cfg, 0).copy([CopyRange(topic, topic, p, 0, ends[p]) for p in range(2)])
    assert assert_identical(src, sandbox.target.bootstrap, topic, 2) == 4_000
    return cfg, topic, ends


def test_a_group_behind_its_committed_copies_resumes_where_the_index_says(sandbox, unique, caplog):
    cfg, topic, ends = _copied(sandbox, unique)
    dst = sandbox.target.bootstrap
    reader = kafka_clients.translator_reader(cfg)
    try:
        index = IndexReader(reader, cfg.name, 8)
        _, last = index.last_entry_beginning_at_or_before(topic, 0, ends[0])
        _, before = index.last_entry_beginning_at_or_before(topic, 0, last.begin - 1)
    finally:
        reader.close()
    assert before.end == last.begin < last.end <= ends[0]  # past the last record: a source commit marker
    # The group as the faulty failover left it: the offsets of the transaction before the last.
    group = kafka_clients.group_reader(cfg)
    try:
        meta = read_committed(group, [(topic, 0)])[(topic, 0)].metadata
        so, to = before.last_pair
        stale = dataclasses.replace(meta, source_offset=so, target_offset=to, committed_at=int(time.time()))
        commit_member_less(group, [TopicPartition(topic, 0, before.end, metadata=stale.encode())])
    finally:
        group.close()
    assert fake_group_offsets(dst, cfg.group)[(topic, 0)] == before.end

    with caplog.at_level(logging.WARNING, logger="replicator.job"):
        behind = index_floors.find(cfg, kafka_clients.target_admin(cfg), [(topic, 0), (topic, 1)])
    assert behind == [index_floors.Behind(topic, 0, before.end, last.end)]
    assert [r.event for r in caplog.records if getattr(r, "event", "").startswith("group_behind")] == \
        ["group_behind_target", "group_behind_target_resumed"]

    # A task seeded with that floor (as the job's driver seeds it) copies nothing again and heals the group.
    copier = ShardCopier(cfg, 0)
    copier._partitions.floors = {(topic, 0): last.end}
    copier.copy([CopyRange(topic, topic, p, 0, ends[p]) for p in range(2)])
    assert assert_identical(sandbox.source.bootstrap, dst, topic, 2) == 4_000
    assert fake_group_offsets(dst, cfg.group) == {(topic, p): ends[p] for p in range(2)}


def test_aborted_records_past_the_last_commit_are_read_past_and_nothing_is_raised(sandbox, unique, caplog):
    cfg, topic, ends = _copied(sandbox, unique)
    # What a kill in the middle of a transaction leaves once the next start fenced it: aborted records.
    zombie = Producer({"bootstrap.servers": sandbox.target.bootstrap, "transactional.id": f"zombie-{unique}"})
    zombie.init_transactions(60)
    zombie.begin_transaction()
    for i in range(50):
        zombie.produce(topic, f"aborted-{i}".encode(), partition=0)
    zombie.flush(30)
    zombie.abort_transaction(30)

    with caplog.at_level(logging.WARNING, logger="replicator.job"):
        assert index_floors.find(cfg, kafka_clients.target_admin(cfg), [(topic, 0), (topic, 1)]) == []
    assert not [r for r in caplog.records if getattr(r, "event", "").startswith("group_behind")]
    assert fake_group_offsets(sandbox.target.bootstrap, cfg.group) == {(topic, p): ends[p] for p in range(2)}
