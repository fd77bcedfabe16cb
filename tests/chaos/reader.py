"""A read_committed consumer of the target that runs during the faults, as an application would.

It keeps O(streams) state: within one target partition, the values of each source stream (one per
VerifiableProducer input partition, plus the trickle writer) must strictly increase. A duplicate or
a reordering breaks that; a value of a confirmed-aborted transaction must never appear; at the end,
the counts say whether anything is missing.
"""

from __future__ import annotations

import threading
from array import array
from collections import Counter

from confluent_kafka import Consumer, KafkaError, TopicPartition


class ConcurrentReader(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, partitions: int, partition_of: array) -> None:
        super().__init__(daemon=True, name="concurrent-reader")
        self.topic, self.partitions, self.partition_of = topic, partitions, partition_of
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-reader-{topic}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "enable.partition.eof": False})
        self.stop = threading.Event()
        self.records = 0
        self.positions: dict[int, int] = {}
        self.last: dict[tuple, int] = {}  # (target partition, stream) -> last value
        self.seen = Counter()  # stream -> values seen
        self.seen_trickle: set[int] = set()
        self.out_of_order: list[str] = []
        self.errors: list[str] = []

    def run(self) -> None:
        self.consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        while not self.stop.is_set():
            for m in self.consumer.consume(2000, 0.5):
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF and not m.error().retriable():
                        self.errors.append(str(m.error()))
                    continue
                self._check(m)
            # The read_committed position steps over commit markers, unlike the last record's offset.
            for tp in self.consumer.position([TopicPartition(self.topic, p) for p in range(self.partitions)]):
                if tp.offset >= 0:
                    self.positions[tp.partition] = tp.offset
        self.consumer.close()

    def _check(self, m) -> None:
        self.records += 1
        text = m.value().decode()
        if text.startswith("a-"):
            stream, value = "trickle", int(text[2:])
            self.seen_trickle.add(value)
        else:
            value = int(text)
            stream = f"vp-{self.partition_of[value]}"
        key = (m.partition(), stream)
        previous = self.last.get(key, -1)
        if value <= previous and len(self.out_of_order) < 20:
            self.out_of_order.append(f"{self.topic}[{m.partition()}]@{m.offset()}: {stream} value {value} "
                                     f"after {previous}")
        self.last[key] = max(previous, value)
        self.seen[stream] += 1

    def caught_up_to(self, ends: dict[int, int]) -> bool:
        return all(self.positions.get(p, 0) >= end for p, end in ends.items() if end > 0)
