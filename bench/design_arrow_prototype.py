"""The data path the engine issue recommended, built only to be measured against ours (design B).

    python -m bench.design_arrow_prototype --source H:P --target H:P --topics REGEX --name N --alias A \
        [--shards 2] [--master 'local[2,4]']

* Reader: the engine's own planner (`ReplicationPlanner`: same topic sync, fake-group start, admission
  control, one input partition per shard), but `read()` consumes the shard's ranges with
  confluent-kafka and yields `pyarrow.RecordBatch`es of (topic, partition, offset, key, value,
  headers, timestamp). Spark carries them through the JVM to the writer.
* Writer: a `DataSourceStreamArrowWriter` whose task takes the shard's static transactional.id,
  calls `init_transactions()`, re-reads the fake group, drops records below its offsets, produces
  them in transactions bounded like ours (`max_records_per_transaction`, `max_transaction_seconds`)
  and commits the next offsets with `send_offsets_to_transaction`, with the engine's commit metadata.
  A Kafka error fails the task: the records it held are gone, so Spark's retry reads them again.

Same clients as the engine (`kafka_clients.source_consumer` / `target_producer`), same Spark session
settings (`spark_session.spark_session`). Known gap, irrelevant to the measurement (non-transactional source):
the writer only sees records, so a range ending in transaction markers commits the offset after its
last record, not the planned end.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from replicator import config, job, kafka_clients, logs, spark_session, transactional_ids
from replicator.config import ReplicatorConfig
from replicator.offsets import CommitMetadata, read_committed
from replicator.replication_policy import policy_for
from replicator.sharding import shard_of
from replicator.spark_source import ReplicationPlanner, ShardPlan

log = logging.getLogger("bench.design_arrow_prototype")

FORMAT = "replicator-arrow-prototype"
HEADER = StructType([StructField("key", StringType(), False), StructField("value", BinaryType(), True)])
SCHEMA = StructType([
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False),
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("headers", ArrayType(HEADER, False), True),
    StructField("timestamp", LongType(), False),
])
# Spark checks every batch read() yields against exactly this Arrow schema.
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")
_HEADERS_TYPE = ARROW_SCHEMA.field("headers").type
_OFFSET_BEGINNING = -2
_STALL_TIMEOUT_S = 120.0

# Per Python worker, as in the engine: consumers keep warm connections between micro-batches.
_consumers: dict[str, Consumer] = {}
_group_readers: dict[str, Consumer] = {}


class ArrowPrototypeSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> ArrowRecordReader:
        return ArrowRecordReader(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> ArrowTransactionalWriter:
        return ArrowTransactionalWriter(self.options)


class ArrowRecordReader(ReplicationPlanner):
    """Plans exactly like the engine; reads the records themselves instead of describing ranges."""

    def read(self, partition: ShardPlan) -> Iterator[pa.RecordBatch]:
        ranges = json.loads(partition.ranges)["copy"]  # [source_topic, target_topic, partition, start, end]
        key = self.cfg.to_json()
        if key not in _consumers:
            _consumers[key] = kafka_clients.source_consumer(self.cfg)
        yield from read_ranges(_consumers[key], [(r[0], r[2], r[3], r[4]) for r in ranges])


def read_ranges(consumer: Consumer, ranges: list[tuple[str, int, int, int]]) -> Iterator[pa.RecordBatch]:
    """Records of [start, end) of each (topic, partition, start, end), one RecordBatch per consume()."""
    ends = {(t, p): end for t, p, start, end in ranges if start < end}
    tps = [TopicPartition(t, p, start if start >= 0 else _OFFSET_BEGINNING)
           for t, p, start, end in ranges if start < end]
    if not tps:
        return
    consumer.assign(tps)
    consumer.resume(tps)  # librdkafka keeps the pause flag of an earlier range across assign()
    live = set(ends)
    last_progress = time.monotonic()
    try:
        while live:
            msgs = consumer.consume(10_000, 0.2)
            if not msgs:
                if time.monotonic() - last_progress > _STALL_TIMEOUT_S:
                    raise RuntimeError(f"no progress for {_STALL_TIMEOUT_S:.0f}s reading {sorted(live)}")
                continue
            last_progress = time.monotonic()
            kept = []
            for m in msgs:
                tp = (m.topic(), m.partition())
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(err)
                    if tp in live and m.offset() >= ends[tp]:
                        _done(consumer, live, tp)
                    continue
                if tp not in live:
                    continue
                offset = m.offset()
                if offset >= ends[tp]:
                    _done(consumer, live, tp)
                    continue
                kept.append(m)
                if offset + 1 >= ends[tp]:
                    _done(consumer, live, tp)
            if kept:
                yield to_record_batch(kept)
    finally:
        consumer.unassign()


def _done(consumer: Consumer, live: set, tp: tuple[str, int]) -> None:
    live.discard(tp)
    consumer.pause([TopicPartition(*tp)])


def to_record_batch(msgs: list) -> pa.RecordBatch:
    headers = [m.headers() for m in msgs]
    if any(h is not None for h in headers):
        header_column = pa.array([[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
                                 type=_HEADERS_TYPE)
    else:
        header_column = pa.nulls(len(msgs), type=_HEADERS_TYPE)
    return pa.RecordBatch.from_arrays([
        pa.array([m.topic() for m in msgs], type=pa.string()),
        pa.array([m.partition() for m in msgs], type=pa.int32()),
        pa.array([m.offset() for m in msgs], type=pa.int64()),
        pa.array([m.key() for m in msgs], type=pa.binary()),
        pa.array([m.value() for m in msgs], type=pa.binary()),
        header_column,
        pa.array([m.timestamp()[1] for m in msgs], type=pa.int64()),
    ], schema=ARROW_SCHEMA)


@dataclass
class PrototypeCommitMessage(WriterCommitMessage):
    shard: int
    records: int
    skipped: int
    transactions: int


class ArrowTransactionalWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.config_json = options["config"]
        self.source_cluster = options["source_cluster"]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PrototypeCommitMessage:
        cfg = ReplicatorConfig.from_json(self.config_json)
        shard_writer: _ShardTransactions | None = None
        try:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                if shard_writer is None:
                    # The task's records all belong to one reader partition, i.e. one shard.
                    topic, partition = batch.column(0)[0].as_py(), batch.column(1)[0].as_py()
                    shard_writer = _ShardTransactions(cfg, shard_of(topic, partition, cfg.shard_count),
                                                      self.source_cluster)
                shard_writer.write(batch)
            if shard_writer is None:
                return PrototypeCommitMessage(-1, 0, 0, 0)
            shard_writer.commit()
            return PrototypeCommitMessage(shard_writer.shard, shard_writer.records, shard_writer.skipped,
                                          shard_writer.transactions)
        except BaseException:
            if shard_writer is not None:
                shard_writer.abandon()
            raise

    def commit(self, messages: list, batchId: int) -> None:
        done = [m for m in messages if m is not None and m.shard >= 0]
        log.info("batch %d: %d records in %d transactions (%d already committed, dropped)", batchId,
                 sum(m.records for m in done), sum(m.transactions for m in done), sum(m.skipped for m in done))

    def abort(self, messages: list, batchId: int) -> None:
        log.warning("micro-batch %s aborted by Spark; the retry re-reads the fake group", batchId)


@dataclass
class _Partition:
    target_topic: str
    next: int  # next source offset to copy: the fake group's, then ours
    meta: CommitMetadata
    dirty: bool = False
    pair: tuple[int, int] | None = None  # last (source offset, target offset) acknowledged


class _ShardTransactions:
    """One task's writes for one shard: fence, resume from the target, produce in bounded txns."""

    def __init__(self, cfg: ReplicatorConfig, shard: int, source_cluster: str) -> None:
        self.cfg, self.shard, self.source_cluster = cfg, shard, source_cluster
        self.policy = policy_for(cfg)
        key = cfg.to_json()
        if key not in _group_readers:
            _group_readers[key] = kafka_clients.group_reader(cfg)
        self.group = _group_readers[key]
        self.producer = _init_producer(cfg, shard)  # fences every earlier holder of the shard's id
        self.partitions: dict[tuple[str, int], _Partition] = {}
        self.in_txn = False
        self.txn_started = 0.0
        self.txn_records = 0
        self.records = self.skipped = self.transactions = 0

    def _partition(self, topic: str, partition: int) -> _Partition:
        target = self.policy.target_topic(topic)
        # Read after init_transactions(): no transaction of an earlier holder is pending any more.
        c = read_committed(self.group, [(target, partition)]).get((target, partition))
        start = c.offset if c is not None and c.offset >= 0 else -1  # nothing committed: keep all
        meta = (c.metadata if c is not None and c.metadata else None) or CommitMetadata(
            self.source_cluster, topic, self.cfg.shard_count, self.shard)
        st = self.partitions[(topic, partition)] = _Partition(target, start, meta)
        return st

    def write(self, batch: pa.RecordBatch) -> None:
        topics, parts, offsets, keys, values, headers, stamps = (c.to_pylist() for c in batch.columns)
        # A delivery report only for each partition's last record of the batch, as the engine does.
        lasts = {tp: i for i, tp in enumerate(zip(topics, parts, strict=True))}
        report_at = {i: tp for tp, i in lasts.items()}
        produce, partitions = self.producer.produce, self.partitions
        if not self.in_txn:
            self._begin()
        for i, (topic, part, offset, key, value, hdrs, ts) in enumerate(
                zip(topics, parts, offsets, keys, values, headers, stamps, strict=True)):
            st = partitions.get((topic, part)) or self._partition(topic, part)
            if offset < st.next:
                self.skipped += 1  # committed by an earlier attempt or batch
                continue
            report = _PairReport(st, offset) if i in report_at else None
            hlist = [(h["key"], h["value"]) for h in hdrs] if hdrs else None
            while True:
                try:
                    produce(st.target_topic, value, key, part, headers=hlist,
                            timestamp=ts if ts > 0 else 0, on_delivery=report)
                    break
                except BufferError:
                    self.producer.poll(0.05)  # local queue full: let deliveries drain
            st.next = offset + 1
            st.dirty = True
            self.txn_records += 1
        self.producer.poll(0)
        if (self.txn_records >= self.cfg.max_records_per_transaction
                or time.monotonic() - self.txn_started >= self.cfg.max_transaction_seconds):
            self.commit()

    def _begin(self) -> None:
        self.producer.begin_transaction()
        self.in_txn, self.txn_started, self.txn_records = True, time.monotonic(), 0

    def commit(self) -> None:
        if not self.in_txn:
            return
        dirty = [s for s in self.partitions.values() if s.dirty]
        self.producer.flush(60)  # every record acknowledged before the offsets join the transaction
        if dirty:
            offsets = [TopicPartition(s.target_topic, tp[1], s.next, metadata=self._metadata(s, tp[0]))
                       for tp, s in self.partitions.items() if s.dirty]
            self.producer.send_offsets_to_transaction(offsets, self.group.consumer_group_metadata(), 60)
        self.producer.commit_transaction(60)
        self.records += self.txn_records
        self.transactions += 1
        for s in dirty:
            s.dirty = False
        self.in_txn = False

    def _metadata(self, s: _Partition, source_topic: str) -> str:
        so, to = s.pair if s.pair is not None else (s.meta.source_offset, s.meta.target_offset)
        s.meta = CommitMetadata(self.source_cluster, source_topic, self.cfg.shard_count, self.shard, so, to)
        return s.meta.encode()

    def abandon(self) -> None:
        """The task failed: best-effort abort; the retry's init_transactions() resolves it anyway."""
        if self.in_txn:
            try:
                self.producer.flush(30)
                self.producer.abort_transaction(30)
            except KafkaException as e:
                log.warning("abort failed (%s); the next init_transactions() resolves it", e.args[0].str())


