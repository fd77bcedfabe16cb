"""The data path: one shard's exactly-once copy, read -> produce -> commit offsets -> commit.

A shard owns a fixed set of source partitions and one static transactional.id on the target. A
shard task (one per micro-batch, see `spark_source`) runs for `batch_duration_seconds`, or until
the driver tells it to end early, copying whatever arrives in its partitions:

1. a fresh producer with the shard's transactional.id calls `init_transactions()`, once per task,
   which fences any other holder of the id (zombie instance, earlier task attempt) and resolves its
   open transaction;
2. the fake group's offsets are read back from the target: that, not Spark's plan, says where each
   partition resumes, so replayed work is never copied twice (an answer older than what this run
   is known to have committed is refused and asked again, see `_read_resume_points`);
3. records are consumed read_committed from the source and produced to the same partition number
   with key, value, headers and timestamp, in small transactions: committed `commit_interval_ms`
   (2 ms by default, so about one transaction per arrival of records; or longer when commits would
   take capacity the shard's load needs, see _HEADROOM) after they began once the source has
   nothing more queued (latency); while records are queued, kept open as long as the shard is
   behind, up to `max_records_per_transaction` and `max_transaction_seconds`, or
   `catch_up_transaction_seconds` while at least that much waits (throughput, see `_backlog_s`);
4. each transaction carries, via `send_offsets_to_transaction`, the next source offset of every
   partition it advanced, so data and position commit atomically; and, produced after the data's
   delivery reports and before those offsets, one translation index entry per partition it copied
   records of (`replicator.groups.index`): visible exactly when the data is.

Any Kafka error in the transaction drops the producer and starts again at step 1: whatever happened
before (commit or not), the re-read offsets tell the truth, once they are at least as new as the
commits this run knows of. A commit call that failed may still have committed: the target's data
says whether it did before the offsets are read (`commit_outcome`). A source consumer that stops
fetching without an error (librdkafka #5153) is replaced at the copy positions (`fetch_watch`).

`copy()` runs the same loop up to given end offsets and returns (tests, the bench's bare loop).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from replicator.clients import kafka_clients
from replicator.clients.client_errors import Outcome, classify, transient
from replicator.config import ReplicatorConfig
from replicator.engine import commit_outcome, fetch_watch, heap, transactional_ids
from replicator.engine.bounded_call import BoundedCaller
from replicator.engine.fetch_watch import FetchWatch
from replicator.engine.stall_watch import StallWatch
from replicator.groups import index
from replicator.offsets import NO_OFFSET, CommitMetadata, Committed, read_committed
from replicator.replication_policy import Provenance

log = logging.getLogger("replicator.shard_copy")  # the log's public name, kept when the module moved

MAX_ATTEMPTS = 6  # consecutive non-transient failures (no commit in between) before the task fails
RETRY_BUDGET_S = 300.0  # how long transient errors are retried without a commit (bounded copies)
_OFFSET_BEGINNING = -2
_LATENCY_SAMPLES_PER_TXN = 8
_CONSUME_BATCH = 10_000
_IDLE_WAIT_S = 0.2  # longest wait for a first record; any arriving record ends it at once
# Committing holds the loop (flush, index entry, offsets, EndTxn: ~4 round trips, 5-45 ms as the
# brokers get busier), so a transaction is stretched to keep the loop's capacity above what the
# shard is asked to copy: at `load` (the share of the loop's time reading and producing at the
# recent copy rate takes, times _HEADROOM) a transaction lasts at least
# commit_cost * load / (1 - load). At a light load the loop is mostly waiting for records, commits
# take nothing it needs and `commit_interval_ms` alone applies (latency); near the ceiling the
# stretch reaches _MAX_LOAD's bound, three commit durations. A fixed three-commit floor kept p50 at
# 55-60 ms over the source at 30k rec/s, where the loop was idle most of the time (BENCHMARKS.md).
_HEADROOM = 2.0
_MAX_LOAD = 0.75
_REPORT_INTERVAL_S = 1.0
_SETTLED_INTERVAL_S = 2.0  # how often a task looks for partitions that reached or left the source's end
_SETTLED_RESEND_S = 30.0  # and says all of them again (the driver forgets a task it did not hear from)
_CONSUME_ERROR_LOG_S = 10.0
_STALE_LOG_S = 10.0
_IN_DOUBT_GRACE_S = 30.0  # past the transaction timeout, for the coordinator to write its abort


class DataLossError(RuntimeError):
    """Retention deleted source records before they were replicated (on_data_loss=fail)."""


class InjectedFault(RuntimeError):
    """Test-only failure (REPLICATOR_TEST_FAULT) to prove task retries stay exact."""


@dataclass(frozen=True)
class CopyRange:
    source_topic: str
    target_topic: str
    partition: int
    start: int  # used only where the fake group holds nothing yet; -1: the log start
    end: int | None = None  # exclusive (a last stable offset of the source); None: whatever arrives


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
    source_rewinds: int = 0  # the source consumer went back below the copy position (records dropped)
    source_consumer_restarts: int = 0  # the source consumer stopped fetching and was replaced (fetch_watch)
    transaction_seconds: list[float] = field(default_factory=list)
    latency_seconds: list[float] = field(default_factory=list)
    # "topic|partition" -> [records, bytes, next source offset, commit unix time]
    partitions: dict[str, list] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def empty(self) -> bool:
        return not (self.transactions or self.aborted or self.fenced or self.producer_recreations
                    or self.data_loss_events or self.source_rewinds or self.source_consumer_restarts)


class DriverLink(Protocol):
    """The running task's line to the driver (`task_control`): live stats out, "end now" in."""

    def stop_requested(self) -> bool: ...
    # False: not delivered, keep the stats. `settled`: "topic|partition" -> the offset at which it
    # is settled (see ShardCopier._settled_changes), -1 for one no longer settled.
    def report(self, stats: dict | None, settled: dict[str, int] | None = None) -> bool: ...


