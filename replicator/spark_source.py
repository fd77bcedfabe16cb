"""Spark wiring: a Python streaming data source that plans micro-batches and a sink that copies them.

Planning (driver): offsets are `{source_topic: {"partition": offset}}`. The first batch starts at the
fake group's offsets on the target; every batch ends at the source's last stable offsets, cut down
by admission control. `partitions()` turns a batch into one input partition per shard.

Idle partitions: a never-joined group's offsets expire `offsets.retention.minutes` after their last
commit, which would make the next start copy an idle partition again. The planner hands a partition
that no batch touched for `offsets_refresh_interval_seconds` to its owning shard's next task, which
re-commits the unchanged offset in its own transaction. Only the owner writes under its
transactional id: a refresh from anywhere else would fence the shard's running writer. A batch that
has nothing but refreshes to do is forced by an epoch under the `REFRESH_KEY` pseudo-topic (not a
legal Kafka topic name).

Copying (executors): the reader emits one row per shard describing its ranges; the writer's task
runs that shard's exactly-once copy (`shard_copy`) in the same Python worker that produces. Records
therefore cross from the source consumer to the target producer without a round trip through the
JVM; bench/DESIGN.md has the measurement behind that choice.

The Spark checkpoint of a query only stores these plans; a run always uses a fresh one, because the
writer resumes from the target's fake group whatever the plan says.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from replicator import kafka_clients, logs
from replicator.config import ReplicatorConfig
from replicator.sharding import shard_of

log = logging.getLogger(__name__)

SCHEMA = StructType([StructField("shard", IntegerType(), False), StructField("ranges", StringType(), False)])
Offsets = dict[str, dict[str, int]]
REFRESH_KEY = "#refresh"


class ReplicatorDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "replicator"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ReplicationPlanner(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return ShardWriter(self.options)


@dataclass
class ShardPlan(InputPartition):
    shard: int
    # JSON {"copy": [[source_topic, target_topic, partition, start, end], ...],
    #       "refresh": [[source_topic, target_topic, partition], ...]}
    ranges: str


class ReplicationPlanner(DataSourceStreamReader):
    """Runs in one long-lived Python process on the driver; state persists between calls."""

    def __init__(self, options: dict[str, str]) -> None:
        self.cfg = ReplicatorConfig.from_json(options["config"])
        # This Python process is Spark's, not the driver's: topic events logged here (created, grown,
        # synced, deleted) need the job's log format too.
        logs.configure(self.cfg.log_format, self.cfg.log_level)
        self.stop_flag = options.get("stop_flag", "")
        self._admins = None
        self._topics: dict[str, tuple[str, int]] = {}  # source -> (target, partitions)
        self._refreshed = 0.0
        self._started = time.monotonic()
        self._last_copied: dict[tuple[str, int], float] = {}  # source partition -> last batch that advanced it
        self._copied_to: dict[tuple[str, int], int] = {}
        self._refresh_epochs: dict[int, list[tuple[str, int]]] = {}  # epoch -> partitions it re-commits

    # -- Kafka lookups ----------------------------------------------------------------------
    def _clients(self):
        if self._admins is None:
            self._admins = (kafka_clients.source_admin(self.cfg), kafka_clients.target_admin(self.cfg))
        return self._admins

    def _refresh_topics(self, force: bool = False) -> None:
        """New topics and partitions join the plan only once their target topic has them, so no
        record or offset is ever written for a partition the target lacks."""
        if not force and time.monotonic() - self._refreshed < self.cfg.refresh_topics_interval_seconds:
            return
        from replicator import topic_sync

        source, target = self._clients()
        found, skipped = topic_sync.selection(self.cfg, source)
        for gone in sorted(set(self._topics) - set(found)):
            self._forget(gone, skipped.get(gone))
        mappings = topic_sync.ensure_target_topics(self.cfg, source, target, found)
        if self.cfg.sync_topic_configs:
            try:
                topic_sync.sync_configs(self.cfg, source, target, mappings)
            except KafkaException as e:  # drift is retried at the next refresh; records keep flowing
                log.warning("topic config sync failed: %s", e.args[0].str())
        self._topics = {m.source: (m.target, m.partitions) for m in mappings}
        self._refreshed = time.monotonic()

    def _forget(self, topic: str, unavailable: str | None = None) -> None:
        target = self._topics.pop(topic, (None,))[0]
        if unavailable:  # resumes from the fake group's offsets when it is back
            log.warning("source topic %s is %s: paused", topic, unavailable)
            return
        log.warning("source topic %s was deleted: its replication stops; target topic %s is kept",
                    topic, target, extra={"event": "source_topic_deleted", "topic": topic, "target_topic": target})

    def _list_offsets(self, spec_factory, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if not tps:
            return {}
        from confluent_kafka import IsolationLevel

        source, _ = self._clients()
        request = {TopicPartition(t, p): spec_factory() for t, p in tps}
        futures = source.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED,
                                      request_timeout=30)
        out, deleted = {}, set()
        for tp, f in futures.items():
            try:
                out[(tp.topic, tp.partition)] = f.result().offset
            except KafkaException as e:
                if e.args[0].code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                    raise
                deleted.add(tp.topic)  # deleted since the last refresh
        for topic in sorted(deleted & set(self._topics)):
            self._forget(topic)
        return out

    def _all_partitions(self) -> list[tuple[str, int]]:
        return [(s, p) for s, (_, n) in sorted(self._topics.items()) for p in range(n)]

    # -- Spark API ----------------------------------------------------------------------------
    def initialOffset(self) -> Offsets:
        from replicator.offsets import read_group

        self._refresh_topics(force=True)
        _, target = self._clients()
        committed = read_group(kafka_clients.group_reader(self.cfg), {t for t, _ in self._topics.values()})
        tps = self._all_partitions()
        earliest = self._list_offsets(OffsetSpec.earliest, tps)
        out: Offsets = {}
        for s, p in tps:
            c = committed.get((self._topics[s][0], p))
            out.setdefault(s, {})[str(p)] = self._copied_to[(s, p)] = c.offset if c is not None else earliest[(s, p)]
        return out

    def latestOffset(self, start: Offsets, limit=None) -> Offsets:
        if self.stop_flag and os.path.exists(self.stop_flag):
            return start  # stopping: plan nothing new, let the running batch finish
        try:
            self._refresh_topics()
            tps = self._all_partitions()
            latest = self._list_offsets(OffsetSpec.latest, tps)
        except KafkaException as e:
            # A source broker restarting ("No leaders found"): plan nothing this trigger, ask again next.
            log.warning("source offsets unavailable (%s); retrying at the next trigger", e.args[0].str())
            return start
        tps = [tp for tp in tps if tp in latest]
        new = [tp for tp in tps if str(tp[1]) not in start.get(tp[0], {})]
        begin = {tp: start[tp[0]][str(tp[1])] for tp in tps if tp not in new}
        begin.update(self._list_offsets(OffsetSpec.earliest, new))
        end = _admit(begin, latest, self.cfg.max_records_per_batch, _max_rows(limit))
        return self._with_refresh(start, end, begin)

    def _with_refresh(self, start: Offsets, end: Offsets, begin: dict[tuple[str, int], int]) -> Offsets:
        """Carries the refresh epoch forward, one up when idle partitions are due (see the module doc)."""
        now = time.monotonic()
        due = [tp for tp in begin
               if end[tp[0]][str(tp[1])] == begin[tp] and begin[tp] > 0
               and now - self._last_copied.get(tp, self._started) >= self.cfg.offsets_refresh_interval_seconds]
        epoch = start.get(REFRESH_KEY, {}).get("epoch", 0)
        if due:
            epoch += 1
            self._refresh_epochs = {epoch: sorted(due)}  # an epoch not yet planned is superseded
            for tp in due:
                self._last_copied[tp] = now
        return {**end, REFRESH_KEY: {"epoch": epoch}}

    def partitions(self, start: Offsets, end: Offsets) -> list[ShardPlan]:
        by_shard: dict[int, dict[str, list]] = {}

        def work(topic: str, p: int) -> dict[str, list]:
            return by_shard.setdefault(shard_of(topic, p, self.cfg.shard_count), {"copy": [], "refresh": []})

        for topic, ends in sorted(end.items()):
            target = self._topics.get(topic, (None,))[0]
            if target is None:
                continue  # topic vanished from the selection (or the refresh epoch)
            for p_str, e in ends.items():
                p = int(p_str)
                s = start.get(topic, {}).get(p_str, -1)
                if e > s:
                    work(topic, p)["copy"].append([topic, target, p, s, e])
        epoch = end.get(REFRESH_KEY, {}).get("epoch", 0)
        if epoch != start.get(REFRESH_KEY, {}).get("epoch", 0):
            for topic, p in self._refresh_epochs.pop(epoch, []):
                if topic in self._topics:
                    work(topic, p)["refresh"].append([topic, self._topics[topic][0], p])
        return [ShardPlan(shard, json.dumps(w)) for shard, w in sorted(by_shard.items())]

    def read(self, partition: ShardPlan) -> Iterator[tuple[int, str]]:
        yield (partition.shard, partition.ranges)

    def commit(self, end: Offsets) -> None:
        # The truth was committed on the target, in the writers' transactions; this only tells the
        # idle-partition refresh which partitions a finished batch advanced.
        now = time.monotonic()
        for topic, ends in end.items():
            if topic == REFRESH_KEY:
                continue
            for p_str, e in ends.items():
                tp = (topic, int(p_str))
                if e > self._copied_to.get(tp, -1):
                    self._last_copied[tp] = now
                    self._copied_to[tp] = e


def _max_rows(limit) -> int | None:
    return getattr(limit, "max_rows", None)


def _admit(begin: dict[tuple[str, int], int], latest: dict[tuple[str, int], int], budget: int,
           spark_limit: int | None = None) -> Offsets:
    """End offsets for the next batch: everything available, at most `budget` offsets in total,
    shared fairly between lagging partitions so none starves."""
    if spark_limit is not None:
        budget = min(budget, spark_limit)
    lag = {tp: max(0, latest[tp] - begin[tp]) for tp in begin}
    grant = {tp: 0 for tp in begin}
    pending = {tp for tp, n in lag.items() if n > 0}
    while pending and budget > 0:
        share = max(1, budget // len(pending))
        for tp in sorted(pending):
            take = min(share, lag[tp] - grant[tp], budget)
            grant[tp] += take
            budget -= take
            if grant[tp] >= lag[tp]:
                pending.discard(tp)
            if budget <= 0:
                break
    out: Offsets = {}
    for (topic, p), b in begin.items():
        out.setdefault(topic, {})[str(p)] = b + grant[(topic, p)]
    return out


@dataclass
class ShardCommitMessage(WriterCommitMessage):
    stats: dict


class ShardWriter(DataSourceStreamWriter):
    """`write` runs on executors; `commit`/`abort` on the driver with the successful attempts' stats."""

    def __init__(self, options: dict[str, str]) -> None:
        self.config_json = options["config"]
        self.stats_addr = options.get("stats_addr", "")

    def write(self, iterator: Iterator) -> ShardCommitMessage:
        from pyspark import TaskContext

        from replicator.shard_copy import CopyRange, ShardCopier, fault_for_attempt

        cfg = ReplicatorConfig.from_json(self.config_json)
        ctx = TaskContext.get()
        fault = fault_for_attempt(ctx.attemptNumber() if ctx else 0)
        total: dict = {}
        for row in iterator:
            work = json.loads(row.ranges)
            ranges = [CopyRange(*r) for r in work["copy"]]
            stats = ShardCopier(cfg, row.shard, fault).copy(ranges, [tuple(r) for r in work["refresh"]]).to_dict()
            total = _merge(total, stats)
        return ShardCommitMessage(total)

    def commit(self, messages: list, batchId: int) -> None:
        merged: dict = {}
        for m in messages:
            if m is not None:
                merged = _merge(merged, m.stats)
        if self.stats_addr and merged:
            _send_stats(self.stats_addr, {"batch": batchId, **merged})

    def abort(self, messages: list, batchId: int) -> None:
        # Nothing to undo: a failed attempt's committed transactions are real and recorded in the
        # fake group; the retry resumes after them.
        log.warning("micro-batch %s aborted by Spark; the next attempt resumes from the target", batchId)


def _merge(a: dict, b: dict) -> dict:
    if not a:
        return json.loads(json.dumps(b))
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = out.get(k, 0) + v
        elif isinstance(v, list):
            out[k] = out.get(k, []) + v
        elif isinstance(v, dict):
            parts = dict(out.get(k, {}))
            for pk, (records, nbytes, nxt, ts) in v.items():
                prev = parts.get(pk, [0, 0, 0, 0.0])
                parts[pk] = [prev[0] + records, prev[1] + nbytes, max(prev[2], nxt), max(prev[3], ts)]
            out[k] = parts
    return out


def _send_stats(addr: str, payload: dict) -> None:
    host, port = addr.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(json.dumps(payload).encode() + b"\n")
    except OSError as e:  # metrics must never fail a batch whose data is committed
        log.warning("could not report batch stats to the driver: %s", e)
