"""A commit call that fails after the commit may have landed is settled from the target's data
(replicator.engine.commit_outcome), on real brokers."""

from __future__ import annotations

import logging
import re

from confluent_kafka import Producer

from replicator import config
from replicator.clients import kafka_clients
from replicator.engine import commit_outcome
from replicator.engine.shard_copy import CopyRange, ShardCopier
from replicator.groups.index_topic import ensure_index_topic
from replicator.topics import sync as topic_sync
from tests.kafka_helpers import assert_identical, create_topic, end_offsets, fake_group_offsets, produce_transactional


def _cfg(sandbox, topic: str, name: str) -> config.ReplicatorConfig:
    return config.load({"source_bootstrap_servers": sandbox.source.bootstrap,
                        "target_bootstrap_servers": sandbox.target.bootstrap, "name": name,
                        "topics": re.escape(topic), "shards": 1}, environ={})


def _written(producer: Producer, topic: str, n: int) -> list[int]:
    offsets: list[int] = []
    for i in range(n):
        producer.produce(topic, f"v{i}".encode(), None, 0, on_delivery=lambda err, m: offsets.append(m.offset()))
    producer.flush(30)
    return offsets


def test_the_target_tells_a_committed_an_aborted_and_an_open_transaction_apart(sandbox, unique):
    topic = f"doubt-{unique}"
    create_topic(sandbox.target.bootstrap, topic, 1)
    cfg = _cfg(sandbox, topic, f"doubt-{unique}")
    producer = Producer({"bootstrap.servers": sandbox.target.bootstrap, "transactional.id": f"doubt-{unique}",
                         "linger.ms": 1})
    producer.init_transactions(60)
    decided = {}
    for ending in ("commit", "abort"):
        producer.begin_transaction()
        decided[ending] = _written(producer, topic, 3)
        (producer.commit_transaction if ending == "commit" else producer.abort_transaction)(30)
    producer.begin_transaction()
    still_open = _written(producer, topic, 3)

    assert commit_outcome.committed(cfg, topic, 0, decided["commit"][1]) is True
    assert commit_outcome.committed(cfg, topic, 0, decided["abort"][0]) is False
    assert commit_outcome.committed(cfg, topic, 0, still_open[0], timeout=3) is None
    producer.abort_transaction(30)
    assert commit_outcome.committed(cfg, topic, 0, still_open[2]) is False


def test_a_commit_whose_response_was_lost_is_kept_and_counted_once(sandbox, unique, caplog):
    src, dst = sandbox.source.bootstrap, sandbox.target.bootstrap
    topic, name = f"lost-{unique}", f"lost-{unique}"
    create_topic(src, topic, 2)
    produce_transactional(src, topic, [(i % 2, f"k{i}".encode(), f"v{i}".encode(), [], 0) for i in range(4_000)],
                          f"src-{unique}", per_txn=500)
    cfg = _cfg(sandbox, topic, name)
    source, target = kafka_clients.source_admin(cfg), kafka_clients.target_admin(cfg)
    mappings = topic_sync.ensure_target_topics(cfg, source, target, topic_sync.discover(cfg, source))
    ensure_index_topic(cfg, target, [m.target for m in mappings])
    ends = end_offsets(src, topic, 2)

    with caplog.at_level(logging.WARNING, logger="replicator.shard_copy"):
        stats = ShardCopier(cfg, 0, fault="commit-response-lost").copy(
            [CopyRange(topic, topic, p, 0, ends[p]) for p in range(2)])

    settled = [r for r in caplog.records if getattr(r, "event", None) == "commit_in_doubt_settled"]
    assert [r.committed for r in settled] == [True]
    assert stats.records == 4_000  # the first transaction's records once: kept, not copied or counted again
    assert assert_identical(src, dst, topic, 2) == 4_000
    assert fake_group_offsets(dst, f"__replicator.{name}") == {(topic, p): ends[p] for p in range(2)}
