"""Test-side Kafka helpers (real brokers only)."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, IsolationLevel, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from replicator.clients.client_errors import transient


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # -1: the broker's default.replication.factor (1 on one broker, 3 on a multi-broker sandbox).
    fut = admin.create_topics([NewTopic(name, partitions, -1, config=config or {})])[name]
    fut.result(timeout=30)


def topic_names(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def commit_member_less(consumer: Consumer, offsets: list[TopicPartition], timeout: float = 60.0) -> None:
    """Commits as an application does: again while the coordinator says it is busy. A group's first
    commit on a cluster that just started, or on a busy box, meets COORDINATOR_LOAD_IN_PROGRESS while
    the broker loads __consumer_offsets; an application retries that, and so do the tests."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
            return
        except KafkaException as e:
            if not transient(e.args[0]) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0,
             isolation: str = "read_committed") -> dict[int, list]:
    """Every visible record of `topic`, per partition, up to the end offsets seen at call time."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
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


def fake_group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    from replicator.offsets import read_group

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp: c.offset for tp, c in read_group(reader).items()}
    finally:
        reader.close()


def end_offsets(bootstrap: str, topic: str, partitions: int, committed: bool = True) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    return {tp.partition: f.result().offset for tp, f in admin.list_offsets(req, isolation_level=level).items()}


def settled_end_offsets(bootstrap: str, topic: str, partitions: int, timeout: float = 300.0) -> dict[int, int]:
    """The read_committed end once it is final: no transaction open or still being completed.

    commit_transaction() returns once the commit is decided; the markers that move the last stable
    offset land after it. An end read right after the writers stopped could miss their last
    transaction, which the replicator then copied "beyond the end" (a 900 s timeout in the chaos
    harness's wait for the fake group)."""
    deadline = time.monotonic() + timeout
    while True:
        committed = end_offsets(bootstrap, topic, partitions)
        if committed == end_offsets(bootstrap, topic, partitions, committed=False):
            return committed
        if time.monotonic() >= deadline:
            raise AssertionError(f"{topic}: transactions still open after {timeout:.0f} s: last stable "
                                 f"offsets {committed}")
        time.sleep(0.5)


def record_view(m) -> tuple:
    """What must survive replication: key, value, headers (order, duplicates) and timestamp."""
    return (m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1])


def assert_identical(source_bs: str, target_bs: str, topic: str, partitions: int, target_topic: str | None = None):
    src = read_all(source_bs, topic, partitions)
    dst = read_all(target_bs, target_topic or topic, partitions)
    for p in range(partitions):
        a = [record_view(m) for m in src[p]]
        b = [record_view(m) for m in dst[p]]
        assert len(b) == len(a), f"partition {p}: source has {len(a)} records, target {len(b)}"
        assert a == b, f"partition {p}: target differs from source (first diff at " \
                       f"{next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)})"
    return sum(len(v) for v in src.values())


def produce_records(producer: Producer, topic: str, records: list[tuple]) -> None:
    """Produces (partition, key, value, headers, timestamp) tuples, waiting when the queue is full."""
    for partition, key, value, headers, ts in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition, headers=headers, timestamp=ts)
                break
            except BufferError:
                producer.poll(0.1)


def produce_transactional(bootstrap: str, topic: str, records: list[tuple], txn_id: str,
                          per_txn: int = 1000, abort_every: int = 0) -> int:
    """Produces (partition, key, value, headers, timestamp) tuples in transactions; every
    `abort_every`-th transaction is aborted. Returns the number of committed records."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 10})
    producer.init_transactions(60)
    committed = 0
    written: dict[int, int] = {}
    for n, i in enumerate(range(0, len(records), per_txn), start=1):
        chunk = records[i:i + per_txn]
        producer.begin_transaction()
        produce_records(producer, topic, chunk)
        # Kafka 4.1 (transaction.version 2) + librdkafka 2.16: ending a transaction with records
        # still in flight fails with INVALID_TXN_STATE; flushing first avoids it.
        producer.flush(60)
        if i + per_txn >= len(records):
            written = _high_watermarks(bootstrap, topic, {r[0] for r in chunk})
        if abort_every and n % abort_every == 0:
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
            committed += len(chunk)
    _wait_for_markers(bootstrap, topic, written)
    return committed


def _high_watermarks(bootstrap: str, topic: str, partitions: set[int]) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}
    return {tp.partition: f.result().offset for tp, f in admin.list_offsets(req).items()}


def _wait_for_markers(bootstrap: str, topic: str, written: dict[int, int], timeout: float = 60.0) -> None:
    """Returns once the last transaction's markers are in its partitions' logs.

    commit_transaction() returns once the commit is decided; the markers land after it. An end
    offset read in between misses the marker, and a test waiting for the fake group to reach that
    end waits forever: the group is at the marker + 1 (300 s timeout in
    test_target_topic_with_too_few_partitions_is_grown_before_any_write in CI). The last
    stable offset passes the transaction's records only once its marker is written."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while written and time.monotonic() < deadline:
        req = {TopicPartition(topic, p): OffsetSpec.latest() for p in written}
        stable = admin.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED)
        if all(f.result().offset >= written[tp.partition] for tp, f in stable.items()):
            return
        time.sleep(0.05)
    # Another writer's open transaction on the same partitions holds the stable offset back; the
    # caller reads ends with that writer in mind (settled_end_offsets).
