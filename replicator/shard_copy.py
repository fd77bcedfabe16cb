"""The data path: one shard's exactly-once copy, read -> produce -> commit offsets -> commit.

A shard owns a fixed set of source partitions and one static transactional.id on the target. Each
call copies the planned ranges up to their end offsets:

1. a fresh producer with the shard's transactional.id calls `init_transactions()`, which fences any
   other holder of the id (zombie instance, earlier task attempt) and resolves its open transaction;
2. the fake group's offsets are read back from the target: that, not Spark's plan, says where each
   partition resumes, so replayed ranges are never copied twice;
3. records are consumed read_committed from the source and produced to the same partition number
   with key, value, headers and timestamp, in transactions bounded by records and time;
4. each transaction carries, via `send_offsets_to_transaction`, the next source offset of every
   partition it advanced, so data and position commit atomically; and, produced after the data's
   delivery reports and before those offsets, one translation index entry per partition it copied
   records of (`replicator.groups.index`): visible exactly when the data is.

Any Kafka error in the transaction drops the producer and starts again at step 1: whatever happened
before (commit or not), the re-read offsets tell the truth.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from replicator import kafka_clients, transactional_ids
from replicator.client_errors import Outcome, classify
from replicator.config import ReplicatorConfig
from replicator.groups import index
from replicator.offsets import NO_OFFSET, CommitMetadata, read_committed
from replicator.replication_policy import Provenance

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 6
STALL_TIMEOUT_S = 120.0
_OFFSET_BEGINNING = -2
_LATENCY_SAMPLES_PER_TXN = 8
_CONSUME_BATCH = 10_000


class DataLossError(RuntimeError):
    """Retention deleted source records before they were replicated (on_data_loss=fail)."""


class InjectedFault(RuntimeError):
    """Test-only failure (REPLICATOR_TEST_FAULT) to prove task retries stay exact."""


@dataclass(frozen=True)
class CopyRange:
    source_topic: str
    target_topic: str
    partition: int
    start: int  # planned start: used only where the fake group holds nothing yet
    end: int  # exclusive; a last stable offset of the source when planned


@dataclass
class CopyStats:
    records: int = 0
    bytes: int = 0
    transactions: int = 0
    aborted: int = 0
    fenced: int = 0
    producer_recreations: int = 0
    data_loss_events: int = 0
    refreshed: int = 0  # idle partitions whose unchanged offsets were re-committed
    transaction_seconds: list[float] = field(default_factory=list)
    latency_seconds: list[float] = field(default_factory=list)
    # "topic|partition" -> [records, bytes, next source offset, commit unix time]
    partitions: dict[str, list] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _PartitionState:
    r: CopyRange
    next: int  # next source offset to copy (or _OFFSET_BEGINNING until the first record)
    promised: bool  # the fake group held an offset: a gap below the log start is data loss
    meta: CommitMetadata
    done: bool = False
    dirty: bool = False  # advanced in the open transaction
    records: int = 0
    bytes: int = 0
    first_ts: int = -1
    last_ts: int = -1
    pair: tuple[int, int] | None = None  # last (source offset, target offset) acknowledged
    # For the translation index, per open transaction: where the partition stood when it began, the
    # (source, target) offsets of its first copied record, and the source offsets it skipped.
    txn_begin: int = -1
    first_pair: tuple[int, int] | None = None
    gaps: list[int] = field(default_factory=list)  # flat [start, end, start, end, ...]
    delivery_error: KafkaError | None = None  # the target refused a record of the open transaction

    def skip_to(self, offset: int) -> None:
        """Moves the position over source offsets that are not copied (markers, aborted or compacted
        records, a data-loss jump, the end of the range): the index records them as a gap."""
        if 0 <= self.next < offset:
            self.gaps += (self.next, offset)
        self.next = offset


# Cached per Python worker: consumers keep warm connections between micro-batches. Producers are
# NOT cached: each task uses two Python workers (reader and writer) taken from Spark's idle pool, so
# a shard rarely comes back to the worker that last initialised its transactional.id (measured: 2 %
# of tasks), and a stale producer is fenced anyway; a fresh one costs ~18 ms.
_consumers: dict[str, Consumer] = {}
_group_readers: dict[str, Consumer] = {}
_cluster_ids: dict[str, str] = {}


def _cached(cache: dict[str, Consumer], key: str, factory) -> Consumer:
    if key not in cache:
        cache[key] = factory()
    return cache[key]


class ShardCopier:
    def __init__(self, cfg: ReplicatorConfig, shard: int, fault: str | None = None) -> None:
        self.cfg = cfg
        self.shard = shard
        self.txn_id = transactional_ids.shard_id(cfg.name, shard)
        self.fault = fault
        key = cfg.to_json()
        self.consumer = _cached(_consumers, key, lambda: kafka_clients.source_consumer(cfg))
        self.group = _cached(_group_readers, key, lambda: kafka_clients.group_reader(cfg))
        if key not in _cluster_ids:
            _cluster_ids[key] = self.consumer.list_topics(timeout=30).cluster_id or "unknown"
        self.source_cluster = _cluster_ids[key]
        self.provenance = self._provenance(key) if cfg.provenance_header else None
        self.index_partitions = self._index_partitions(key) if cfg.translation_index and cfg.exactly_once else 0
        self.stats = CopyStats()

    def _provenance(self, key: str) -> Provenance:
        if key + "|target" not in _cluster_ids:
            _cluster_ids[key + "|target"] = self.group.list_topics(timeout=30).cluster_id or "unknown"
        return Provenance(self.source_cluster, _cluster_ids[key + "|target"])

    def _index_partitions(self, key: str) -> int:
        topic = index.index_topic(self.cfg.name)
        if key + "|index" not in _cluster_ids:
            md = self.group.list_topics(topic, timeout=30).topics.get(topic)
            if md is None or md.error is not None or not md.partitions:
                raise RuntimeError(f"the translation index topic {topic!r} is missing on the target (the job "
                                   f"creates it at start; translation_index=false turns the index off)")
            _cluster_ids[key + "|index"] = str(len(md.partitions))
        return int(_cluster_ids[key + "|index"])

    def copy(self, ranges: list[CopyRange], refresh: list[tuple[str, str, int]] | None = None) -> CopyStats:
        """Copies `ranges`, then re-commits the unchanged offsets of the idle partitions in `refresh`
        (source topic, target topic, partition) so the group never expires them."""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            producer = None
            try:
                producer = self._new_producer()
                self._copy_with(producer, ranges)
                if refresh:
                    self._refresh(producer, refresh)
                return self.stats
            except KafkaException as e:
                err = e.args[0]
                outcome = classify(err)
                if outcome is Outcome.FATAL:
                    # Retrying cannot help (a record too large, a missing permission). The open
                    # transaction is aborted by the next init_transactions() (the driver fences every
                    # shard on exit).
                    raise RuntimeError(f"shard {self.shard}: {_why_fatal(err)}, nothing of the open transaction "
                                       f"was committed: {err.str()}") from None
                if outcome is Outcome.FENCED:
                    self.stats.fenced += 1
                    log.warning("shard fenced: another producer now holds transactional.id %s; "
                                "re-initialising and re-reading offsets from the target", self.txn_id,
                                extra={"shard": self.shard, "event": "fenced"})
                elif outcome is Outcome.ABORT and producer is not None:
                    self._abort(producer)
                log.warning("transaction failed (%s); attempt %d of %d restarts from the target's offsets",
                            err.str(), attempt, MAX_ATTEMPTS, extra={"shard": self.shard})
                self.stats.producer_recreations += 1
                time.sleep(min(0.2 * attempt, 2.0))
            finally:
                # Resumed before unassign: a partition assigned again while still paused stalls ~1 s
                # after resume() in librdkafka 2.16 (measured: every third micro-batch).
                self.consumer.resume(self.consumer.assignment())
                self.consumer.unassign()
                del producer
        raise RuntimeError(f"shard {self.shard}: giving up after {MAX_ATTEMPTS} transaction attempts")

    def _new_producer(self) -> Producer:
        if not self.cfg.exactly_once:
            return kafka_clients.target_producer(self.cfg, None)
        return transactional_ids.init_producer(self.cfg, self.txn_id, 120)

    def _abort(self, producer: Producer) -> None:
        try:
            producer.abort_transaction(30)
            self.stats.aborted += 1
        except KafkaException as e:
            log.warning("abort failed (%s); the next init_transactions() resolves it", e.args[0].str())

    def _copy_with(self, producer: Producer, ranges: list[CopyRange]) -> None:
        states = self._resume_points(ranges)
        if not states:
            return
        tps = [TopicPartition(s.r.source_topic, s.r.partition, s.next) for s in states.values()]
        self.consumer.assign(tps)
        last_progress = time.monotonic()
        injected = False
        while not all(s.done for s in states.values()):
            if self.cfg.exactly_once:
                producer.begin_transaction()
            started, txn_records = time.monotonic(), 0
            while (txn_records < self.cfg.max_records_per_transaction
                   and time.monotonic() - started < self.cfg.max_transaction_seconds
                   and not all(s.done for s in states.values())):
                # consume() returns early only once it has as many records as asked for: asking for
                # no more than the ranges still hold spares a small batch the whole timeout.
                msgs = self.consumer.consume(_wanted(states), 0.02)
                if msgs:
                    txn_records += self._produce_batch(producer, msgs, states)
                    last_progress = time.monotonic()
                elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                    stuck = [f"{s.r.source_topic}[{s.r.partition}]" for s in states.values() if not s.done]
                    raise RuntimeError(f"no progress for {STALL_TIMEOUT_S:.0f}s reading {', '.join(stuck)}")
            if self.fault == "fail-before-commit" and not injected:
                producer.flush(30)
                raise InjectedFault("test fault: failing after producing, before commit")
            self._commit(producer, states, started)
            if self.fault == "fail-after-commit" and not injected:
                raise InjectedFault("test fault: failing after the first committed transaction")
            injected = injected or bool(self.fault)

    def _refresh(self, producer: Producer, idle: list[tuple[str, str, int]]) -> None:
        # Values read after this task's init_transactions(): no zombie can move them any more.
        committed = read_committed(self.group, [(t, p) for _, t, p in idle])
        offsets = [TopicPartition(t, p, c.offset, metadata=c.metadata.encode() if c.metadata else None)
                   for (t, p), c in sorted(committed.items()) if c.offset >= 0]
        if not offsets:
            return
        if self.cfg.exactly_once:
            producer.begin_transaction()
            producer.send_offsets_to_transaction(offsets, self.group.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
        else:
            self.group.commit(offsets=offsets, asynchronous=False)
        self.stats.refreshed = len(offsets)

    def _resume_points(self, ranges: list[CopyRange]) -> dict[tuple[str, int], _PartitionState]:
        committed = read_committed(self.group, [(r.target_topic, r.partition) for r in ranges])
        states = {}
        for r in ranges:
            c = committed.get((r.target_topic, r.partition))
            offset = c.offset if c is not None else NO_OFFSET
            start = offset if offset >= 0 else (r.start if r.start >= 0 else _OFFSET_BEGINNING)
            if start >= r.end:
                continue  # already copied: a replayed plan, a retried task, or a faster twin
            meta = (c.metadata if c and c.metadata else None) or CommitMetadata(
                self.source_cluster, r.source_topic, self.cfg.shard_count, self.shard, job=self.cfg.name)
            states[(r.source_topic, r.partition)] = _PartitionState(r, start, offset >= 0, meta, txn_begin=start)
        return states

    def _produce_batch(self, producer: Producer, msgs: list, states: dict) -> int:
        if self.provenance is not None:  # once per batch: the default path pays nothing per record
            msgs = self.provenance.apply(
                msgs, lambda m: m.offset() < states[(m.topic(), m.partition())].r.end)
        produce, produced = producer.produce, 0
        lasts = _last_index_per_partition(msgs, states)
        for i, m in enumerate(msgs):
            if m.error() is not None:
                self._on_consume_error(m, states)
                continue
            st = states[(m.topic(), m.partition())]
            offset = m.offset()
            if st.done or offset >= st.r.end:
                self._finish(st)
                continue
            if offset != st.next:
                st.skip_to(offset)
            value, key, ts = m.value(), m.key(), m.timestamp()[1]
            # A delivery report only for a partition's last record in the batch, and its first in the
            # transaction: exact source->target offset pairs at a fraction of one report per record.
            first = st.records == 0
            report = _PairReport(st, offset, first) if first or i in lasts else None
            while True:
                try:
                    produce(st.r.target_topic, value, key, st.r.partition, headers=m.headers(),
                            timestamp=ts if ts > 0 else 0, on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.05)  # local queue full: let deliveries drain
            st.next = offset + 1
            st.dirty = True
            st.records += 1
            st.bytes += (len(value) if value else 0) + (len(key) if key else 0)
            if st.first_ts < 0:
                st.first_ts = ts
            st.last_ts = ts
            produced += 1
            if st.next >= st.r.end:
                self._finish(st)
        producer.poll(0)
        return produced

    def _finish(self, st: _PartitionState) -> None:
        if st.done:
            return
        # Offsets between the last record and the planned end are markers or aborted records.
        if st.next != st.r.end:
            st.skip_to(st.r.end)
            st.dirty = True
        st.done = True
        self.consumer.pause([TopicPartition(st.r.source_topic, st.r.partition)])

    def _on_consume_error(self, m, states: dict) -> None:
        err = m.error()
        st = states.get((m.topic(), m.partition()))
        if err.code() == KafkaError._PARTITION_EOF:
            if st is not None and m.offset() >= st.r.end:
                self._finish(st)
            return
        if st is not None and err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            self._on_out_of_range(st)
            return
        if st is not None and err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                                             KafkaError._UNKNOWN_PARTITION):
            # The source topic was deleted mid-batch: its range ends here, its offsets stay where they
            # are; the planner drops the topic at its next refresh.
            log.warning("source %s[%d] disappeared while being copied; its range ends at offset %d",
                        st.r.source_topic, st.r.partition, st.next, extra={"event": "topic_deleted"})
            st.done = True
            return
        raise KafkaException(err)

    def _on_out_of_range(self, st: _PartitionState) -> None:
        tp = TopicPartition(st.r.source_topic, st.r.partition)
        low, _ = self.consumer.get_watermark_offsets(tp, timeout=30)
        where = f"source {st.r.source_topic}[{st.r.partition}]"
        if st.promised and st.next < low:
            lost = f"offsets {st.next}..{low - 1} were deleted by retention before being replicated"
            if self.cfg.on_data_loss == "fail":
                raise DataLossError(f"{where}: {lost} (on_data_loss=fail; set it to 'skip' to continue "
                                    f"from the log start)")
            log.error("data loss: %s: %s; skipping to the log start", where, lost,
                      extra={"event": "data_loss", "topic": st.r.source_topic, "partition": st.r.partition,
                             "lost_from": st.next, "lost_to": low - 1})
            self.stats.data_loss_events += 1
        st.skip_to(max(low, st.next if st.next >= 0 else low))
        st.dirty = True
        if st.next >= st.r.end:
            self._finish(st)
        else:
            # seek() is refused on a partition in error state; re-adding it to the assignment works.
            self.consumer.incremental_unassign([tp])
            self.consumer.incremental_assign([TopicPartition(st.r.source_topic, st.r.partition, st.next)])

    def _commit(self, producer: Producer, states: dict, started: float) -> None:
        advanced = [s for s in states.values() if s.dirty]
        if advanced:
            producer.flush(60)  # every record acknowledged before the offsets join the transaction
            if self.index_partitions:
                self._produce_index(producer, advanced)
        offsets = []
        for s in advanced:
            offsets.append(TopicPartition(s.r.target_topic, s.r.partition, s.next,
                                          metadata=self._metadata(s)))
        if self.cfg.exactly_once:
            if offsets:
                producer.send_offsets_to_transaction(offsets, self.group.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
        elif offsets:
            self.group.commit(offsets=offsets, asynchronous=False)
        now = time.time()
        self.stats.transactions += 1
        self.stats.transaction_seconds.append(time.monotonic() - started)
        for s in advanced:
            key = f"{s.r.source_topic}|{s.r.partition}"
            agg = self.stats.partitions.setdefault(key, [0, 0, 0, 0.0])
            agg[0] += s.records
            agg[1] += s.bytes
            agg[2] = s.next
            agg[3] = now
            self.stats.records += s.records
            self.stats.bytes += s.bytes
            if s.first_ts > 0 and len(self.stats.latency_seconds) < 64 * _LATENCY_SAMPLES_PER_TXN:
                self.stats.latency_seconds += [now - s.first_ts / 1000, now - s.last_ts / 1000]
            s.dirty, s.records, s.bytes, s.first_ts, s.last_ts = False, 0, 0, -1, -1
            s.txn_begin, s.first_pair, s.gaps, s.delivery_error = s.next, None, [], None

    def _produce_index(self, producer: Producer, advanced: list[_PartitionState]) -> None:
        """After the data's delivery reports (they give the target offsets), before the offsets join
        the transaction: the entries commit or abort with the data they describe."""
        topic = index.index_topic(self.cfg.name)
        for s in advanced:
            if s.delivery_error is not None:  # the refusal itself says what went wrong, not the index
                raise KafkaException(s.delivery_error)
            if not s.records:
                continue  # no entry: source offsets up to the next entry map to the previous one's end
            entry = index.entry_from_copy(s.txn_begin, s.next, s.first_pair, s.pair, s.records, s.gaps)
            if entry is None:  # a missing entry would map these offsets wrongly: the task is retried
                raise RuntimeError(f"shard {self.shard}: no delivery report for {s.r.target_topic}"
                                   f"[{s.r.partition}] after flush; the translation index entry cannot be built")
            if not entry.contiguous:
                log.error("target %s[%d]: %d records landed on %d offsets: another producer writes there; "
                          "this transaction's index entry is flagged inexact", s.r.target_topic, s.r.partition,
                          entry.count, s.pair[1] - entry.first_target + 1,
                          extra={"event": "index_not_contiguous", "shard": self.shard})
            producer.produce(topic, entry.encode(), index.entry_key(s.r.target_topic, s.r.partition),
                             index.index_partition(s.r.target_topic, s.r.partition, self.index_partitions))

    def _metadata(self, s: _PartitionState) -> str:
        so, to = s.pair if s.pair is not None else (s.meta.source_offset, s.meta.target_offset)
        s.meta = CommitMetadata(self.source_cluster, s.r.source_topic, self.cfg.shard_count, self.shard, so, to,
                                self.cfg.name)
        return s.meta.encode()


class _PairReport:
    __slots__ = ("st", "source_offset", "first")

    def __init__(self, st: _PartitionState, source_offset: int, first: bool = False) -> None:
        self.st, self.source_offset, self.first = st, source_offset, first

    def __call__(self, err, msg) -> None:
        if err is not None:
            if self.st.delivery_error is None:
                self.st.delivery_error = err
            return
        if self.st.pair is None or self.source_offset > self.st.pair[0]:
            self.st.pair = (self.source_offset, msg.offset())
        if self.first:
            self.st.first_pair = (self.source_offset, msg.offset())


def _why_fatal(err: KafkaError) -> str:
    if err.code() in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE):
        return "the target refused a record as too large"
    return "retrying cannot help"


def _wanted(states: dict) -> int:
    left = 0
    for s in states.values():
        if not s.done:
            if s.next < 0:  # start unknown until the first record
                return _CONSUME_BATCH
            left += s.r.end - s.next
    return max(1, min(left, _CONSUME_BATCH))


def _last_index_per_partition(msgs: list, states: dict) -> set[int]:
    """Each partition's last record in the batch that is inside its range (the one copied last)."""
    partitions = sum(not s.done for s in states.values())
    seen: set[tuple[str, int]] = set()
    lasts: set[int] = set()
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        if m.error() is None and (k := (m.topic(), m.partition())) not in seen:
            st = states.get(k)
            if st is None or m.offset() >= st.r.end:
                continue  # beyond the plan: not copied
            seen.add(k)
            lasts.add(i)
            if len(seen) == partitions:
                break
    return lasts


def fault_for_attempt(attempt: int) -> str | None:
    """Test-only fault injection, active on a task's first attempt so Spark's retry must repair it."""
    fault = os.environ.get("REPLICATOR_TEST_FAULT")
    return fault if fault and attempt == 0 else None
