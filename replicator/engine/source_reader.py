"""A shard task's source side: its consumer's assignment and reads, and what the consumer reports
besides records.

Records go to the copy loop as they come; the events between them are handled here: the end of
what the source has committed (transaction markers moved over, a partition settled), a position
below the log start (where a copy begins, or data loss), a deleted topic, an unavailable broker
(the consumer retries by itself), a consumer that went back below the copy position (its records
dropped), one that stopped fetching (replaced, librdkafka #5153, `clients.fetch_watch`), and the
end of a partition's planned range (paused).
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from replicator.clients import fetch_watch
from replicator.clients.client_errors import transient
from replicator.clients.fetch_watch import FetchWatch
from replicator.config import ReplicatorConfig
from replicator.engine.client_cache import ShardClients
from replicator.engine.partition_copy import PartitionCopy
from replicator.engine.shard_partitions import ShardPartitions
from replicator.engine.task_report import TaskReport
from replicator.engine.transaction_rhythm import TransactionRhythm

log = logging.getLogger("replicator.shard_copy")  # the events' log, as when this lived in shard_copy

_CONSUME_BATCH = 10_000
_CONSUME_ERROR_LOG_S = 10.0


class DataLossError(RuntimeError):
    """Retention deleted source records before they were replicated (on_data_loss=fail)."""


class SourceReader:
    def __init__(self, cfg: ReplicatorConfig, shard: int, clients: ShardClients, partitions: ShardPartitions,
                 rhythm: TransactionRhythm, report: TaskReport) -> None:
        self.cfg, self.shard = cfg, shard
        self._clients, self._partitions, self._rhythm, self._report = clients, partitions, rhythm, report
        self.consumer = clients.source_consumer()
        self.batch = _CONSUME_BATCH  # records a read asks for; a read that returns as many may leave more
        self._fetches = FetchWatch(time.monotonic(), fetch_watch.WINDOW_S)  # a source consumer gone quiet
        self._consume_error_logged = -_CONSUME_ERROR_LOG_S
        self._paused: list[TopicPartition] = []  # partitions `finish` paused, resumed when the attempt ends

    def start(self) -> None:
        """Assigns the running attempt's partitions at their copy positions, with a consumer sized for
        the source's round trip (`clients.source_link`)."""
        states = self._partitions.states
        if states:
            sized = self._clients.sized_for_source_link(next(iter(states.values())).r.source_topic)
            if sized is not None:
                self._replace(sized)
        self.consumer.assign([TopicPartition(s.r.source_topic, s.r.partition, s.next) for s in states.values()])
        self._fetches.restart(self._partitions.positions(), time.monotonic())

    def end(self) -> None:
        """The attempt ended: nothing stays assigned."""
        # Resumed before unassign: a partition assigned again while still paused stalls ~1 s
        # after resume() in librdkafka 2.16 (measured: every third micro-batch). Only what
        # was paused: resuming a partition that was not made librdkafka fetch from a stale
        # position (confluentinc/librdkafka#4637).
        if self._paused:
            self.consumer.resume(self._paused)
            self._paused = []
        self.consumer.unassign()

    def turn(self, between_transactions: bool) -> None:
        """Called on every turn of the copy loop. Between transactions only, the consumer is checked
        for having stopped fetching: asking the source can take its whole timeout while a leader is
        away, which would hold an open transaction (and its records' latency) that long."""
        if self._fetches.due(time.monotonic()) and between_transactions:
            self._check_fetching()

    def fetch(self, wait: float) -> list:
        self._rhythm.working()
        msgs = self.consumer.consume(self.batch, 0)
        if msgs or wait <= 0:
            return msgs
        # consume() with a timeout waits for a full batch; poll() returns at the first record.
        first = self.consumer.poll(wait)
        self._rhythm.working()
        return [first, *self.consumer.consume(self.batch - 1, 0)] if first is not None else []

    def waiting(self, enough: float) -> int:
        """Records the source holds past the running attempt's copy positions (the high watermarks of
        the last fetch responses; no broker round trip), counted until past `enough`."""
        waiting = 0
        for st in self._partitions.states.values():
            if waiting >= enough:
                break  # no need to look at every partition (catch-up of many of them)
            if st.done or st.next < 0:
                continue
            try:  # a sizing hint only: a partition the client knows nothing of yet counts as caught up
                _, high = self.consumer.get_watermark_offsets(TopicPartition(st.r.source_topic, st.r.partition),
                                                              cached=True)
            except KafkaException:
                continue
            waiting += max(0, high - st.next)
        return waiting

    def _check_fetching(self) -> None:
        """Replaces the source consumer when it stopped fetching partitions the source has committed
        records in (see fetch_watch)."""
        positions, window = self._partitions.positions(), self._fetches.window_s
        unmoved = self._fetches.unmoved(positions, time.monotonic())
        behind = fetch_watch.stalled({k: positions[k] for k in unmoved}, self._source_ends(unmoved)) if unmoved else []
        self._fetches.judged(bool(behind))
        if not behind:
            return
        self._report.stats.source_consumer_restarts += 1
        shown = ", ".join(f"{t}[{p}]" for t, p in behind[:5]) + (f" and {len(behind) - 5} more"
                                                                  if len(behind) > 5 else "")
        log.warning("the source consumer fetched nothing of %d partition(s) for %.0f s although the source has "
                    "committed records past their positions (%s): replacing it (librdkafka #5153)", len(behind),
                    window, shown,
                    extra={"shard": self.shard, "event": "source_consumer_stalled", "partitions": len(behind)})
        self._replace(self._clients.new_source_consumer())
        self._paused = []  # paused on the old consumer; the new one is given only unfinished partitions
        states = self._partitions.states
        self.consumer.assign([TopicPartition(t, p, st.next) for (t, p), st in states.items() if not st.done])
        self._fetches.restart(self._partitions.positions(), time.monotonic())

    def _replace(self, consumer) -> None:
        old, self.consumer = self.consumer, consumer
        # Closing waits on the old client's broker threads: not something the copy loop waits for.
        threading.Thread(target=old.close, daemon=True, name=f"close-consumer-{self.shard}").start()

    def _source_ends(self, keys: list) -> dict:
        """The source's last stable offsets (latest offsets, asked read_committed) of `keys`; {} when
        the source does not answer (the consumer reports that itself)."""
        try:
            answer = self.consumer.offsets_for_times([TopicPartition(t, p, -1) for t, p in keys], timeout=10)
        except KafkaException:
            return {}
        return {(tp.topic, tp.partition): tp.offset for tp in answer if tp.error is None}

    def rewound(self, st: PartitionCopy, offset: int) -> None:
        """The source consumer handed back an offset below the copy position: everything below it was
        already copied (in this attempt's transactions) or deliberately skipped, so copying it again
        would duplicate it on the target. Seen once in the multi-broker chaos run during source rolling
        restarts (docs/reliability.md): ~570 records of a partition copied twice, nothing logged. The
        consumer's position is not trusted over ours; its extra records are dropped."""
        if st.rewound_from != st.next:
            st.rewound_from = st.next
            self._report.stats.source_rewinds += 1
            log.warning("source %s[%d]: the consumer delivered offset %d below the copy position %d; records "
                        "below the position were already copied and are dropped", st.r.source_topic,
                        st.r.partition, offset, st.next,
                        extra={"shard": self.shard, "event": "source_rewind", "topic": st.r.source_topic,
                               "partition": st.r.partition, "offset": offset, "position": st.next})

    def finish(self, st: PartitionCopy) -> None:
        if st.done:
            return
        # Offsets between the last record and the planned end are markers or aborted records.
        if st.next != st.r.end:
            st.skip_to(st.r.end)
            self._changed(st)
        st.done = True
        tp = TopicPartition(st.r.source_topic, st.r.partition)
        self.consumer.pause([tp])
        self._paused.append(tp)

    def event(self, m, states: dict) -> None:
        err = m.error()
        st = states.get((m.topic(), m.partition()))
        if err.code() == KafkaError._PARTITION_EOF:
            if st is None or st.done:
                return
            if st.beyond(m.offset()):
                self.finish(st)
                return
            if m.offset() > st.next:
                # The end of what the source has committed lies past the last record: transaction
                # markers or aborted records. Moving over them lets the group reach the source's end.
                st.skip_to(m.offset())
                self._changed(st)
            st.end_seen = m.offset()
            return
        if st is not None and err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            self._out_of_range(st)
            return
        if st is not None and err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                                             KafkaError._UNKNOWN_PARTITION):
            # The source topic was deleted mid-task: its copy ends here, its offsets stay where they
            # are; the planner drops the topic at its next refresh.
            log.warning("source %s[%d] disappeared while being copied; its copy ends at offset %d",
                        st.r.source_topic, st.r.partition, st.next, extra={"event": "topic_deleted"})
            st.done = True
            return
        if transient(err):
            # A broker down or restarting, a leader moving: the consumer reconnects and fetches again
            # by itself, and the open transaction (target side) is unaffected. The ends seen before
            # may be old now: the partitions are no longer reported settled.
            for unsure in states.values() if st is None else (st,):
                unsure.end_seen = -1
            now = time.monotonic()
            if now - self._consume_error_logged >= _CONSUME_ERROR_LOG_S:
                self._consume_error_logged = now
                log.warning("source fetch: %s; the consumer retries by itself", err.str(),
                            extra={"shard": self.shard, "event": "source_unavailable"})
            return
        raise KafkaException(err)

    def _out_of_range(self, st: PartitionCopy) -> None:
        tp = TopicPartition(st.r.source_topic, st.r.partition)
        low, _ = self.consumer.get_watermark_offsets(tp, timeout=30)
        where = f"source {st.r.source_topic}[{st.r.partition}]"
        if not st.promised and not st.records:
            # Nothing of the partition was ever copied or committed: a first position below the log
            # start is where its copy begins, not a gap (the index then starts at the log start, as
            # for a copy from the beginning).
            st.next = st.txn_begin = max(low, st.next)
        elif st.next >= low:
            log.info("%s: fetch at offset %d out of range (log start %d); fetching there again", where,
                     st.next, low, extra={"shard": self.shard, "event": "source_out_of_range"})
        else:
            lost = f"offsets {st.next}..{low - 1} were deleted by retention before being replicated"
            if self.cfg.on_data_loss == "fail":
                raise DataLossError(f"{where}: {lost} (on_data_loss=fail; set it to 'skip' to continue "
                                    f"from the log start)")
            log.error("data loss: %s: %s; skipping to the log start", where, lost,
                      extra={"event": "data_loss", "topic": st.r.source_topic, "partition": st.r.partition,
                             "lost_from": st.next, "lost_to": low - 1})
            self._report.stats.data_loss_events += 1
        st.skip_to(max(low, st.next if st.next >= 0 else low))
        self._changed(st)
        if st.beyond(st.next):
            self.finish(st)
        else:
            # seek() is refused on a partition in error state; re-adding it to the assignment works.
            self.consumer.incremental_unassign([tp])
            self.consumer.incremental_assign([TopicPartition(st.r.source_topic, st.r.partition, st.next)])


    def _changed(self, st: PartitionCopy) -> None:
        st.dirty = True
        self._rhythm.changed()
