"""Spark wiring: a Python streaming data source whose tasks copy; a JVM no-op sink ends the plan.

A micro-batch is an epoch, not a range of offsets: its plan gives each shard the partitions it owns,
and the shard's task copies whatever arrives in them for `batch_duration_seconds` (see `shard_copy`),
committing small transactions all along. Records therefore never wait for a batch to be planned or
a task to start; Spark's batch boundary is only where new topics and partitions join and where a
task's producer is re-created. The driver ends a batch early through `task_control` (stop, promoted
target, changed partitions).

Planning (driver): offsets are `{"#epoch": {"n": N}}`. Every trigger after a finished batch plans the
next epoch, unless the job is stopping or nothing is selected. No offsets are looked up for it: where
each partition resumes is read by its task from the fake group on the target.

Copying (executors): the reader's task for a shard runs that shard's exactly-once copy in its own
Python worker and emits no rows; the query's sink is Spark's JVM `noop`. Records cross from the
source consumer to the target producer without a round trip through the JVM (bench/DESIGN.md), and
a task costs one Python worker: a Python sink took a second one per shard, idle for the whole task
and kept another minute by Spark, plus a Python process on the driver for every batch's commit
(~250 MiB of the process tree in its first minute, BENCHMARKS.md). What a task copied reaches the
driver live through `task_control`; that Spark finished a batch, the driver learns from its query
listener (`Replicator`).

The Spark checkpoint of a query only stores these epochs; a run always uses a fresh one, because the
tasks resume from the target's fake group whatever the plan says.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from replicator import logs
from replicator.clients import kafka_clients
from replicator.config import ReplicatorConfig
from replicator.engine.sharding import shard_of

log = logging.getLogger("replicator.spark_source")  # the log's public name, kept when the module moved

SCHEMA = StructType([StructField("shard", IntegerType(), False), StructField("ranges", StringType(), False)])
Offsets = dict[str, dict[str, int]]
EPOCH_KEY = "#epoch"  # not a legal Kafka topic name


class ReplicatorDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "replicator"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ReplicationPlanner(self.options)


@dataclass
class ShardPlan(InputPartition):
    shard: int
    # JSON {"batch": N, "copy": [[source_topic, target_topic, partition], ...]}
    ranges: str


class ReplicationPlanner(DataSourceStreamReader):
    """Plans in one long-lived Python process on the driver (state persists between calls); `read`
    runs on executors, in a copy of the planner as it was built."""

    def __init__(self, options: dict[str, str]) -> None:
        self.cfg = ReplicatorConfig.from_json(options["config"])
        self.stats_addr = options.get("stats_addr", "")
        # This Python process is Spark's, not the driver's: topic events logged here (created, grown,
        # synced, deleted) need the job's log format too.
        logs.configure(self.cfg.log_format, self.cfg.log_level)
        self.stop_flag = options.get("stop_flag", "")
        self._admins = None
        self._topics: dict[str, tuple[str, int]] = {}  # source -> (target, partitions)
        self._refreshed = 0.0
        self._batch_ran = True

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
        from replicator.topics import sync as topic_sync

        source, target = self._clients()
        asking = "source"
        try:
            found, skipped = topic_sync.selection(self.cfg, source)
            for gone in sorted(set(self._topics) - set(found)):
                self._forget(gone, skipped.get(gone))
            asking = "target"
            # Config drift is the driver's to sync (job._sync_configs): it runs while batches do.
            mappings = topic_sync.ensure_target_topics(self.cfg, source, target, found)
        except KafkaException as e:
            # A chaos run saw these lookups fail for minutes after a SIGSTOP/SIGCONT of the target
            # broker while the driver's other clients got answers (docs/reliability.md): the next
            # trigger asks through new clients.
            self._admins = None
            raise KafkaException(KafkaError(e.args[0].code(), f"{asking}: {e.args[0].str()}")) from e
        finally:
            for client in (source, target):
                client.poll(0)  # their librdkafka lines (why a connection failed) reach the log
        self._topics = {m.source: (m.target, m.partitions) for m in mappings}
        self._refreshed = time.monotonic()

    def _forget(self, topic: str, unavailable: str | None = None) -> None:
        target = self._topics.pop(topic, (None,))[0]
        if unavailable:  # resumes from the fake group's offsets when it is back
            log.warning("source topic %s is %s: paused", topic, unavailable)
            return
        log.warning("source topic %s was deleted: its replication stops; target topic %s is kept",
                    topic, target, extra={"event": "source_topic_deleted", "topic": topic, "target_topic": target})

    # -- Spark API ----------------------------------------------------------------------------
    def initialOffset(self) -> Offsets:
        return {EPOCH_KEY: {"n": 0}}

    def latestOffset(self, start: Offsets, limit=None) -> Offsets:
        if self.stop_flag and os.path.exists(self.stop_flag):
            return start  # stopping: plan nothing new, let the running batch finish
        try:
            # After a batch (which can end early because partitions changed) the next one sees them.
            self._refresh_topics(force=self._batch_ran)
        except KafkaException as e:
            # A source broker restarting ("No leaders found"): plan nothing this trigger, ask again next.
            log.warning("source topics unavailable (%s); retrying at the next trigger", e.args[0].str())
            return start
        self._batch_ran = False
        if not self._topics:
            return start  # nothing selected: no batch until a topic appears
        return {EPOCH_KEY: {"n": _epoch(start) + 1}}

    def partitions(self, start: Offsets, end: Offsets) -> list[ShardPlan]:
        by_shard: dict[int, list] = {}
        for topic, (target, n) in sorted(self._topics.items()):
            for p in range(n):
                by_shard.setdefault(shard_of(topic, p, self.cfg.shard_count), []).append([topic, target, p])
        batch = _epoch(end)
        return [ShardPlan(shard, json.dumps({"batch": batch, "copy": work}))
                for shard, work in sorted(by_shard.items())]

    def read(self, partition: ShardPlan) -> Iterator[tuple[int, str]]:
        """The shard's task: copies until the batch's duration ends or the driver ends it."""
        copy_shard(self.cfg, partition, self.stats_addr)
        yield from ()

    def commit(self, end: Offsets) -> None:
        # The truth was committed on the target, in the tasks' transactions.
        self._batch_ran = True


def _epoch(offsets: Offsets) -> int:
    return int(offsets.get(EPOCH_KEY, {}).get("n", 0))


def epoch_of(end_offset_json: str) -> int | None:
    """The epoch of a query progress event's end offset (`SourceProgress.endOffset`)."""
    try:
        return _epoch(json.loads(end_offset_json))
    except (TypeError, ValueError, AttributeError):
        return None


