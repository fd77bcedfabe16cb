"""Many partitions: TOPICS x PARTITIONS small source topics (e.g. 100 x 8), a fixed number of records
in every partition, one contender started cold on all of them (a regex), and:

- time from launch until every record is visible on the target (a read_committed consumer that
  picks up target partitions as they appear and counts records; start-up and topic creation included);
- then, with nothing new arriving, the process tree's CPU over an idle window (% of one core) and its
  peak RSS in that window: what planning, lag lookups and idle refreshes cost when nothing changes.

The count must come out exactly right: more records than written means duplicates on the target.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from bench import kafka_ops
from bench.contenders import Contender, Job
from replicator.clients.kafka_clients import with_logging

CONTENDERS = ("replicator-eos", "mm2-eos")
POLL_S = 0.5


@dataclass
class Many:
    contender: str
    topics: int
    partitions: int  # per topic
    records: int  # in all
    run: int
    ok: bool = False
    visible_s: float = 0.0  # launch -> every record visible to read_committed
    idle_s: float = 0.0  # length of the idle window
    idle_cpu_pct: float = 0.0  # CPU of the process tree in the idle window, % of one core
    idle_peak_rss_mb: float = 0.0
    peak_rss_mb: float = 0.0  # launch to the end of the idle window
    peak_pss_mb: float = 0.0
    counted: int = 0  # records the reader saw (== records, or duplicates/losses)
    error: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


class Counter(threading.Thread):
    """read_committed reader of every target topic starting with `prefix`, assigned from offset 0 as
    they appear; counts records and remembers when the count first reached `expected`."""

    def __init__(self, bootstrap: str, prefix: str, expected: int) -> None:
        super().__init__(daemon=True, name="many-counter")
        self.bootstrap, self.prefix, self.expected = bootstrap, prefix, expected
        self.count = 0
        self.done_at: float | None = None
        self.stop_flag = threading.Event()

    def run(self) -> None:
        c = Consumer(with_logging({"bootstrap.servers": self.bootstrap, "group.id": "bench-many-counter",
                                   "enable.auto.commit": False, "isolation.level": "read_committed",
                                   "fetch.wait.max.ms": 50}))
        assigned: set[str] = set()
        next_scan = 0.0
        try:
            while not self.stop_flag.is_set():
                if time.monotonic() >= next_scan:
                    next_scan = time.monotonic() + 1.0
                    try:
                        topics = c.list_topics(timeout=10).topics
                    except KafkaException:  # a busy broker with 5,000 partitions: scan again
                        topics = {}
                    new = [t for name, t in topics.items()
                           if name.startswith(self.prefix) and name not in assigned and t.error is None
                           and t.partitions]
                    if new:
                        c.incremental_assign([TopicPartition(t.topic, p, 0) for t in new for p in t.partitions])
                        assigned.update(t.topic for t in new)
                if not assigned:
                    self.stop_flag.wait(0.2)
                    continue
                got = sum(1 for m in kafka_ops.arrived(c, 0.1) if m.error() is None)
                self.count += got
                if self.done_at is None and self.count >= self.expected:
                    self.done_at = time.monotonic()
        finally:
            c.close()


def source_topics(stamp: str, topics: int) -> list[str]:
    return [f"many-{stamp}-{i:04d}" for i in range(topics)]


def prepare(bootstrap: str, stamp: str, topics: int, partitions: int, per_partition: int, size: int) -> float:
    """Creates and fills the source topics; returns seconds taken."""
    names = source_topics(stamp, topics)
    started = time.monotonic()
    kafka_ops.create_topics(bootstrap, names, partitions)
    kafka_ops.fill_partitions(bootstrap, names, partitions, per_partition, size)
    return time.monotonic() - started


def measure(contender: Contender, job: Job, run: int, topics: int, idle_s: float, timeout: float) -> Many:
    """`job.topics_regex` selects the source topics, `job.records` is the total they hold."""
    result = Many(contender.key, topics, job.partitions, job.records, run)
    counter = Counter(job.target, f"{job.tag}.many-", job.records)
    counter.start()
    launched = time.monotonic()
    tree = contender.launch(job)
    try:
        while counter.done_at is None:
            tree.sample()
            if time.monotonic() - launched > timeout:
                result.error = f"timed out after {timeout:.0f}s with {counter.count} of {job.records} visible"
                return result
            if not tree.running():
                result.error = f"exited {tree.proc.returncode} with {counter.count} visible: {tree.tail(8)}"
                return result
            time.sleep(POLL_S)
        result.visible_s = counter.done_at - launched
        cpu0, idle_peak = tree.sample()
        cpu, idle_started = cpu0, time.monotonic()
        while time.monotonic() - idle_started < idle_s and tree.running():
            time.sleep(1.0)
            cpu, rss = tree.sample()
            idle_peak = max(idle_peak, rss)
        result.idle_s = time.monotonic() - idle_started
        result.idle_cpu_pct = 100 * (cpu - cpu0) / max(result.idle_s, 1e-9)
        result.idle_peak_rss_mb = idle_peak / 2**20
        result.counted = counter.count
        if not tree.running():
            result.error = f"exited {tree.proc.returncode} while idle: {tree.tail(8)}"
        elif counter.count != job.records:
            result.error = f"read {counter.count} records on the target, {job.records} written to the source"
        else:
            result.ok = True
        return result
    finally:
        tree.stop()
        counter.stop_flag.set()
        counter.join(15)
        result.peak_rss_mb = tree.peak_rss / 2**20
        result.peak_pss_mb = tree.peak_pss / 2**20
