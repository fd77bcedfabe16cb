"""The rig is real: topics, transactions and the fake-group offset commit on live brokers."""

from __future__ import annotations

import socket

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.kafka_helpers import create_topic, read_all


def test_both_clusters_answer_kafka(sandbox, unique):
    for cluster in sandbox.clusters:
        with socket.create_connection(("127.0.0.1", cluster.port), timeout=5):
            pass
        create_topic(cluster.bootstrap, f"smoke-{unique}", partitions=3)
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        producer.produce(f"smoke-{unique}", value=b"hello", partition=2)
        assert producer.flush(30) == 0
        records = read_all(cluster.bootstrap, f"smoke-{unique}", 3)
        assert [m.value() for m in records[2]] == [b"hello"]


def test_read_committed_sees_only_committed_transactions(sandbox, unique):
    topic = f"txn-{unique}"
    create_topic(sandbox.source.bootstrap, topic)
    producer = Producer({"bootstrap.servers": sandbox.source.bootstrap, "transactional.id": f"smoke-{unique}"})
    producer.init_transactions(30)
    for outcome, values in (("commit", [b"a", b"b"]), ("abort", [b"x", b"y"]), ("commit", [b"c"])):
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, value=v)
        producer.flush(30)
        (producer.commit_transaction if outcome == "commit" else producer.abort_transaction)(30)

    committed = [m.value() for m in read_all(sandbox.source.bootstrap, topic, 1)[0]]
    assert committed == [b"a", b"b", b"c"]
    everything = [m.value() for m in read_all(sandbox.source.bootstrap, topic, 1, isolation="read_uncommitted")[0]]
    assert everything == [b"a", b"b", b"x", b"y", b"c"]


def test_transactional_offset_commit_into_never_joined_group(sandbox, unique):
    """The primitive the replicator rests on: KIP-656's offsets-in-the-same-transaction."""
    topic, group = f"fake-{unique}", f"__replicator.smoke-{unique}"
    create_topic(sandbox.target.bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": sandbox.target.bootstrap, "transactional.id": f"fg-{unique}"})
    producer.init_transactions(30)
    group_reader = Consumer({"bootstrap.servers": sandbox.target.bootstrap, "group.id": group,
                             "enable.auto.commit": False})
    producer.begin_transaction()
    producer.produce(topic, value=b"copied", partition=1)
    producer.send_offsets_to_transaction(
        [TopicPartition(topic, 1, 4242, metadata='{"source":"x"}')], group_reader.consumer_group_metadata(), 30)
    producer.commit_transaction(30)

    committed = group_reader.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, -1001), (1, 4242)]
    assert committed[1].metadata == '{"source":"x"}'
    group_reader.close()
