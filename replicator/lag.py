"""Replication lag computed from the clusters themselves: source last stable offset minus the next
offset committed in the fake group on the target. Exact, and available whether the job runs or not."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, IsolationLevel, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from replicator import kafka_clients
from replicator.config import ReplicatorConfig
from replicator.kafka_clients import group_reader
from replicator.offsets import read_group
from replicator.topic_sync import TopicMapping


@dataclass(frozen=True)
class PartitionLag:
    source_topic: str
    target_topic: str
    partition: int
    source_end: int  # last stable offset (read_committed end) of the source partition
    committed: int  # next source offset the fake group says to copy; -1 when nothing yet
    log_start: int
    # Timestamp of the oldest committed source record not yet replicated: -1 when there is none
    # (caught up, or only markers and aborted records remain), None when not looked up.
    oldest_timestamp_ms: int | None = None

    @property
    def resume(self) -> int:
        return self.committed if self.committed >= 0 else self.log_start

    @property
    def records(self) -> int:
        # Offsets, not records: markers and aborted records take offsets too. It reaches 0 exactly
        # when everything committed on the source has been copied.
        return max(0, self.source_end - self.resume)

    def seconds(self, now: float | None = None) -> float | None:
        """Age of the oldest not-yet-replicated committed record; 0 when caught up, None if unknown."""
        if self.records == 0 or self.oldest_timestamp_ms == -1:
            return 0.0
        if self.oldest_timestamp_ms is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.oldest_timestamp_ms / 1000)


def partition_lags(cfg: ReplicatorConfig, source: AdminClient, target: AdminClient,
                   mappings: list[TopicMapping], reader: Consumer | None = None) -> list[PartitionLag]:
    """`reader`: a `group_reader` the caller keeps between lookups (a running job asks every few
    seconds; a new client would open new connections to every target broker each time)."""
    tps = [(m.source, m.target, p) for m in mappings for p in range(m.partitions)]
    if not tps:
        return []
    req = {TopicPartition(s, p): OffsetSpec.latest() for s, _, p in tps}
    ends = {(tp.topic, tp.partition): f.result().offset for tp, f in
            source.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30).items()}
    req = {TopicPartition(s, p): OffsetSpec.earliest() for s, _, p in tps}
    starts = {(tp.topic, tp.partition): f.result().offset for tp, f in
              source.list_offsets(req, request_timeout=30).items()}
    own = reader is None
    reader = reader or group_reader(cfg)
    try:
        committed = read_group(reader, {m.target for m in mappings})
    finally:
        if own:
            reader.close()
    return [PartitionLag(s, t, p, ends[(s, p)],
                         committed[(t, p)].offset if (t, p) in committed else -1, starts[(s, p)])
            for s, t, p in tps]


def with_ages(cfg: ReplicatorConfig, lags: list[PartitionLag], timeout: float = 10.0) -> list[PartitionLag]:
    """`lags` with `oldest_timestamp_ms` filled in: the read_committed record at each lagging
    partition's resume offset is the oldest one still to copy (markers and aborted records are
    skipped by the consumer, which is what "committed" means here). Partitions whose record could
    not be read in `timeout` keep None."""
    lagging = {(x.source_topic, x.partition): x for x in lags if x.records > 0}
    found: dict[tuple[str, int], int] = {}
    if lagging:
        consumer = kafka_clients.source_consumer(cfg)
        try:
            consumer.assign([TopicPartition(t, p, x.resume) for (t, p), x in lagging.items()])
            deadline = time.monotonic() + timeout
            while len(found) < len(lagging) and time.monotonic() < deadline:
                for m in consumer.consume(len(lagging), 0.5):
                    tp = (m.topic(), m.partition())
                    if tp not in lagging or tp in found:
                        continue
                    err = m.error()
                    if err is None:
                        # A record past the end seen by the lag lookup is not part of that lag.
                        found[tp] = m.timestamp()[1] if m.offset() < lagging[tp].source_end else -1
                    elif err.code() == KafkaError._PARTITION_EOF:
                        found[tp] = -1
                    consumer.pause([TopicPartition(*tp)])
        finally:
            consumer.close()
    return [dataclasses.replace(x, oldest_timestamp_ms=found.get((x.source_topic, x.partition),
                                                                 None if x.records > 0 else -1))
            for x in lags]
