"""Test-side Kafka helpers (real brokers only)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name]
    fut.result(timeout=30)


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0,
             isolation: str = "read_committed") -> dict[int, list]:
    """Every visible record of `topic`, per partition, up to the end offsets seen at call time."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: dict[int, list] = {p: [] for p in range(partitions)}
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_eof) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} from {bootstrap}: only {sorted(at_eof)} reached the end")
            for m in consumer.consume(1000, 0.5):
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF
                        at_eof.add(m.partition())
                        continue
                    raise RuntimeError(m.error())
                at_eof.discard(m.partition())
                out[m.partition()].append(m)
        return out
    finally:
        consumer.close()
