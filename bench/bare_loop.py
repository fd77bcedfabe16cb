"""The engine's exactly-once copy loop without Spark: one Python process, one shard owning every
partition, driven straight through `ShardCopier.copy` up to the source's current end.

    python -m bench.bare_loop --source H:P --target H:P --topic T --alias A

What it leaves out compared with `replicator run` is exactly what Spark adds: planning, task
scheduling, the JVM and the Python worker round trips.
"""

from __future__ import annotations

import argparse
import logging
import re

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec

from replicator import config, kafka_clients, topic_sync
from replicator.groups.index_topic import ensure_index_topic
from replicator.shard_copy import CopyRange, ShardCopier


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--source", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--alias", required=True)
    p.add_argument("--guarantee", default="exactly-once")
    p.add_argument("--translation-index", choices=("on", "off"), default="on")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    cfg = config.load({"source_bootstrap_servers": args.source, "target_bootstrap_servers": args.target,
                       "topics": re.escape(args.topic), "name": f"bench-{args.alias}", "shards": 1,
                       "replication_policy": "prefix", "source_alias": args.alias,
                       "guarantee": args.guarantee, "translation_index": args.translation_index}, environ={})
    source, target = kafka_clients.source_admin(cfg), kafka_clients.target_admin(cfg)
    mappings = topic_sync.ensure_target_topics(cfg, source, target, topic_sync.discover(cfg, source))
    ensure_index_topic(cfg, target, [m.target for m in mappings])
    ranges = []
    for m in mappings:
        req = {TopicPartition(m.source, p): OffsetSpec.latest() for p in range(m.partitions)}
        ends = source.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED)
        ranges += [CopyRange(m.source, m.target, tp.partition, 0, f.result().offset) for tp, f in ends.items()]
    stats = ShardCopier(cfg, 0).copy(ranges)
    logging.info("copied %d records in %d transactions", stats.records, stats.transactions)


if __name__ == "__main__":
    main()
