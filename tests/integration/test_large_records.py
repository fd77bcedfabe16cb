"""Records larger than what the source consumer asks for per fetch (4 MiB per partition, 16 MiB per
response: sized for memory, see kafka_clients.source_consumer) are still copied whole and exactly
once: a broker answers a fetch with at least one whole batch however large (KIP-74)."""

from __future__ import annotations

import re
import time

from confluent_kafka import Producer

from replicator import config
from replicator.clients import kafka_clients
from replicator.engine.shard_copy import CopyRange, ShardCopier
from replicator.groups.index_topic import ensure_index_topic
from replicator.topics import sync as topic_sync
from tests.kafka_helpers import assert_identical, create_topic, end_offsets, fake_group_offsets

MiB = 1024 * 1024


def test_records_larger_than_the_fetch_sizes_are_copied_whole_and_once(sandbox, unique):
    src_bs, dst_bs = sandbox.source.bootstrap, sandbox.target.bootstrap
    topic, name = f"large-{unique}", f"large-{unique}"
    # The target topic is created by the job with the source's max.message.bytes (topic config sync).
    create_topic(src_bs, topic, 2, {"max.message.bytes": str(24 * MiB)})
    producer = Producer({"bootstrap.servers": src_bs, "transactional.id": f"large-{unique}",
                         "message.max.bytes": 32 * MiB, "linger.ms": 5})
    producer.init_transactions(60)
    producer.begin_transaction()
    now = int(time.time() * 1000)
    # Partition 0: small records around one over the per-partition fetch size and one over the whole
    # response's; partition 1: small records only, fetched in the same responses.
    sizes = {0: [10, 6 * MiB, 10, 18 * MiB, 10], 1: [10, 10, 10]}
    for p, values in sizes.items():
        for i, size in enumerate(values):
            producer.produce(topic, bytes([65 + i]) * size, f"k{p}-{i}".encode(), p,
                             headers=[("h", f"{p}-{i}".encode())], timestamp=now + i)
    producer.commit_transaction(60)

    cfg = config.load({"source_bootstrap_servers": src_bs, "target_bootstrap_servers": dst_bs, "name": name,
                       "topics": re.escape(topic), "shards": 1}, environ={})
    source, target = kafka_clients.source_admin(cfg), kafka_clients.target_admin(cfg)
    mappings = topic_sync.ensure_target_topics(cfg, source, target, topic_sync.discover(cfg, source))
    ensure_index_topic(cfg, target, [m.target for m in mappings])
    ends = end_offsets(src_bs, topic, 2)
    stats = ShardCopier(cfg, 0).copy([CopyRange(topic, topic, p, 0, ends[p]) for p in range(2)])

    assert stats.records == 8
    assert_identical(src_bs, dst_bs, topic, 2)
    assert fake_group_offsets(dst_bs, f"__replicator.{name}") == {(topic, p): ends[p] for p in range(2)}
