"""Replication lag computed from the clusters themselves: source last stable offset minus the next
offset committed in the fake group on the target. Exact, and available whether the job runs or not."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from confluent_kafka import KafkaError, TopicPartition

from replicator.clients import kafka_clients
from replicator.clients.client_errors import while_retriable
from replicator.clients.kafka_python_clients import client_settings, close_quietly
from replicator.config import ReplicatorConfig
from replicator.topics.sync import TopicMapping


@dataclass(frozen=True)
class PartitionLag:
    source_topic: str
    target_topic: str
    partition: int
    source_end: int  # last stable offset (read_committed end) of the source partition
    committed: int  # next source offset the fake group says to copy; -1 when nothing yet
    log_start: int  # looked up only where it decides the lag: committed == -1 (0 elsewhere)
    # Timestamp of the oldest committed source record not yet replicated: -1 when there is none
    # (caught up, or only markers and aborted records remain), None when not looked up.
    oldest_timestamp_ms: int | None = None

    @property
    def resume(self) -> int:
        return self.committed if self.committed >= 0 else self.log_start

    @cached_property  # asked several times per partition per lookup (sums, gauges, ages)
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


class LagUnavailable(RuntimeError):
    """A cluster did not answer a lag lookup; the message says which call and why. `retriable`: the
    cluster said "not now" (a coordinator loading, a leader moving), not "no"."""

    def __init__(self, message: str, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class LagReader:
    """Lag lookups with clients kept between them (a running job asks every few seconds).

    Three list requests answer a lookup whatever the partition count: the source's last stable
    offsets, the fake group's committed offsets and, only for partitions the group has never
    committed, the source's log starts. kafka-python, not confluent-kafka: its per-partition futures
    cost ~500 ms of CPU per lookup at 5,000 partitions against ~50 ms here, which was most of an idle
    job's CPU (BENCHMARKS.md). The group is read without require_stable: a transaction's offsets
    count once it committed, when its records are visible.

    Between full reads (every FULL_GROUP_READ_S) the group is asked only for the partitions that
    were not settled at the last lookup (committed == end) or whose source end moved since: a settled
    partition stays settled until its source grows, because the job never moves a committed offset
    past the end nor back. Decoding all 5,000 entries every 5 s was the largest part of an idle job's
    lag lookup (py-spy, BENCHMARKS.md). What this can miss for up to FULL_GROUP_READ_S: the group
    deleted or reset behind the job's back.

    A running job also passes the partitions its shard tasks report settled (`ControlServer.settled`):
    between full reads those are not asked about at all, so an idle job's lookups cost nothing per
    partition (asking the source's ends of 5,000 idle partitions every 5 s was most of an idle
    driver's CPU). What that can miss for up to FULL_GROUP_READ_S: source records a task has not
    fetched although the driver could have looked them up (the source reachable from the driver
    only).
    """

    FULL_GROUP_READ_S = 60.0

    def __init__(self, cfg: ReplicatorConfig, timeout_s: float = 30.0) -> None:
        from kafka import KafkaAdminClient

        self.group = cfg.group
        self._source = self._target = None
        # (source topic, partitions) the source client has looked up; None: a new client, nothing yet
        self._shape: set[tuple[str, int]] | None = None
        # (target topic, partition) -> the source end its committed offset equalled at the last lookup
        self._settled: dict[tuple[str, int], int] = {}
        self._next_full_read = 0.0
        self._known: dict[tuple[str, int], PartitionLag] = {}  # settled partitions' lags, reused while unchanged

        def settings(role: str) -> dict:
            return {**client_settings(cfg.client_properties(role), getattr(cfg, f"{role}_bootstrap_servers")),
                    "request_timeout_ms": int(timeout_s * 1000), "bootstrap_timeout_ms": int(timeout_s * 1000)}

        self._settings = settings
        self._new_target = lambda: KafkaAdminClient(**settings("target"))
        try:
            self._source = self._new_source()
            self._target = self._new_target()
        except Exception as e:  # noqa: BLE001 - kafka-python's errors: the lookup is unavailable, nothing more
            self.close()
            raise LagUnavailable(f"cannot reach the {'target' if self._source else 'source'} cluster: {e}") from None

    def _new_source(self):
        from kafka import KafkaConsumer

        return KafkaConsumer(**self._settings("source"), group_id=None, enable_auto_commit=False,
                             isolation_level="read_committed")

    def lags(self, mappings: list[TopicMapping], settled: Mapping[tuple[str, int], int] | None = None
             ) -> list[PartitionLag]:
        """`settled`: (source topic, partition) -> the offset at which both the source's end and the
        group stand, as the job's shard tasks reported; looked up only at full reads."""
        every = [(m.source, m.target, p) for m in mappings for p in range(m.partitions)]
        if not every:
            return []
        full = time.monotonic() >= self._next_full_read
        known, known_lags = self._known, {}
        if settled and not full:
            for s, t, p in every:
                if (offset := settled.get((s, p))) is not None:
                    x = known.get((s, p))
                    if x is None or x.source_end != offset or x.target_topic != t:
                        x = PartitionLag(s, t, p, offset, offset, 0, -1)
                    known_lags[(s, p)] = x
        self._known = known_lags
        tps = [x for x in every if (x[0], x[2]) not in known_lags] if known_lags else every
        looked_up = {(x.source_topic, x.partition): x for x in self._look_up(mappings, tps, full)} if tps else {}
        if full:
            self._next_full_read = time.monotonic() + self.FULL_GROUP_READ_S
        return [known_lags.get((s, p)) or looked_up[(s, p)] for s, _, p in every]

    def _look_up(self, mappings: list[TopicMapping], tps: list[tuple[str, str, int]], full: bool
                 ) -> list[PartitionLag]:
        from kafka import TopicPartition as Tp

        try:
            shape = {(m.source, m.partitions) for m in mappings}
            if shape != self._shape:
                # kafka-python's consumer keeps asking for the metadata of every topic it was ever
                # asked about (a deleted one logs an error at every refresh) and answers a partition
                # it has no metadata for yet with a KeyError: a new client for a new topic set.
                if self._shape is not None:
                    self._source.close()
                    self._source = self._new_source()
                self._shape = shape
            ends = self._source.end_offsets([Tp(s, p) for s, _, p in tps])
            committed = {(t, p): end for s, t, p in tps
                         if not full and self._settled.get((t, p)) == (end := ends[Tp(s, p)])}
            ask = [Tp(t, p) for _, t, p in tps if (t, p) not in committed]
            if ask:
                if self._target is None:
                    self._target = self._new_target()
                offsets = self._target.list_group_offsets({self.group: ask}).get(self.group, {})
                committed.update({(tp.topic, tp.partition): o.offset for tp, o in offsets.items()})
            never = [Tp(s, p) for s, t, p in tps if committed.get((t, p), -1) < 0]
            starts = self._source.beginning_offsets(never) if never else {}
            lags = [PartitionLag(s, t, p, ends[Tp(s, p)], committed.get((t, p), -1), starts.get(Tp(s, p), 0))
                    for s, t, p in tps]
            settled_now = {(x.target_topic, x.partition): x.source_end for x in lags
                           if x.committed >= 0 and x.committed == x.source_end}
            if full:
                self._settled = settled_now
            else:  # only what was asked is replaced: the tasks reported the rest settled
                for _, t, p in tps:
                    self._settled.pop((t, p), None)
                self._settled.update(settled_now)
            return lags
        except Exception as e:  # noqa: BLE001 - kafka-python raises KeyError too (test_topics); the job copies on
            self._shape = set()  # never equal to a real shape: the next lookup starts with a new client
            self._settled = {}
            # And a new target client: kafka-python 3.0 never forgets a group's coordinator, so after
            # the coordinator moved every lookup failed NOT_COORDINATOR until the job stopped.
            target, self._target = self._target, None
            close_quietly(target)
            raise LagUnavailable(f"{type(e).__name__}: {e}", bool(getattr(e, "retriable", False))) from None

    def close(self) -> None:
        for client in (self._source, self._target):
            if client is not None:
                client.close()


def partition_lags(cfg: ReplicatorConfig, mappings: list[TopicMapping], timeout_s: float = 60.0
                   ) -> list[PartitionLag]:
    """One lookup with clients of its own (`LagReader` keeps them between lookups), retried while the
    clusters answer "not now": a new cluster has no group coordinator until __consumer_offsets exists."""
    if not mappings:
        return []
    reader = LagReader(cfg)
    try:
        return while_retriable(lambda: reader.lags(mappings), timeout_s, "the lag lookup", first_wait=0.5,
                               max_wait=0.5)
    finally:
        reader.close()


def with_ages(cfg: ReplicatorConfig, lags: list[PartitionLag], timeout: float = 10.0,
              seen: AgesSeen | None = None) -> list[PartitionLag]:
    """`lags` with `oldest_timestamp_ms` filled in: the read_committed record at each lagging
    partition's resume offset is the oldest one still to copy (markers and aborted records are
    skipped by the consumer, which is what "committed" means here). Partitions whose record could
    not be read in `timeout` keep None. `seen` carries what earlier lookups found (a running job's
    every progress line): a partition whose resume offset has not moved since is not read again."""
    lagging = {(x.source_topic, x.partition): x for x in lags if x.records > 0}
    found: dict[tuple[str, int], int] = seen.known(lagging) if seen is not None else {}
    unread = {tp: x for tp, x in lagging.items() if tp not in found}
    if unread:
        consumer = kafka_clients.source_peeker(cfg)
        try:
            consumer.assign([TopicPartition(t, p, x.resume) for (t, p), x in unread.items()])
            deadline = time.monotonic() + timeout
            while len(found) < len(lagging) and time.monotonic() < deadline:
                for m in consumer.consume(len(unread), 0.5):
                    tp = (m.topic(), m.partition())
                    if tp not in unread or tp in found:
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
    if seen is not None:
        seen.remember(lagging, found)
    return [x if x.records == 0 and x.oldest_timestamp_ms == -1 else
            dataclasses.replace(x, oldest_timestamp_ms=found.get((x.source_topic, x.partition),
                                                                 None if x.records > 0 else -1))
            for x in lags]


class AgesSeen:
    """The oldest record's timestamp per partition and the resume offset it was read at, from the
    last lookup. The first committed record at or after an offset does not change once it exists
    (unless retention or compaction removes it: the age then stays that record's until the copy
    moves), so while a partition's copy stands still its age is known without a read. Each read
    costs a record batch per partition (`kafka_clients.source_peeker`), and across a WAN link the
    copy's own reads share that link. Only records found are kept: "nothing committed after the
    resume offset" (-1) stops being true when the next record arrives."""

    def __init__(self) -> None:
        self._at: dict[tuple[str, int], tuple[int, int]] = {}  # (topic, partition) -> (resume, timestamp)

    def known(self, lagging: Mapping[tuple[str, int], PartitionLag]) -> dict[tuple[str, int], int]:
        return {tp: self._at[tp][1] for tp, x in lagging.items() if self._at.get(tp, (None,))[0] == x.resume}

    def remember(self, lagging: Mapping[tuple[str, int], PartitionLag], found: Mapping[tuple[str, int], int]) -> None:
        self._at = {tp: (lagging[tp].resume, ts) for tp, ts in found.items() if ts >= 0}
