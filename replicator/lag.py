"""Replication lag computed from the clusters themselves: source last stable offset minus the next
offset committed in the fake group on the target. Exact, and available whether the job runs or not."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from replicator.config import ReplicatorConfig
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

    @property
    def records(self) -> int:
        # Offsets, not records: markers and aborted records take offsets too. It reaches 0 exactly
        # when everything committed on the source has been copied.
        resume = self.committed if self.committed >= 0 else self.log_start
        return max(0, self.source_end - resume)


def partition_lags(cfg: ReplicatorConfig, source: AdminClient, target: AdminClient,
                   mappings: list[TopicMapping]) -> list[PartitionLag]:
    tps = [(m.source, m.target, p) for m in mappings for p in range(m.partitions)]
    if not tps:
        return []
    req = {TopicPartition(s, p): OffsetSpec.latest() for s, _, p in tps}
    ends = {(tp.topic, tp.partition): f.result().offset for tp, f in
            source.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30).items()}
    req = {TopicPartition(s, p): OffsetSpec.earliest() for s, _, p in tps}
    starts = {(tp.topic, tp.partition): f.result().offset for tp, f in
              source.list_offsets(req, request_timeout=30).items()}
    committed = read_group(target, cfg.group)
    return [PartitionLag(s, t, p, ends[(s, p)],
                         committed[(t, p)].offset if (t, p) in committed else -1, starts[(s, p)])
            for s, t, p in tps]
