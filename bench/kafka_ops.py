"""Admin-side helpers: topics, committed end offsets (what a read_committed consumer can see), preload."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from bench import reaper
from replicator.clients.kafka_clients import with_logging
from replicator.sandbox import classpath


def admin(bootstrap: str) -> AdminClient:
    return AdminClient(with_logging({"bootstrap.servers": bootstrap}))


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    a = admin(bootstrap)  # must outlive the future
    fut = a.create_topics([NewTopic(name, partitions, 1)])[name]
    try:
        fut.result(timeout=60)
    except KafkaException as e:
        if "TOPIC_ALREADY_EXISTS" not in str(e):
            raise


def create_topics(bootstrap: str, names: list[str], partitions: int, chunk: int = 200) -> None:
    """Many topics in few CreateTopics requests (one per `chunk` names), all awaited."""
    a = admin(bootstrap)
    for i in range(0, len(names), chunk):
        futs = a.create_topics([NewTopic(n, partitions, 1) for n in names[i:i + chunk]], operation_timeout=120)
        for fut in futs.values():
            try:
                fut.result(timeout=180)
            except KafkaException as e:
                if "TOPIC_ALREADY_EXISTS" not in str(e):
                    raise


def fill_partitions(bootstrap: str, topics: list[str], partitions: int, per_partition: int, size: int) -> float:
    """`per_partition` records of `size` random bytes into every partition of every topic, from one
    idempotent producer (one client instead of one per topic keeps set-up cheap). Returns seconds."""
    from confluent_kafka import Producer

    started = time.monotonic()
    producer = Producer(with_logging({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1048576,
                                      "acks": "all", "enable.idempotence": True,
                                      "queue.buffering.max.kbytes": 256 * 1024}))
    payload = os.urandom(size)
    failed: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failed.append(str(err))

    for topic in topics:
        for p in range(partitions):
            for _ in range(per_partition):
                while True:
                    try:
                        producer.produce(topic, payload, partition=p, on_delivery=delivered)
                        break
                    except BufferError:
                        producer.poll(0.05)
        producer.poll(0)
    if producer.flush(300) or failed:
        raise RuntimeError(f"filling {len(topics)} topics failed: {failed[:3]}")
    return time.monotonic() - started


def delete_topics(bootstrap: str, tag: str) -> None:
    """Deletes every topic whose name contains `tag` (a run's replica and MM2's internal topics)."""
    a = admin(bootstrap)
    names = [t for t in a.list_topics(timeout=30).topics if tag in t]
    for fut in a.delete_topics(names, operation_timeout=60).values() if names else []:
        with contextlib.suppress(KafkaException):  # already gone
            fut.result(timeout=60)


READ_MOST = 10_000  # records one read of `arrived` returns at most


def arrived(consumer, wait: float, most: int = READ_MOST) -> list:
    """Records already fetched, waiting up to `wait` s for the first one. consume(n, timeout) would
    wait for n records or the timeout: at any steady rate that held every record up to the timeout
    before a watcher timed it (25 ms on average at 50 ms)."""
    first = consumer.poll(wait)
    return [first, *consumer.consume(most - 1, 0)] if first is not None else []


def topic_exists(bootstrap: str, name: str) -> bool:
    return name in admin(bootstrap).list_topics(timeout=30).topics


class CommittedEnds:
    """Sum of the last stable offsets of a topic: how many records a read_committed reader can see
    (on a topic written only by one contender, from offset 0; markers are counted, see visible()).

    Polled every 100 ms while contenders create and delete topics, which is where a bench process
    once died of a segmentation fault inside librdkafka. The poll goes through kafka-python, a pure
    Python client: whatever goes wrong there is an exception, and a failed poll is just "not yet"."""

    def __init__(self, bootstrap: str, topic: str, partitions: int,
                 more: tuple[tuple[str, int], ...] = ()) -> None:
        from kafka import KafkaAdminClient

        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=10_000)
        self.topic, self.partitions = topic, partitions
        self.topics = ((topic, partitions), *more)  # summed by total(): a contender writing several topics

    def _ends(self, committed: bool) -> dict[tuple[str, int], int]:
        from kafka import IsolationLevel as Level
        from kafka import TopicPartition as TP
        from kafka.admin import OffsetSpec as Spec

        level = Level.READ_COMMITTED if committed else Level.READ_UNCOMMITTED
        try:
            got = self.admin.list_partition_offsets({TP(t, p): Spec.LATEST for t, n in self.topics for p in range(n)},
                                                    isolation_level=level, timeout_ms=10_000)
            return {(tp.topic, tp.partition): o.offset for tp, o in got.items()}
        except Exception:  # noqa: BLE001 - topic not created yet, leader moving: not yet visible
            return {}

    def ends(self, committed: bool = True) -> dict[int, int]:
        """Partition -> end offset of the first topic."""
        return {p: o for (t, p), o in self._ends(committed).items() if t == self.topic}

    def total(self, committed: bool = True) -> int:
        return sum(self._ends(committed).values())


def preload(bootstrap: str, topic: str, partitions: int, records: int, size: int, log: Path,
            payload_file: Path | None = None, compression: str = "none") -> float:
    """Fills a fresh source topic with ProducerPerformance (random payloads, no keys): the fastest
    loader on the box, so preloading stays a small part of a run. Returns seconds taken.

    `payload_file`: payloads drawn from its lines instead (compressible text, bench/shapes.py), stored
    in batches of `compression`."""
    create_topic(bootstrap, topic, partitions)
    started = time.monotonic()
    # 64 MiB of send buffer keeps the broker busy; 256 MiB in a 512 MiB heap ran out of memory
    # (OutOfMemoryError: Java heap space) on a fresh sandbox, twice in two tries.
    cmd = ["java", "-Xmx768m", "-cp", classpath(), "org.apache.kafka.tools.ProducerPerformance",
           "--topic", topic, "--num-records", str(records),
           *(["--payload-file", str(payload_file)] if payload_file else ["--record-size", str(size)]),
           "--throughput", "-1",
           "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1", "linger.ms=20",
           "batch.size=1048576", f"buffer.memory={64 * 1024 * 1024}", f"compression.type={compression}"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        reaper.watch(proc.pid)
        try:
            rc = proc.wait(timeout=1800)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if rc != 0:
        raise RuntimeError(f"preloading {topic} failed (exit {rc}); see {log}")
    return time.monotonic() - started


def transaction_version(bootstrap: str) -> int:
    """The cluster's finalized `transaction.version`."""
    found = finalized_level(_feature_command(bootstrap, "describe"), "transaction.version")
    if found is None:
        raise RuntimeError(f"{bootstrap} reports no transaction.version feature")
    return found


def set_transaction_version(bootstrap: str, level: int) -> int:
    """Sets the cluster's `transaction.version` to `level`; returns the level it had."""
    previous = transaction_version(bootstrap)
    if level != previous:
        _feature_command(bootstrap, "downgrade" if level < previous else "upgrade", "--feature",
                         f"transaction.version={level}")
    return previous


def _feature_command(bootstrap: str, *args: str) -> str:
    """Kafka's FeatureCommand (librdkafka's admin API cannot change features); its output."""
    cmd = ["java", "-cp", classpath(), "org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", bootstrap, *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=120).stdout


def finalized_level(describe: str, feature: str) -> int | None:
    """`feature`'s finalized level in FeatureCommand's `describe` output (tab-separated `Key: value`)."""
    for line in describe.splitlines():
        fields = dict(f.split(": ", 1) for f in line.split("\t") if ": " in f)
        if fields.get("Feature") == feature:
            return int(fields["FinalizedVersionLevel"])
    return None
