"""The data path: one shard's exactly-once copy, read -> produce -> commit offsets -> commit.

A shard owns a fixed set of source partitions and one static transactional.id on the target. A
shard task (one per micro-batch, see `spark_source`) runs for `batch_duration_seconds`, or until
the driver tells it to end early, copying whatever arrives in its partitions:

1. a fresh producer with the shard's transactional.id calls `init_transactions()`, once per task,
   which fences any other holder of the id (zombie instance, earlier task attempt) and resolves its
   open transaction (`shard_producer`);
2. the fake group's offsets are read back from the target: that, not Spark's plan, says where each
   partition resumes, so replayed work is never copied twice (a partition the group answers below
   what this run is known to have committed resumes there instead, see `_read_resume_points`);
3. records are consumed read_committed from the source and produced to the same partition number
   with key, value, headers and timestamp, in small transactions whose length the shard's load and
   backlog decide (`transaction_rhythm`);
4. each transaction carries, via `send_offsets_to_transaction`, the next source offset of every
   partition it advanced, so data and position commit atomically; and, produced before those
   offsets, one translation index entry per partition it copied records of
   (`replicator.groups.index`): visible exactly when the data is. Both name the target offsets the
   records landed on: from the delivery reports, or predicted from the shard's own last commit and
   checked against the reports before the commit (`_commit`).

Any Kafka error in the transaction drops the producer and starts again at step 1 (`retry_policy`):
whatever happened before (commit or not), the re-read offsets tell the truth, raised to the
commits this run knows of where they are older (`shard_partitions`). A commit call that failed may
still have committed: the target's data says whether it did before the offsets are read
(`commit_outcome`). A source consumer that stops fetching without an error (librdkafka #5153) is
replaced at the copy positions (`clients.fetch_watch`).

`copy()` runs the same loop up to given end offsets and returns (tests, the bench's bare loop).
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from replicator.clients.callback_errors import kafka_errors_unwrapped
from replicator.clients.client_errors import Outcome
from replicator.clients.queue_full import produce_when_room
from replicator.config import ReplicatorConfig
from replicator.engine import heap, shard_producer, transactional_ids
from replicator.engine.client_cache import CachedClients, ShardClients
from replicator.engine.copy_stats import CopyStats
from replicator.engine.faults import FaultyProducer
from replicator.engine.partition_copy import OFFSET_BEGINNING, CopyRange, PairReport, PartitionCopy
from replicator.engine.retry_policy import RetryPolicy
from replicator.engine.shard_partitions import ShardPartitions
from replicator.engine.source_reader import SourceReader
from replicator.engine.stall_watch import StallWatch
from replicator.engine.task_report import DriverLink, TaskReport
from replicator.engine.transaction_rhythm import TransactionRhythm
from replicator.groups import index
from replicator.offsets import NO_OFFSET, CommitMetadata, Committed, read_committed
from replicator.replication_policy import Provenance

log = logging.getLogger("replicator.shard_copy")  # the log's public name, kept when the module moved

_LATENCY_SAMPLES_PER_TXN = 8


class ShardCopier:
    def __init__(self, cfg: ReplicatorConfig, shard: int, fault: str | None = None,
                 clients: ShardClients | None = None) -> None:
        self.cfg = cfg
        self.shard = shard
        self.txn_id = transactional_ids.shard_id(cfg.name, shard)
        self._clients = clients = clients if clients is not None else CachedClients(cfg)
        self._rhythm = TransactionRhythm(cfg)
        self._partitions = ShardPartitions()
        self._report = TaskReport(self._partitions.settled)
        self._source = source = SourceReader(cfg, shard, clients, self._partitions, self._rhythm, self._report)
        self.group = clients.group_reader()
        self.source_cluster = clients.source_cluster()
        self.provenance = Provenance(self.source_cluster, clients.target_cluster()) if cfg.provenance_header else None
        self.index_partitions = clients.index_partitions() if cfg.translation_index and cfg.exactly_once else 0
        producer = shard_producer.for_guarantee(cfg, shard, self.txn_id)
        # A test fault wraps the producer: the loop below never asks whether one is set.
        self._producer = FaultyProducer(producer, fault, lambda: source.consumer) if fault else producer
        # Index entries and offsets go out before the records are acknowledged where their landing
        # is known (`_commit`); off for the copier's life once a landing was mispredicted.
        self._predict = cfg.exactly_once
        heap.spare_batches(source.batch)

    @property
    def stats(self) -> CopyStats:
        """What the driver has not taken yet."""
        return self._report.stats

    # -- entry points ---------------------------------------------------------------------------
    def run(self, ranges: list[CopyRange], deadline: float, link: DriverLink | None = None) -> CopyStats:
        """A shard task: copies whatever arrives in `ranges` until `deadline` (time.monotonic()) or
        until the driver asks to end. Stats go to the driver as transactions commit; the returned
        stats are those it did not take."""
        self._report.link = link
        if link is not None:
            self._partitions.seed_floors(link.floors([f"{r.source_topic}|{r.partition}" for r in ranges]))
        watch = StallWatch(f"shard {self.shard}'s task", extra={"shard": self.shard})

        def should_stop() -> bool:
            watch.beat()  # every loop iteration and every attempt asks
            return time.monotonic() >= deadline or (link is not None and link.stop_requested())

        try:
            self._attempts(ranges, should_stop)
        finally:
            watch.close()
        self._report.send(force=True)
        return self.stats

    def copy(self, ranges: list[CopyRange]) -> CopyStats:
        """Copies up to the ranges' end offsets and returns (tests and the bench's bare loop)."""
        self._attempts(ranges, lambda: False)
        return self.stats

    def _attempts(self, ranges: list[CopyRange], should_stop) -> None:
        retry = RetryPolicy(self.shard, self.cfg.name, self.txn_id)
        while True:
            try:
                self._producer.start(self._new_producer())
                with kafka_errors_unwrapped():
                    self._copy_with(ranges, should_stop)
                return
            except KafkaException as e:
                err = e.args[0]
                outcome = retry.outcome(err)
                if outcome is Outcome.FENCED:
                    self.stats.fenced += 1
                elif outcome is Outcome.ABORT and self._producer.abort():
                    self.stats.aborted += 1
                retry.failed(err, outcome, self._rhythm.failed())
                self.stats.producer_recreations += 1
            finally:
                self._end_attempt()
            self._report.send(force=True)  # before backing off: the driver stops taking them as settled
            # The next task learns this task's commits from the driver (floors): a commit in doubt is
            # settled first, by one more attempt (its init_transactions() ends the transaction at the
            # coordinator, then _resume_points reads the outcome).
            if should_stop() and self._producer.in_doubt is None:
                return
            time.sleep(retry.backoff_s())

    def _new_producer(self) -> Producer:
        """The attempt's target client, initialised (the bench's bare loop times what it is asked)."""
        return self._producer.open_client()

    def _end_attempt(self) -> None:
        self._source.end()
        self._rhythm.attempt_ended()
        self._partitions.states = {}  # the next attempt's partitions are settled once it sees their ends again
        self._producer.stop()

    # -- the loop -------------------------------------------------------------------------------
    def _copy_with(self, ranges: list[CopyRange], should_stop) -> None:
        states = self._partitions.states = self._resume_points(ranges)
        if not states:
            return
        source, rhythm = self._source, self._rhythm
        source.start()
        while not should_stop() and not all(s.done for s in states.values()):
            source.turn(between_transactions=not rhythm.open)
            wait = rhythm.wait()
            msgs = source.fetch(wait)
            if msgs:
                self._produce_batch(msgs, states)
            else:
                # Stats go out at most once a second, after a commit; the last commits of a burst
                # waited for the next record (or the task's end, minutes later) and the driver's
                # metrics and progress line stood still behind the target meanwhile.
                self._report.send()
            if rhythm.due(rhythm.after_read(len(msgs) >= source.batch, not msgs and wait > 0, source.waiting)):
                self._commit(states)
        if rhythm.open:
            self._commit(states)

    def _resume_points(self, ranges: list[CopyRange]) -> dict[tuple[str, int], PartitionCopy]:
        if (landed := self._producer.settle_in_doubt()) is not None:
            self._account(landed.states, landed.started)  # its end positions become floors
        committed, behind = self._read_resume_points(ranges)
        states = {}
        stale = time.time() - self.cfg.offsets_refresh_interval_seconds
        for r in ranges:
            c = committed.get((r.target_topic, r.partition))
            floor = behind.get((r.source_topic, r.partition))
            offset = floor if floor is not None else c.offset if c is not None else NO_OFFSET
            start = offset if offset >= 0 else (r.start if r.start >= 0 else OFFSET_BEGINNING)
            copied = r.end is not None and start >= r.end
            if copied and floor is None:
                continue  # already copied: a replayed plan, a retried task, or a faster twin
            meta = (c.metadata if c and c.metadata else None) or CommitMetadata(
                self.source_cluster, r.source_topic, self.cfg.shard_count, self.shard, job=self.cfg.name)
            st = states[(r.source_topic, r.partition)] = PartitionCopy(r, start, offset >= 0, meta, txn_begin=start)
            # A group's offsets expire offsets.retention.minutes after their last commit: an idle
            # partition's is re-committed by its owner, in its own transaction (a commit from anywhere
            # else would fence this shard's writer). A position the group lost is committed again
            # the same way, so that a restart, which knows no floors, reads it back.
            if needs_refresh(c, stale) or floor is not None:
                st.refresh = st.dirty = True
                st.done = copied  # nothing to copy, but the position to commit again
                self._rhythm.changed()
        return states

    def _read_resume_points(self, ranges: list[CopyRange]) -> tuple[dict, dict[tuple[str, int], int]]:
        """The fake group's offsets for `ranges`, and the floor of every partition it answered below
        its floor: that partition resumes at its floor.

        A job never moves its group back, and a floor is a position known committed (this run's own
        commits, or the data of a commit in doubt), so an answer below it is wrong. Two ways were
        seen: a broker cut off from its cluster keeps answering OffsetFetch as the coordinator from
        what it had (make chaos, target-leader-isolate: resuming from it copied 94,095 records
        twice); and, after a coordinator failover during a commit, the group never showed the
        offsets of a transaction whose data and index entries committed (make chaos, TV 0: it still
        answered the older offset minutes later, across a restart of its coordinator, and a task
        that waited for it stood still until the job restarted and copied 5 records again). One more
        answer is asked of a new client, which looks the coordinator up afresh; what is still
        behind resumes at its floor and is committed again in the next transaction."""
        committed = read_committed(self.group, [(r.target_topic, r.partition) for r in ranges])
        if not self._partitions.below_floor(ranges, committed):
            return committed, {}
        stale_reader, self.group = self.group, self._clients.new_group_reader()
        stale_reader.close()
        committed = read_committed(self.group, [(r.target_topic, r.partition) for r in ranges])
        behind = self._partitions.below_floor(ranges, committed)
        if behind:
            r, offset, floor = behind[0]
            log.warning("the target answered offsets below what this run committed for %d partitions of group %s "
                        "(e.g. %s[%d]: %d, but %d was committed): resuming at the committed positions and "
                        "committing them again", len(behind), self.cfg.group, r.target_topic, r.partition, offset,
                        floor, extra={"shard": self.shard, "event": "stale_resume_point", "partitions": len(behind)})
        return committed, {(r.source_topic, r.partition): floor for r, _, floor in behind}

    def _produce_batch(self, msgs: list, states: dict) -> None:
        if self.provenance is not None:  # once per batch: the default path pays nothing per record
            msgs = self.provenance.apply(
                msgs, lambda m: not states[(m.topic(), m.partition())].beyond(m.offset()))
        producer, source = self._producer.client, self._source
        produce, produced, n, i = producer.produce, 0, len(msgs), 0
        begin = self._producer.needs_begin()  # asked once per batch, not per record
        # A batch holds runs of one partition's records (librdkafka queues each fetched partition's
        # records together): the partition's state is looked up once per run, not per record. That
        # bookkeeping was 12 % of a shard worker's copy thread (py-spy, BENCHMARKS.md).
        while i < n:
            m = msgs[i]
            i += 1
            if m.error() is not None:
                source.event(m, states)
                continue
            topic, partition = m.topic(), m.partition()
            st = states[(topic, partition)]
            target_topic, end = st.r.target_topic, st.r.end
            offset = m.offset()
            while True:
                nxt = msgs[i] if i < n else None
                run_goes_on = (nxt is not None and nxt.error() is None and nxt.partition() == partition
                               and nxt.topic() == topic)
                next_offset = nxt.offset() if run_goes_on else -1  # read once: it is the next turn's offset
                # The range rule of PartitionCopy.beyond, inlined here and below: two method calls
                # per record on the hottest lines of the job.
                if st.done or (end is not None and offset >= end):
                    source.finish(st)
                elif offset < st.next:
                    source.rewound(st, offset)
                else:
                    if offset != st.next:
                        st.skip_to(offset)
                    value, key, ts = m.value(), m.key(), m.timestamp()[1]
                    # Delivery reports give the exact source->target offset pairs (commit metadata,
                    # translation index) at a fraction of one per record: one for the partition's
                    # first record in the transaction, and one wherever the next record is not
                    # certain to be copied after this one. It is certain when it is the same
                    # partition's, higher and inside the range: then it is copied, and by the same
                    # rule it or a later one carries a report, so the last copied record always does.
                    if st.records == 0:
                        report = PairReport(st, offset, True)
                        st.first_copied = offset
                    elif run_goes_on and offset < next_offset and (end is None or next_offset < end):
                        report = None
                    else:
                        report = PairReport(st, offset)
                    if begin:
                        self._producer.begin()
                        begin = False
                    # Positional, in the C signature's order (topic, value, key, partition, callback,
                    # on_delivery, timestamp, headers): any keyword builds a dict per call, 0.4 us of
                    # the ~4.5 us a 100 B record costs a shard worker (BENCHMARKS.md).
                    try:
                        produce(target_topic, value, key, partition, report, None, ts if ts > 0 else 0, m.headers())
                    except BufferError:  # rare: the arguments are built again rather than on every record
                        produce_when_room(producer, (target_topic, value, key, partition, report, None,
                                                      ts if ts > 0 else 0, m.headers()))
                    st.next = offset + 1
                    st.dirty = True
                    st.records += 1
                    st.bytes += (len(value) if value else 0) + (len(key) if key else 0)
                    if st.first_ts < 0:
                        st.first_ts = ts
                    st.last_ts = ts
                    produced += 1
                    if end is not None and st.next >= end:
                        source.finish(st)
                if not run_goes_on:
                    break
                m, offset = nxt, next_offset
                i += 1
        producer.poll(0)
        if produced:
            self._rhythm.produced(produced)

    def _commit(self, states: dict) -> None:
        entered = time.monotonic()
        started = self._rhythm.started if self._rhythm.started is not None else entered
        advanced = [s for s in states.values() if s.dirty]
        copied = [s for s in advanced if s.records]
        producer = self._producer.client
        # Where the records land on the target is needed by the index entries and the commit
        # metadata. Known beforehand (`PartitionCopy.landing`), they join the transaction while the
        # records are still in flight, and the delivery reports are checked against it before the
        # commit; else the records are acknowledged first. Beside the source across a WAN, a commit
        # is then about four round trips instead of seven (BENCHMARKS.md, "Steady state across the link").
        ahead = self._landing_ahead(copied)
        if ahead is None:
            if advanced:
                self._flush(producer)
            landed = self._landed(copied)
        else:
            landed = ahead
        if self.index_partitions:
            self._produce_index(producer, advanced, landed)
        offsets = [TopicPartition(s.r.target_topic, s.r.partition, s.next,
                                  metadata=self._metadata(s, landed[id(s)][1] if s.records else s.pair))
                   for s in advanced]
        self._producer.commit(offsets, self.group, advanced, started,
                              lambda: self._before_end(producer, copied, ahead))
        if self.cfg.exactly_once:
            for s in copied:
                first, last = landed[id(s)]
                s.target_next = last[1] + 2 if last[1] - first[1] + 1 == s.records else -1
        self._rhythm.committed(entered, sum(s.records for s in advanced))
        self._account(advanced, started)
        self._report.send()

    def _landing_ahead(self, copied: list[PartitionCopy]) -> dict[int, tuple] | None:
        """id(state) -> predicted (first, last) pairs of every copied partition, or None unless all
        are known (a transactional copy that committed each of them before in this attempt).

        Only where the target is a link away. Beside it, offsets sent this early met the
        coordinator still completing the previous commit, and librdkafka retried them after its
        backoff: keyed p99 at 30k rec/s of 1 KiB rose from 0.08-0.10 to 0.17-0.44 s (0.22 with a
        10 ms retry.backoff.ms), and flushing first costs a round trip of a millisecond there."""
        if not (self._predict and copied and self._producer.crosses_a_link):
            return None
        ahead = {}
        for s in copied:
            if (pairs := s.landing()) is None:
                return None
            ahead[id(s)] = pairs
        return ahead

    def _flush(self, producer: Producer) -> None:
        if left := producer.flush(60):
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{left} records not acknowledged by the target "
                                            f"within 60 s", txn_requires_abort=True))

    def _landed(self, copied: list[PartitionCopy]) -> dict[int, tuple]:
        """id(state) -> the (first, last) pairs the delivery reports gave (after a flush)."""
        landed = {}
        for s in copied:
            if s.delivery_error is not None:  # the refusal itself says what went wrong
                raise KafkaException(s.delivery_error)
            if s.first_pair is None or s.pair is None:  # the index entry and the metadata would be wrong
                raise RuntimeError(f"shard {self.shard}: no delivery report for {s.r.target_topic}"
                                   f"[{s.r.partition}] after flush; its target offsets are unknown")
            landed[id(s)] = (s.first_pair, s.pair)
        return landed

    def _before_end(self, producer: Producer, copied: list[PartitionCopy], ahead: dict[int, tuple] | None) -> None:
        """Once the offsets are sent: what is still in flight is acknowledged (the index entries too,
        so the producer times its EndTxn alone, see `crosses_a_link`), and a predicted landing checked."""
        if ahead is not None:
            self._check_landing(producer, copied, ahead)
        elif self.index_partitions:
            self._flush(producer)

    def _check_landing(self, producer: Producer, copied: list[PartitionCopy], ahead: dict[int, tuple]) -> None:
        """Before the transaction ends: every record acknowledged where `ahead` said. Elsewhere,
        something else took offsets of the partition, and the entries and metadata sent are wrong:
        the transaction aborts, and this copier stops predicting. Another producer can, and so can
        a broker failover: make chaos saw a transaction's commit marker written twice after the
        transaction coordinator's broker was killed."""
        self._flush(producer)
        landed = self._landed(copied)
        for s in copied:
            if landed[id(s)] != ahead[id(s)]:
                self._predict = False
                log.warning("target %s[%d]: records landed at %s, not at %s as this shard's own last commit "
                            "predicted (a second commit marker after a broker failover, or another producer "
                            "writing there); aborting the transaction, and acknowledging records before indexing "
                            "them for the rest of this task", s.r.target_topic, s.r.partition,
                            landed[id(s)], ahead[id(s)],
                            extra={"event": "landing_mispredicted", "shard": self.shard})
                raise KafkaException(KafkaError(KafkaError._STATE, f"{s.r.target_topic}[{s.r.partition}]: records "
                                                "landed elsewhere than predicted", txn_requires_abort=True))

    def _account(self, advanced: list[PartitionCopy], started: float) -> None:
        """Counts a committed transaction and raises its partitions' floors."""
        now = time.time()
        stats = self.stats
        stats.transactions += 1
        stats.transaction_seconds.append(time.monotonic() - started)
        for s in advanced:
            agg = stats.partitions.setdefault(s.key, [0, 0, 0, 0.0])
            agg[0] += s.records
            agg[1] += s.bytes
            agg[2] = s.next
            agg[3] = now
            stats.records += s.records
            stats.bytes += s.bytes
            if s.refresh and not s.records:
                stats.refreshed += 1
            if s.first_ts > 0 and len(stats.latency_seconds) < 64 * _LATENCY_SAMPLES_PER_TXN:
                stats.latency_seconds += [now - s.first_ts / 1000, now - s.last_ts / 1000]
            self._partitions.committed(s)

    def _produce_index(self, producer: Producer, advanced: list[PartitionCopy], landed: dict[int, tuple]) -> None:
        """Before the offsets join the transaction: the entries commit or abort with the data they
        describe."""
        topic = index.index_topic(self.cfg.name)
        for s in advanced:
            if not s.records:
                continue  # no entry: source offsets up to the next entry map to the previous one's end
            first, last = landed[id(s)]
            entry = index.entry_from_copy(s.txn_begin, s.next, first, last, s.records, s.gaps)
            if not entry.contiguous:
                log.error("target %s[%d]: %d records landed on %d offsets: another producer writes there; "
                          "this transaction's index entry is flagged inexact", s.r.target_topic, s.r.partition,
                          entry.count, last[1] - entry.first_target + 1,
                          extra={"event": "index_not_contiguous", "shard": self.shard})
            producer.produce(topic, entry.encode(), index.entry_key(s.r.target_topic, s.r.partition),
                             index.index_partition(s.r.target_topic, s.r.partition, self.index_partitions))

    def _metadata(self, s: PartitionCopy, pair: tuple[int, int] | None) -> str:
        so, to = pair if pair is not None else (s.meta.source_offset, s.meta.target_offset)
        s.meta = CommitMetadata(self.source_cluster, s.r.source_topic, self.cfg.shard_count, self.shard, so, to,
                                self.cfg.name, int(time.time()),
                                CommitMetadata.target_cluster_of(self.cfg, self.group, s.r.target_topic))
        return s.meta.encode()


def needs_refresh(c: Committed | None, stale_before: float) -> bool:
    """A committed offset whose last commit (or unknown commit time: an older entry) is older than
    `stale_before` (unix seconds)."""
    return c is not None and c.offset >= 0 and (c.metadata is None or c.metadata.committed_at < stale_before)