@dataclass
class _PartitionState:
    r: CopyRange
    next: int  # next source offset to copy (or _OFFSET_BEGINNING until the first record)
    promised: bool  # the fake group holds an offset (at start or since a commit): a gap below it is data loss
    meta: CommitMetadata
    done: bool = False
    dirty: bool = False  # advanced in the open transaction
    refresh: bool = False  # committed only to keep an idle partition's offset from expiring
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
    rewound_from: int = -1  # the copy position when the consumer last went back below it (logged once)
    # The source's end (last stable offset) at the partition's last end-of-partition event, -1 when
    # unsure. A record arriving after it moves `next` past it.
    end_seen: int = -1

    def skip_to(self, offset: int) -> None:
        """Moves the position over source offsets that are not copied (markers, aborted or compacted
        records, a data-loss jump, the end of the range): the index records them as a gap."""
        if 0 <= self.next < offset:
            self.gaps += (self.next, offset)
        self.next = offset

    def beyond(self, offset: int) -> bool:
        return self.r.end is not None and offset >= self.r.end


# Cached per Python process: callers of `copy()` (tests, the bench's bare loop) build many copiers in
# one process and keep warm connections. A Spark task has a process of its own (spark_session), so
# there they live for one task. Producers are NOT cached: each copier's `init_transactions()` fences
# the id's earlier holder anyway; a fresh producer costs ~18 ms.
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
        self._key = key
        self.provenance = self._provenance(key) if cfg.provenance_header else None
        self.index_partitions = self._index_partitions(key) if cfg.translation_index and cfg.exactly_once else 0
        self.stats = CopyStats()
        heap.spare_batches(_CONSUME_BATCH)
        self._bounded = BoundedCaller(f"shard-{shard}")  # the transaction calls librdkafka may not end
        self._fetches = FetchWatch(time.monotonic(), fetch_watch.WINDOW_S)  # a source consumer gone quiet
        self._link: DriverLink | None = None
        self._reported = time.monotonic()
        # The open transaction: when its first change was made, its records, whether Kafka's began.
        self._txn_started: float | None = None
        self._txn_records = 0
        self._txn_begun = False
        self._committed = False  # a transaction committed since the last failure
        self._commit_cost = 0.0  # recent seconds one commit held the loop (moving average)
        self._rate = 0.0  # records/s this shard recently copied (moving average over transactions)
        # Until when the source holds records for this shard, as counted at the last full read, and
        # whether that count was a catch-up's (see _backlog).
        self._behind_until = 0.0
        self._catching_up = False
        self._waited = False  # the last read waited for records
        self._record_cost = 0.0  # seconds reading and producing one record took, recently (moving average)
        self._txn_busy = 0.0  # seconds the open transaction spent reading and producing (not waiting)
        self._work_began = 0.0  # when the last read had records to hand (after any wait for them)
        self._cycle_began: float | None = None  # when the last commit ended
        self._consume_error_logged = -_CONSUME_ERROR_LOG_S
        self._paused: list[TopicPartition] = []  # partitions _finish paused, resumed when the attempt ends
        # (source topic, partition) -> the highest next offset known committed in this run: by this
        # task, or by earlier tasks as the driver saw them. A job never moves its group's offset
        # back, so a resume point below its floor was read stale (see _resume_points).
        self._floors: dict[tuple[str, int], int] = {}
        self._in_doubt: _InDoubt | None = None  # a transaction whose commit call failed (see commit_outcome)
        self._states: dict[tuple[str, int], _PartitionState] = {}  # the running attempt's partitions
        self._sent_settled: dict[str, int] = {}  # what the driver was last told is settled
        self._settled_checked = self._settled_resent = 0.0

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

    # -- entry points ---------------------------------------------------------------------------
    def run(self, ranges: list[CopyRange], deadline: float, link: DriverLink | None = None) -> CopyStats:
        """A shard task: copies whatever arrives in `ranges` until `deadline` (time.monotonic()) or
        until the driver asks to end. Stats go to the driver as transactions commit; the returned
        stats are those it did not take."""
        self._link = link
        if link is not None:
            floors = link.floors([f"{r.source_topic}|{r.partition}" for r in ranges])
            self._floors = {(t, int(p)): o for k, o in floors.items() for t, p in [k.rsplit("|", 1)]}
        watch = StallWatch(f"shard {self.shard}'s task", extra={"shard": self.shard})

        def should_stop() -> bool:
            watch.beat()  # every loop iteration and every attempt asks
            return time.monotonic() >= deadline or (link is not None and link.stop_requested())

        try:
            self._attempts(ranges, should_stop)
        finally:
            watch.close()
        self._report(force=True)
        return self.stats

    def copy(self, ranges: list[CopyRange]) -> CopyStats:
        """Copies up to the ranges' end offsets and returns (tests and the bench's bare loop)."""
        self._attempts(ranges, lambda: False)
        return self.stats

    def _attempts(self, ranges: list[CopyRange], should_stop) -> None:
        failures = attempts = 0  # non-transient failures; all failures, for the back-off
        failing_since: float | None = None
        while True:
            producer = None
            try:
                producer = self._new_producer()
                try:
                    self._copy_with(producer, ranges, should_stop)
                except SystemError as e:
                    # confluent-kafka raises a producer's fatal error (fenced by a twin) from inside
                    # flush()/poll(); when a delivery callback runs after that, Python reports the
                    # callback as returning "with an exception set": the fatal error is its cause.
                    if isinstance(e.__cause__, KafkaException):
                        raise e.__cause__ from None
                    raise
                return
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
                if self._committed:
                    failures, attempts, failing_since = 0, 0, None
                self._committed = False
                now = time.monotonic()
                failing_since = failing_since if failing_since is not None else now
                # A cluster that is down or moving leaders answers "retry" until it is back, which
                # takes longer than a few quick attempts (a broker restart, a network partition). A
                # twin (the paused pod this one replaced, waking up) fences this shard until it dies.
                # Both are retried, backing off, for as long as the task runs; anything else has a
                # few attempts.
                attempts += 1
                if not transient(err) and outcome is not Outcome.FENCED:
                    failures += 1
                if outcome is Outcome.FENCED and attempts in (3, 10, 30, 100):
                    log.warning("shard %d fenced %d times without a commit in between: is another instance "
                                "of job %r running against this target?", self.shard, attempts, self.cfg.name,
                                extra={"shard": self.shard, "event": "fenced_repeatedly"})
                if failures >= MAX_ATTEMPTS or now - failing_since >= RETRY_BUDGET_S:
                    raise RuntimeError(f"shard {self.shard}: giving up after {failures} failed transactions and "
                                       f"{now - failing_since:.0f} s without a commit; last error: {err.str()}"
                                       ) from None
                log.warning("transaction failed (%s); restarting from the target's offsets (failing for %.0f s)",
                            err.str(), now - failing_since, extra={"shard": self.shard})
                self.stats.producer_recreations += 1
            finally:
                # Resumed before unassign: a partition assigned again while still paused stalls ~1 s
                # after resume() in librdkafka 2.16 (measured: every third micro-batch). Only what
                # was paused: resuming a partition that was not made librdkafka fetch from a stale
                # position (confluentinc/librdkafka#4637).
                if self._paused:
                    self.consumer.resume(self._paused)
                    self._paused = []
                self.consumer.unassign()
                self._clear_txn()
                self._states = {}  # the next attempt's partitions are settled once it sees their ends again
                self._forget_backlog()
                del producer
            self._report(force=True)  # before backing off: the driver stops taking them as settled
            # The next task learns this task's commits from the driver (floors): a commit in doubt is
            # settled first, by one more attempt (its init_transactions() ends the transaction at the
            # coordinator, then _resume_points reads the outcome).
            if should_stop() and self._in_doubt is None:
                return
            time.sleep(min(0.1 * 2 ** min(attempts, 6), 5.0))

    def _clear_txn(self) -> None:
        self._txn_started, self._txn_records, self._txn_begun, self._txn_busy = None, 0, False, 0.0

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

    # -- the loop -------------------------------------------------------------------------------
    def _copy_with(self, producer: Producer, ranges: list[CopyRange], should_stop) -> None:
        states = self._states = self._resume_points(ranges, should_stop)
        if not states:
            return
        tps = [TopicPartition(s.r.source_topic, s.r.partition, s.next) for s in states.values()]
        self.consumer.assign(tps)
        self._fetches.restart(_positions(states), time.monotonic())
        injected = False
        while not should_stop() and not all(s.done for s in states.values()):
            # Between transactions only: asking the source can take its whole timeout while a leader
            # is away, which would hold an open transaction (and its records' latency) that long.
            if self._fetches.due(time.monotonic()) and self._txn_started is None:
                self._check_fetching(states)
            msgs = self._fetch(self._wait())
            if msgs:
                self._produce_batch(producer, msgs, states)
            else:
                # Stats go out at most once a second, after a commit; the last commits of a burst
                # waited for the next record (or the task's end, minutes later) and the driver's
                # metrics and progress line stood still behind the target meanwhile.
                self._report()
            if not self._due(self._backlog(states, msgs)):
                continue
            if self.fault == "fail-before-commit" and not injected:
                producer.flush(30)
                raise InjectedFault("test fault: failing after producing, before commit")
            self._commit(producer, states)
            if self.fault == "fail-after-commit" and not injected:
                raise InjectedFault("test fault: failing after the first committed transaction")
            if self.fault == "stall-fetch" and not injected:
                # librdkafka #5153, simulated: the consumer stops fetching without a word.
                self.consumer.pause(self.consumer.assignment())
            injected = injected or bool(self.fault)
        if self._txn_started is not None:
            self._commit(producer, states)

    def _check_fetching(self, states: dict) -> None:
        """Replaces the source consumer when it stopped fetching partitions the source has committed
        records in (see fetch_watch)."""
        positions, window = _positions(states), self._fetches.window_s
        unmoved = self._fetches.unmoved(positions, time.monotonic())
        behind = fetch_watch.stalled({k: positions[k] for k in unmoved}, self._source_ends(unmoved)) if unmoved else []
        self._fetches.judged(bool(behind))
        if not behind:
            return
        self.stats.source_consumer_restarts += 1
        shown = ", ".join(f"{t}[{p}]" for t, p in behind[:5]) + (f" and {len(behind) - 5} more"
                                                                  if len(behind) > 5 else "")
        log.warning("the source consumer fetched nothing of %d partition(s) for %.0f s although the source has "
                    "committed records past their positions (%s): replacing it (librdkafka #5153)", len(behind),
                    window, shown,
                    extra={"shard": self.shard, "event": "source_consumer_stalled", "partitions": len(behind)})
        old = self.consumer
        self.consumer = _consumers[self._key] = kafka_clients.source_consumer(self.cfg)
        self._paused = []  # paused on the old consumer; the new one is given only unfinished partitions
        self.consumer.assign([TopicPartition(t, p, st.next) for (t, p), st in states.items() if not st.done])
        self._fetches.restart(_positions(states), time.monotonic())
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

    def _wait(self) -> float:
        if self._txn_started is None:
            return _IDLE_WAIT_S
        now = time.monotonic()
        if self._behind_until > now and self._committed:
            # Records are known to wait: a read that comes back empty is the local queue running dry
            # for a moment, so wait for them (poll returns at the first), as long as a wait for a
            # first record at most: a stop or a source that went away is noticed as soon as before.
            return max(0.0, min(self._behind_until, self._txn_started + self._bound(), now + _IDLE_WAIT_S) - now)
        return max(0.0, self._txn_started + self._interval() - now)

    def _backlog(self, states: dict, msgs: list) -> float:
        """Seconds of records still waiting at the source after the read that returned `msgs`.

        Counted on a full read only (a shorter one may end at a source transaction still open, which
        the cached high watermarks count as waiting). After a full read, a shorter or an empty one
        means the local fetch queue ran dry for a moment, not that the source did: the count made
        then, less the time since, still holds. Ending transactions at the first short read ended a
        catch-up's at 0.3 s at 1 KiB, three times the commits of its time bound (BENCHMARKS.md,
        2026-12-01). A read that waited and got nothing ends the count."""
        now = time.monotonic()
        if len(msgs) >= _CONSUME_BATCH:
            backlog = self._backlog_s(states)
            self._catching_up = backlog >= self.cfg.catch_up_transaction_seconds
            # Before a rate is measured (a task's first transaction) the count is no time at all.
            self._behind_until = now + backlog if backlog < float("inf") else 0.0
            return backlog
        if not msgs and self._waited:
            self._forget_backlog()
        return max(0.0, self._behind_until - now)

    def _forget_backlog(self) -> None:
        self._behind_until, self._catching_up = 0.0, False

    def _bound(self) -> float:
        """How long the open transaction may grow: longer in a catch-up (at least
        catch_up_transaction_seconds of records waiting), where a reader of the replica waits for
        the backlog anyway and half the commits, each of which holds the loop, copy more."""
        if self._catching_up and self._committed:
            return self.cfg.longest_transaction_seconds
        return self.cfg.max_transaction_seconds

    def _backlog_s(self, states: dict) -> float:
        """How many seconds of this shard's recent copy rate wait at the source (the high watermarks
        of the last fetch responses; no broker round trip); infinite before a rate is measured (a
        task's start, as in a catch-up)."""
        if self._rate <= 0:
            return float("inf")
        enough = self._rate * self.cfg.longest_transaction_seconds  # no transaction grows longer
        waiting = 0
        for st in states.values():
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
        return waiting / self._rate

    def _interval(self) -> float:
        """How long a transaction stays open once the source is drained: `commit_interval_ms`, or
        longer when commits would take capacity the shard's load needs (see _HEADROOM)."""
        return max(self.cfg.commit_interval_ms / 1000, commit_stretch(self._commit_cost, self._load()))

    def _load(self) -> float:
        return min(_MAX_LOAD, _HEADROOM * self._rate * self._record_cost)

    def _fetch(self, wait: float) -> list:
        self._work_began = time.monotonic()
        msgs = self.consumer.consume(_CONSUME_BATCH, 0)
        self._waited = not msgs and wait > 0
        if msgs or wait <= 0:
            return msgs
        # consume() with a timeout waits for a full batch; poll() returns at the first record.
        first = self.consumer.poll(wait)
        self._work_began = time.monotonic()
        return [first, *self.consumer.consume(_CONSUME_BATCH - 1, 0)] if first is not None else []

    def _due(self, backlog_s: float) -> bool:
        """Whether the open transaction ends now, `backlog_s` seconds of records still waiting at the
        source (0: none queued beyond what was just read)."""
        if self._txn_started is None:
            return False
        age = time.monotonic() - self._txn_started
        if self._txn_records >= self.cfg.max_records_per_transaction or age >= self._bound():
            return True
        # A transaction as long as the backlog is: near the ceiling, a shard that fell behind a
        # little commits a little less often and catches up, instead of falling a second behind and
        # then committing once a second, which kept p50 near 1 s at the top rate steps (BENCHMARKS.md).
        # The backlog shrinks while the transaction copies it, so the two meet; a pause (a slow
        # commit, a busy broker) grows one transaction by the pause, not the stream's latency for good.
        # A task's first transaction (and the first after a failure) ends at the interval even in a
        # backlog: it makes a restart visible on the target at once instead of a full transaction
        # (max_transaction_seconds) later, and it measures the copy rate the backlog is counted in.
        return age >= self._interval() and (not self._committed or age >= backlog_s)

    def _changed(self, st: _PartitionState) -> None:
        st.dirty = True
        if self._txn_started is None:
            self._txn_started = time.monotonic()

    def _resume_points(self, ranges: list[CopyRange], should_stop=lambda: False
                       ) -> dict[tuple[str, int], _PartitionState]:
        if self._in_doubt is not None:
            self._settle_in_doubt()
        committed = self._read_resume_points(ranges, should_stop)
        if committed is None:
            return {}
        states = {}
        stale = time.time() - self.cfg.offsets_refresh_interval_seconds
        for r in ranges:
            c = committed.get((r.target_topic, r.partition))
            offset = c.offset if c is not None else NO_OFFSET
            start = offset if offset >= 0 else (r.start if r.start >= 0 else _OFFSET_BEGINNING)
            if r.end is not None and start >= r.end:
                continue  # already copied: a replayed plan, a retried task, or a faster twin
            meta = (c.metadata if c and c.metadata else None) or CommitMetadata(
                self.source_cluster, r.source_topic, self.cfg.shard_count, self.shard, job=self.cfg.name)
            st = states[(r.source_topic, r.partition)] = _PartitionState(r, start, offset >= 0, meta, txn_begin=start)
            # A group's offsets expire offsets.retention.minutes after their last commit: an idle
            # partition's is re-committed by its owner, in its own transaction (a commit from anywhere
            # else would fence this shard's writer).
            if needs_refresh(c, stale):
                st.refresh = True
                self._changed(st)
        return states

    def _settle_in_doubt(self) -> None:
        """Learns from the target's data whether the transaction whose commit call failed committed;
        if it did, it is counted and its end positions become floors, so a group answer from before
        it is refused. Asked until decided: the coordinator aborts an open transaction at its
        timeout at the latest, and copying on without knowing could copy it twice."""
        doubt = self._in_doubt
        probe = next(s for s in doubt.states if s.first_pair is not None)
        where = (probe.r.target_topic, probe.r.partition, probe.first_pair[1])
        give_up = time.monotonic() + self.cfg.transaction_timeout_ms / 1000 + _IN_DOUBT_GRACE_S
        waited = 0.5
        while (committed := commit_outcome.committed(self.cfg, *where)) is None:
            if time.monotonic() >= give_up:
                raise RuntimeError(f"shard {self.shard}: cannot tell whether the transaction that wrote "
                                   f"{where[0]}[{where[1]}]@{where[2]} committed: its commit call failed and the "
                                   f"target has not shown the outcome within the transaction timeout")
            log.warning("commit in doubt: %s[%d]@%d is not decided on the target yet; asking again", *where,
                        extra={"shard": self.shard, "event": "commit_in_doubt"})
            time.sleep(waited)
            waited = min(waited * 2, 5.0)
        self._in_doubt = None
        records = sum(s.records for s in doubt.states)
        log.warning("commit in doubt: the failed commit call's transaction %s (%d records)",
                    "committed: its positions are kept" if committed else "aborted: it is copied again", records,
                    extra={"shard": self.shard, "event": "commit_in_doubt_settled", "committed": committed})
        if committed:
            self._account(doubt.states, doubt.started)

    def _read_resume_points(self, ranges: list[CopyRange], should_stop) -> dict | None:
        """The fake group's offsets for `ranges`, once none lies below its floor; None if the task
        must end first.

        A broker cut off from the rest of its cluster keeps answering OffsetFetch as the group's
        coordinator from what it had, while the commits go to the coordinator the others elected:
        resuming from its answer copied the last seconds again (make chaos, target-leader-isolate:
        94,095 duplicates). Such an answer is refused and asked again on a new client, which looks
        the coordinator up afresh, until it is as new as what this run is known to have committed."""
        waited, logged = 0.5, 0.0
        while True:
            committed = read_committed(self.group, [(r.target_topic, r.partition) for r in ranges])
            behind = []
            for r in ranges:
                floor = self._floors.get((r.source_topic, r.partition), NO_OFFSET)
                c = committed.get((r.target_topic, r.partition))
                if floor >= 0 and (c is None or c.offset < floor):
                    behind.append((r, c.offset if c is not None else NO_OFFSET, floor))
            if not behind:
                return committed
            if time.monotonic() - logged >= _STALE_LOG_S:
                logged = time.monotonic()
                r, offset, floor = behind[0]
                log.warning("the target answered stale offsets for %d partitions of group %s (e.g. %s[%d]: %d, "
                            "but %d was committed in this run): asking again before copying", len(behind),
                            self.cfg.group, r.target_topic, r.partition, offset, floor,
                            extra={"shard": self.shard, "event": "stale_resume_point", "partitions": len(behind)})
            if should_stop():
                return None
            time.sleep(waited)
            waited = min(waited * 2, 5.0)
            stale_reader, self.group = self.group, kafka_clients.group_reader(self.cfg)
            _group_readers[self._key] = self.group
            stale_reader.close()

    def _produce_batch(self, producer: Producer, msgs: list, states: dict) -> None:
        if self.provenance is not None:  # once per batch: the default path pays nothing per record
            msgs = self.provenance.apply(
                msgs, lambda m: not states[(m.topic(), m.partition())].beyond(m.offset()))
        produce, produced, n, i = producer.produce, 0, len(msgs), 0
        # Asked once per batch, not per record (a config property: 3 % of a shard worker at 175k rec/s).
        begin = self.cfg.exactly_once and not self._txn_begun
        # A batch holds runs of one partition's records (librdkafka queues each fetched partition's
        # records together): the partition's state is looked up once per run, not per record. That
        # bookkeeping was 12 % of a shard worker's copy thread (py-spy, BENCHMARKS.md).
        while i < n:
            m = msgs[i]
            i += 1
            if m.error() is not None:
                self._on_consume_error(m, states)
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
                # The range rule of _PartitionState.beyond, inlined here and below: two method calls
                # per record on the hottest lines of the job.
                if st.done or (end is not None and offset >= end):
                    self._finish(st)
                elif offset < st.next:
                    self._on_rewind(st, offset)
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
                        report = _PairReport(st, offset, True)
                    elif run_goes_on and offset < next_offset and (end is None or next_offset < end):
                        report = None
                    else:
                        report = _PairReport(st, offset)
                    if begin:
                        producer.begin_transaction()
                        self._txn_begun, begin = True, False
                    # Positional, in the C signature's order (topic, value, key, partition, callback,
                    # on_delivery, timestamp, headers): any keyword builds a dict per call, 0.4 us of
                    # the ~4.5 us a 100 B record costs a shard worker (BENCHMARKS.md).
                    try:
                        produce(target_topic, value, key, partition, report, None, ts if ts > 0 else 0, m.headers())
                    except BufferError:  # rare: the arguments are built again rather than on every record
                        _produce_when_room(producer, (target_topic, value, key, partition, report, None,
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
                        self._finish(st)
                if not run_goes_on:
                    break
                m, offset = nxt, next_offset
                i += 1
        producer.poll(0)
        if produced:
            self._txn_records += produced
            self._txn_busy += time.monotonic() - self._work_began
            if self._txn_started is None:
                self._txn_started = self._work_began

    def _on_rewind(self, st: _PartitionState, offset: int) -> None:
        """The source consumer handed back an offset below the copy position: everything below it was
        already copied (in this attempt's transactions) or deliberately skipped, so copying it again
        would duplicate it on the target. Seen once in the multi-broker chaos run during source rolling
        restarts (RELIABILITY.md): ~570 records of a partition copied twice, nothing logged. The
        consumer's position is not trusted over ours; its extra records are dropped."""
        if st.rewound_from != st.next:
            st.rewound_from = st.next
            self.stats.source_rewinds += 1
            log.warning("source %s[%d]: the consumer delivered offset %d below the copy position %d; records "
                        "below the position were already copied and are dropped", st.r.source_topic,
                        st.r.partition, offset, st.next,
                        extra={"shard": self.shard, "event": "source_rewind", "topic": st.r.source_topic,
                               "partition": st.r.partition, "offset": offset, "position": st.next})

    def _finish(self, st: _PartitionState) -> None:
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

    def _on_consume_error(self, m, states: dict) -> None:
        err = m.error()
        st = states.get((m.topic(), m.partition()))
        if err.code() == KafkaError._PARTITION_EOF:
            if st is None or st.done:
                return
            if st.beyond(m.offset()):
                self._finish(st)
                return
            if m.offset() > st.next:
                # The end of what the source has committed lies past the last record: transaction
                # markers or aborted records. Moving over them lets the group reach the source's end.
                st.skip_to(m.offset())
                self._changed(st)
            st.end_seen = m.offset()
            return
        if st is not None and err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            self._on_out_of_range(st)
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

    def _on_out_of_range(self, st: _PartitionState) -> None:
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
            self.stats.data_loss_events += 1
        st.skip_to(max(low, st.next if st.next >= 0 else low))
        self._changed(st)
        if st.beyond(st.next):
            self._finish(st)
        else:
            # seek() is refused on a partition in error state; re-adding it to the assignment works.
            self.consumer.incremental_unassign([tp])
            self.consumer.incremental_assign([TopicPartition(st.r.source_topic, st.r.partition, st.next)])

    def _commit(self, producer: Producer, states: dict) -> None:
        entered = time.monotonic()
        started = self._txn_started if self._txn_started is not None else entered
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
                if not self._txn_begun:
                    producer.begin_transaction()
                    self._txn_begun = True
                group = self.group.consumer_group_metadata()
                self._bounded.call(producer, "send_offsets_to_transaction",
                                   lambda: producer.send_offsets_to_transaction(offsets, group, 60), 60)
            if self._txn_begun:
                # From here a failure no longer means the transaction aborted (see commit_outcome).
                if any(s.first_pair is not None for s in advanced):
                    self._in_doubt = _InDoubt(advanced, started)
                self._bounded.call(producer, "commit_transaction", lambda: producer.commit_transaction(60), 60)
                if self.fault == "commit-response-lost":
                    self.fault = None
                    raise KafkaException(KafkaError(KafkaError._FENCED, "test fault: the commit landed, its "
                                                    "response was lost and the retry came back fenced"))
                self._in_doubt = None
        elif offsets:
            self.group.commit(offsets=offsets, asynchronous=False)
        if self._txn_records:
            self._record_cost = _moving_average(self._record_cost, self._txn_busy / self._txn_records)
        self._clear_txn()
        self._committed = True
        ended = time.monotonic()
        cost = ended - entered
        self._commit_cost = _moving_average(self._commit_cost, cost)
        if self._cycle_began is not None and ended > self._cycle_began:
            self._rate = _moving_average(self._rate, sum(s.records for s in advanced) / (ended - self._cycle_began))
        self._cycle_began = ended
        self._account(advanced, started)
        self._report()

    def _account(self, advanced: list[_PartitionState], started: float) -> None:
        """Counts a committed transaction and raises its partitions' floors."""
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
            if s.refresh and not s.records:
                self.stats.refreshed += 1
            if s.first_ts > 0 and len(self.stats.latency_seconds) < 64 * _LATENCY_SAMPLES_PER_TXN:
                self.stats.latency_seconds += [now - s.first_ts / 1000, now - s.last_ts / 1000]
            s.dirty, s.refresh, s.records, s.bytes, s.first_ts, s.last_ts = False, False, 0, 0, -1, -1
            s.txn_begin, s.first_pair, s.gaps, s.delivery_error = s.next, None, [], None
            s.promised = True  # the fake group holds its offset now: a later gap is data loss
            self._floors[(s.r.source_topic, s.r.partition)] = s.next

    def _report(self, force: bool = False) -> None:
        if self._link is None:
            return
        now = time.monotonic()
        settled = None
        if force or now - self._settled_checked >= _SETTLED_INTERVAL_S:
            if now - self._settled_resent >= _SETTLED_RESEND_S:
                self._sent_settled, self._settled_resent = {}, now
            settled, self._settled_checked = self._settled_changes(), now
        if self.stats.empty() and not settled:
            return
        if not force and not settled and now - self._reported < _REPORT_INTERVAL_S:
            return
        stats = None if self.stats.empty() else self.stats.to_dict()
        if self._link.report(stats, settled):
            if stats is not None:
                self.stats = CopyStats()
            for key, offset in (settled or {}).items():
                if offset < 0:
                    self._sent_settled.pop(key, None)
                else:
                    self._sent_settled[key] = offset
        self._reported = now

    def _settled_changes(self) -> dict[str, int]:
        """Partitions that became settled or stopped being so since the driver was last told: settled
        means the group holds the source's end, as this task's last fetch of the partition saw it (an
        end-of-partition event, nothing arrived since, nothing of it in the open transaction). The
        driver takes their lag as 0 without asking the clusters (`ControlServer.settled`): at 5,000
        idle partitions, asking was most of an idle job's CPU (BENCHMARKS.md)."""
        now_settled = {f"{k[0]}|{k[1]}": st.next for k, st in self._states.items()
                       if st.end_seen >= 0 and st.next == st.end_seen and st.promised and not st.dirty}
        changes = {k: o for k, o in now_settled.items() if self._sent_settled.get(k) != o}
        changes.update({k: -1 for k in self._sent_settled.keys() - now_settled.keys()})
        return changes

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
                                self.cfg.name, int(time.time()),
                                CommitMetadata.target_cluster_of(self.cfg, self.group, s.r.target_topic))
        return s.meta.encode()


@dataclass
class _InDoubt:
    states: list[_PartitionState]  # the transaction's partitions, as they stood when its commit began
    started: float


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


def _produce_when_room(producer: Producer, args: tuple) -> None:
    """librdkafka's local queue is full: lets deliveries drain until the record fits."""
    while True:
        producer.poll(0.05)
        try:
            producer.produce(*args)
            return
        except BufferError:
            continue


def _why_fatal(err: KafkaError) -> str:
    if err.code() in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE):
        return "the target refused a record as too large"
    return "retrying cannot help"


def _positions(states: dict) -> dict:
    """The copy position of every unfinished partition that has one."""
    return {k: st.next for k, st in states.items() if not st.done and st.next >= 0}


def _moving_average(average: float, sample: float) -> float:
    """Recent samples weigh most; 0 means no sample yet."""
    return sample if not average else 0.7 * average + 0.3 * sample


def commit_stretch(commit_cost: float, load: float) -> float:
    """The shortest transaction that leaves the loop `load` (0..1) of its time for producing when each
    commit takes `commit_cost` seconds: producing T out of every T + commit_cost."""
    return commit_cost * load / (1.0 - load)


def needs_refresh(c: Committed | None, stale_before: float) -> bool:
    """A committed offset whose last commit (or unknown commit time: an older entry) is older than
    `stale_before` (unix seconds)."""
    return c is not None and c.offset >= 0 and (c.metadata is None or c.metadata.committed_at < stale_before)


def fault_for_attempt(attempt: int) -> str | None:
    """Test-only fault injection, active on a task's first attempt so Spark's retry must repair it."""
    fault = os.environ.get("REPLICATOR_TEST_FAULT")
    return fault if fault and attempt == 0 else None
