"""Stable assignment of source partitions to shards (the unit owning one transactional.id).

The mapping depends only on (topic, partition, shard count), so every planner, task attempt and
restart agrees on which transactional.id may write a partition: that is what makes fencing work.
"""

from __future__ import annotations

import zlib


def shard_of(topic: str, partition: int, shards: int) -> int:
    # Consecutive partitions of a topic go to consecutive shards: even spread for one big topic.
    return (zlib.crc32(topic.encode()) + partition) % shards