def copy_shard(cfg: ReplicatorConfig, plan: ShardPlan, stats_addr: str) -> None:
    """Executors: one shard's exactly-once copy for one batch."""
    from pyspark import TaskContext

    from replicator.engine.faults import fault_for_attempt
    from replicator.engine.shard_copy import CopyRange
    from replicator.engine.task_control import DriverLink

    logs.configure(cfg.log_format, cfg.log_level)  # an executor's Python worker: the job's log format too
    ctx = TaskContext.get()
    fault = fault_for_attempt(ctx.attemptNumber() if ctx else 0)
    deadline = time.monotonic() + cfg.batch_duration_seconds
    work = json.loads(plan.ranges)
    link = DriverLink(stats_addr, work["batch"], plan.shard)
    try:
        copier = _copier(cfg, plan.shard, fault, deadline, link)
        if copier is None:
            return
        ranges = [CopyRange(source, target, p, -1) for source, target, p in work["copy"]]
        left = copier.run(ranges, deadline, link)
    finally:
        link.close()
    if not left.empty() and stats_addr:
        # The live line broke during the task: one more try on a fresh connection (metrics only).
        _send_stats(stats_addr, {**left.to_dict(), "batch": work["batch"], "shard": plan.shard})


def _copier(cfg: ReplicatorConfig, shard: int, fault: str | None, deadline: float, link):
    """The shard's copier, once the clusters answer its first lookups; None when they did not
    before the batch's deadline (a broker restarting): the next batch tries again."""
    from replicator.clients.client_errors import transient
    from replicator.engine.shard_copy import ShardCopier

    wait = 0.2
    while True:
        try:
            return ShardCopier(cfg, shard, fault)
        except KafkaException as e:
            if not transient(e.args[0]):
                raise
            if time.monotonic() + wait >= deadline or link.stop_requested():
                log.warning("shard %d: the clusters did not answer before the batch ended (%s)", shard,
                            e.args[0].str(), extra={"shard": shard})
                return None
            time.sleep(wait)
            wait = min(wait * 2, 5.0)


def _send_stats(addr: str, payload: dict) -> None:
    from replicator.engine.task_control import DriverLink

    link = DriverLink(addr, payload["batch"], payload.get("shard", -1))  # metrics never fail a task
    link.report(payload)
    link.close()
