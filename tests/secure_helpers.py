"""Helpers for tests on the secure sandbox: clients per principal, ACLs from `replicator.access.acls`,
replicator config files that hold only references to secrets."""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from replicator.access.acls import Acl
from replicator.clients.client_errors import transient
from replicator.clients.kafka_clients import with_logging
from tests.kafka_helpers import commit_member_less


def props(box, cluster: str, principal: str = "admin") -> dict:
    # librdkafka's lines through logging, as the product's clients: a client still alive when the
    # secure sandbox stops at the end of a pytest worker printed "Connect ... failed" raw into
    # `make test`'s output.
    return with_logging({**box.client_properties(cluster, principal),
                         "bootstrap.servers": getattr(box, cluster).bootstrap})


def admin(box, cluster: str, principal: str = "admin") -> AdminClient:
    return AdminClient(props(box, cluster, principal))


def create_topic(box, cluster: str, topic: str, partitions: int) -> None:
    client = admin(box, cluster)
    client.create_topics([NewTopic(topic, partitions, 1)], request_timeout=30)[topic].result()
    deadline = time.monotonic() + 30
    while topic not in client.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)


def produce(box, topic: str, partitions: int, count: int, start: int = 0) -> None:
    producer = Producer({**props(box, "source"), "enable.idempotence": True})
    for i in range(start, start + count):
        producer.produce(topic, key=str(i).encode(), value=f"value-{i}".encode(), partition=i % partitions,
                         headers=[("h", str(i).encode())])
    assert producer.flush(60) == 0


def committed_records(box, cluster: str, topic: str, partitions: int) -> int:
    """Records a read_committed consumer (admin) sees on `topic`."""
    consumer = Consumer({**props(box, cluster), "group.id": "audit", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    md = consumer.list_topics(topic, timeout=30).topics.get(topic)
    if md is None or md.error is not None:  # not created yet
        consumer.close()
        return 0
    total = 0
    for p in range(partitions):
        low, high = _watermarks(consumer, TopicPartition(topic, p))
        if high > low:
            consumer.assign([TopicPartition(topic, p, low)])
            while True:
                msgs = consumer.consume(1000, timeout=2)
                total += sum(1 for m in msgs if m.error() is None)
                if not msgs:
                    break
    consumer.close()
    return total


def _watermarks(consumer: Consumer, tp: TopicPartition, timeout: float = 30.0) -> tuple[int, int]:
    """Retried as an application would: a topic the job has just created answers NOT_LEADER until its
    leadership reaches the broker asked (a clean-clone run failed on it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=timeout)
        except KafkaException as e:
            if not transient(e.args[0]) or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def keys_by_partition(box, cluster: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, key) of every committed record per partition, read as admin in log order."""
    consumer = Consumer({**props(box, cluster), "group.id": "audit", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "fetch.wait.max.ms": 10})
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        done: set[int] = set()
        deadline = time.monotonic() + 60
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"{topic} on the {cluster}: no end of partitions in 60 s"
            for m in consumer.consume(1000, timeout=1):
                if m.error() is None:
                    out[m.partition()].append((m.offset(), m.key()))
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    done.add(m.partition())
                else:
                    raise KafkaException(m.error())
    finally:
        consumer.close()
    return out


def group_offsets(box, cluster: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The committed offsets of `group` on `topic` (read as admin), partitions without one left out."""
    consumer = Consumer({**props(box, cluster), "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in got if tp.error is None and tp.offset >= 0}


def commit_group(box, cluster: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commits `offsets` for `group` as an application consumer would (as admin)."""
    consumer = Consumer({**props(box, cluster), "group.id": group, "enable.auto.commit": False})
    try:
        commit_member_less(consumer, [TopicPartition(topic, p, o) for p, o in offsets.items()])
    finally:
        consumer.close()


_RESOURCE_TYPES = {"TRANSACTIONALID": "TRANSACTIONAL_ID", "CLUSTER": "BROKER"}  # confluent-kafka's names


def _binding(acl: Acl) -> AclBinding:
    return AclBinding(getattr(ResourceType, _RESOURCE_TYPES.get(acl.resource_type.upper(), acl.resource_type.upper())),
                      acl.resource_name, getattr(ResourcePatternType, acl.pattern_type),
                      acl.principal, "*", getattr(AclOperation, _op(acl.operation)), AclPermissionType.ALLOW)


def _op(operation: str) -> str:
    return {"DescribeConfigs": "DESCRIBE_CONFIGS", "AlterConfigs": "ALTER_CONFIGS",
            "IdempotentWrite": "IDEMPOTENT_WRITE"}.get(operation, operation.upper())


def grant(box, acls: list[Acl]) -> None:
    for cluster in ("source", "target"):
        bindings = [_binding(a) for a in acls if a.cluster == cluster]
        if bindings:
            client = admin(box, cluster)
            for fut in client.create_acls(bindings, request_timeout=30).values():
                fut.result()
    time.sleep(1)  # ACLs reach the authorizer through the metadata log; give it a moment


def revoke_all(box, principal: str) -> None:
    for cluster in ("source", "target"):
        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,
                               AclOperation.ANY, AclPermissionType.ANY)
        client = admin(box, cluster)
        for fut in client.delete_acls([flt], request_timeout=30).values():
            fut.result()
    time.sleep(1)


def write_config(box, path: Path, name: str, topics: str, source_principal: str = "reader",
                 target_principal: str = "writer", **extra) -> Path:
    """A replicator config file as a user writes one: client maps with `${file:...}` references."""
    cfg = {"name": name, "topics": topics, "source_bootstrap_servers": box.source.bootstrap,
           "target_bootstrap_servers": box.target.bootstrap,
           "source": box.client_properties("source", source_principal, by_reference=True),
           "target": box.client_properties("target", target_principal, by_reference=True), **extra}
    path.write_text(yaml.safe_dump(cfg))
    return path


__all__ = ["KafkaException", "admin", "commit_group", "committed_records", "create_topic", "grant", "group_offsets",
           "keys_by_partition", "produce", "props", "revoke_all", "write_config"]