class _PairReport:
    __slots__ = ("st", "source_offset")

    def __init__(self, st: _Partition, source_offset: int) -> None:
        self.st, self.source_offset = st, source_offset

    def __call__(self, err, msg) -> None:
        if err is None and (self.st.pair is None or self.source_offset > self.st.pair[0]):
            self.st.pair = (self.source_offset, msg.offset())


def _init_producer(cfg: ReplicatorConfig, shard: int) -> Producer:
    producer = kafka_clients.target_producer(cfg, transactional_ids.shard_id(cfg.name, shard))
    deadline = time.monotonic() + 120
    while True:
        try:
            producer.init_transactions(30)
            return producer
        except KafkaException as e:
            if not e.args[0].retriable() or time.monotonic() > deadline:
                raise


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--topics", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--alias", required=True, help="source alias of the prefix policy")
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--master", default="local[2,4]")
    args = p.parse_args(argv)
    cfg = config.load({"source_bootstrap_servers": args.source, "target_bootstrap_servers": args.target,
                       "topics": args.topics, "name": args.name, "shards": args.shards, "master": args.master,
                       "replication_policy": "prefix", "source_alias": args.alias}, environ={})
    logs.configure(cfg.log_format, cfg.log_level)
    job.preflight(cfg)  # the engine's own: target topics created, every shard id fenced
    source_cluster = kafka_clients.source_admin(cfg).list_topics(timeout=30).cluster_id or "unknown"
    scratch = Path(tempfile.mkdtemp(prefix=f"prototype-{cfg.name}-"))
    stop = threading.Event()

    def request_stop(*_args) -> None:
        stop.set()
        (scratch / "stop").touch()  # the planner plans nothing new; the running batch finishes

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    spark = spark_session.spark_session(cfg, scratch)
    failed = False
    try:
        spark.dataSource.register(ArrowPrototypeSource)
        options = {"config": cfg.to_json(), "source_cluster": source_cluster, "stop_flag": str(scratch / "stop")}
        query = (spark.readStream.format(FORMAT).options(**options).load()
                 .writeStream.format(FORMAT).options(**options)
                 .option("checkpointLocation", str(scratch / "checkpoint"))
                 .trigger(processingTime=f"{cfg.trigger_interval_ms} milliseconds")
                 .queryName(cfg.name).start())
        log.info("prototype started: name %s, %d shards, master %s", cfg.name, cfg.shard_count, cfg.spark_master)
        while query.isActive and not stop.is_set():
            query.awaitTermination(0.5)
        deadline = time.monotonic() + cfg.transaction_timeout_ms / 1000
        while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.1)
        query.stop()
        if query.exception() is not None:
            log.error("the streaming query failed: %s", query.exception())
            failed = True
    finally:
        spark.stop()
        job.fence_previous_layouts(cfg)  # whatever an interrupted task left open is aborted now
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    # Spark's Python workers unpickle the data source classes by module name: define them in
    # bench.design_arrow_prototype, not in __main__.
    from bench.design_arrow_prototype import main as _main

    raise SystemExit(_main())
