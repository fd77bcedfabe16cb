"""The engine's exactly-once copy loop without Spark: one Python process, one shard owning every
partition, driven straight through `ShardCopier.copy` up to the source's current end.

    python -m bench.bare_loop --source H:P --target H:P --topic T --alias A

What it leaves out compared with `replicator run` is exactly what Spark adds: planning, task
scheduling, the JVM and the Python worker round trips.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import time

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec

from replicator import config
from replicator.clients import kafka_clients
from replicator.engine.shard_copy import CopyRange, ShardCopier
from replicator.groups import index
from replicator.groups.index_topic import ensure_index_topic
from replicator.topics import sync as topic_sync


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--source", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--alias", required=True)
    p.add_argument("--guarantee", default="exactly-once")
    p.add_argument("--translation-index", choices=("on", "off"), default="on")
    p.add_argument("--max-records-per-transaction", type=int, help="default: the replicator's")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    cfg = config.load({"source_bootstrap_servers": args.source, "target_bootstrap_servers": args.target,
                       "topics": re.escape(args.topic), "name": f"bench-{args.alias}", "shards": 1,
                       "replication_policy": "prefix", "source_alias": args.alias,
                       "guarantee": args.guarantee, "translation_index": args.translation_index,
                       **({"max_records_per_transaction": args.max_records_per_transaction}
                          if args.max_records_per_transaction else {})}, environ={})
    source, target = kafka_clients.source_admin(cfg), kafka_clients.target_admin(cfg)
    mappings = topic_sync.ensure_target_topics(cfg, source, target, topic_sync.discover(cfg, source))
    ensure_index_topic(cfg, target, [m.target for m in mappings])
    ranges = []
    for m in mappings:
        req = {TopicPartition(m.source, p): OffsetSpec.latest() for p in range(m.partitions)}
        ends = source.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED)
        ranges += [CopyRange(m.source, m.target, tp.partition, 0, f.result().offset) for tp, f in ends.items()]
    copier = _Measured(cfg, 0)
    wall, cpu = time.monotonic(), time.thread_time()
    stats = copier.copy(ranges)
    wall, cpu = time.monotonic() - wall, time.thread_time() - cpu
    logging.info("copied %d records in %d transactions", stats.records, stats.transactions)
    # The index's cost on the copy thread, for BENCHMARKS.md's translation index section.
    print("bare-loop-cost " + json.dumps({
        "index": args.translation_index, "records": stats.records, "bytes": stats.bytes,
        "transactions": stats.transactions, "wall_s": round(wall, 3), "loop_cpu_s": round(cpu, 3),
        "index_cpu_s": round(copier.index_cpu, 4), "index_entries": copier.index_entries,
        "index_bytes": copier.index_bytes, "commit_wall_s": round(copier.commit_wall, 4)}), flush=True)


class _Measured(ShardCopier):
    """Times `_produce_index` on the copy thread (time.thread_time: this thread's CPU only, not
    librdkafka's threads), counts the entries and their value bytes, and times the end of each
    transaction (send_offsets_to_transaction + commit_transaction, wall clock): the index entries
    are produced after the data's flush, so their delivery is what commit_transaction may wait on."""

    index_cpu = 0.0
    index_entries = index_bytes = 0
    commit_wall = 0.0

    def _new_producer(self):
        return _TimedEnd(super()._new_producer(), self)

    def _produce_index(self, producer, advanced) -> None:
        t0 = time.thread_time()
        super()._produce_index(producer, advanced)
        self.index_cpu += time.thread_time() - t0
        for s in advanced:
            e = index.entry_from_copy(s.txn_begin, s.next, s.first_pair, s.pair, s.records, s.gaps)
            if e is not None:
                self.index_entries += 1
                self.index_bytes += len(e.encode())



class _TimedEnd:
    """The producer, with its transaction-ending calls timed; every other call goes straight
    through (`produce` is looked up once per batch, so records pay nothing)."""

    def __init__(self, producer, copier: _Measured) -> None:
        self._producer, self._copier = producer, copier

    def __getattr__(self, name: str):
        return getattr(self._producer, name)

    def _timed(self, method: str, *args):
        t0 = time.monotonic()
        try:
            return getattr(self._producer, method)(*args)
        finally:
            self._copier.commit_wall += time.monotonic() - t0

    def send_offsets_to_transaction(self, *args):
        return self._timed("send_offsets_to_transaction", *args)

    def commit_transaction(self, *args):
        return self._timed("commit_transaction", *args)


if __name__ == "__main__":
    main()
