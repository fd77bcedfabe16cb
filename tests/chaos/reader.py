"""A read_committed consumer of the target that runs during the faults, as an application would.

It keeps O(streams) state: within one target partition, the values of each source stream (one per
VerifiableProducer input partition, plus the trickle writer) must strictly increase. A duplicate or
a reordering breaks that; a value of a confirmed-aborted transaction must never appear; at the end,
the counts say whether anything is missing.

librdkafka's `assign()` consumer can stop fetching for good after its broker is killed and restarted
(confluentinc/librdkafka#5153, open): alive, no error, position frozen below the last stable
offset. `restart()` replaces the consumer with a new one at the same positions, as an application
restarting its consumer would; the order and duplicate checks run on across it. Its librdkafka
statistics (the partitions' fetch states) are kept, so a stall says where the client stood.
"""

from __future__ import annotations

import json
import threading
import time
from array import array
from collections import Counter

from confluent_kafka import Consumer, KafkaError, TopicPartition


class ConcurrentReader(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, partitions: int, partition_of: array) -> None:
        super().__init__(daemon=True, name="concurrent-reader")
        self.topic, self.partitions, self.partition_of = topic, partitions, partition_of
        self.bootstrap = bootstrap
        self.consumer = self._consumer()
        self.stop = threading.Event()
        self._restart = threading.Event()
        self.restarts = 0
        self.records = 0
        self.positions: dict[int, int] = {}
        self.moved_at = time.monotonic()  # when a position last changed
        self.fetch_states: dict[int, dict] = {}  # partition -> librdkafka's view of it, from its statistics
        self.last: dict[tuple, int] = {}  # (target partition, stream) -> last value
        self.seen = Counter()  # stream -> values seen
        self.seen_trickle: set[int] = set()
        self.out_of_order: list[str] = []
        self.errors: list[str] = []

    def _consumer(self) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"chaos-reader-{self.topic}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": False, "statistics.interval.ms": 5000,
                         "stats_cb": self._statistics})

    def _statistics(self, text: str) -> None:
        parts = json.loads(text).get("topics", {}).get(self.topic, {}).get("partitions", {})
        self.fetch_states = {int(p): {k: v.get(k) for k in ("leader", "fetch_state", "fetchq_cnt", "next_offset",
                                                            "app_offset", "ls_offset", "hi_offset")}
                             for p, v in parts.items() if int(p) >= 0}

    def restart(self) -> None:
        """A new consumer at the current positions, made on the reader's own thread; the stall clock
        starts again for it."""
        self.moved_at = time.monotonic()
        self._restart.set()

    def _assign(self) -> None:
        self.consumer.assign([TopicPartition(self.topic, p, self.positions.get(p, 0))
                              for p in range(self.partitions)])

    def run(self) -> None:
        self._assign()
        while not self.stop.is_set():
            if self._restart.is_set():
                self.consumer.close()
                self.consumer = self._consumer()
                self._assign()
                self.restarts += 1
                self._restart.clear()
            for m in self.consumer.consume(2000, 0.5):
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF and not m.error().retriable():
                        self.errors.append(str(m.error()))
                    continue
                self._check(m)
            # The read_committed position steps over commit markers, unlike the last record's offset.
            for tp in self.consumer.position([TopicPartition(self.topic, p) for p in range(self.partitions)]):
                if tp.offset >= 0 and tp.offset != self.positions.get(tp.partition):
                    self.positions[tp.partition] = tp.offset
                    self.moved_at = time.monotonic()
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
