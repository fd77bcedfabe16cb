"""The clients a shard copier reads with, kept per Python process.

Callers of `ShardCopier.copy()` (tests, the bench's bare loop) build many copiers in one process and
keep warm connections. A Spark task has a process of its own (spark_session), so there they live
for one task. Producers are NOT cached: each copier's `init_transactions()` fences the id's earlier
holder anyway; a fresh producer costs ~18 ms.
"""

from __future__ import annotations

import logging
from typing import Protocol

from confluent_kafka import Consumer

from replicator.clients import kafka_clients, source_link
from replicator.config import ReplicatorConfig
from replicator.groups import index

log = logging.getLogger("replicator.shard_copy")

_consumers: dict[str, Consumer] = {}
_group_readers: dict[str, Consumer] = {}
_facts: dict[str, str] = {}  # what the clusters said once and does not change: ids, partition counts
_across_a_link: dict[str, bool] = {}  # the source's round trip, judged once per process


class ShardClients(Protocol):
    """What a copier reads with; `CachedClients` in a job, stand-ins in unit tests."""

    def source_consumer(self) -> Consumer: ...
    def new_source_consumer(self) -> Consumer: ...
    def sized_for_source_link(self, topic: str) -> Consumer | None: ...
    def group_reader(self) -> Consumer: ...
    def new_group_reader(self) -> Consumer: ...
    def source_cluster(self) -> str: ...
    def target_cluster(self) -> str: ...
    def index_partitions(self) -> int: ...


class CachedClients:
    """A copier's source consumer, target group reader and cluster facts, shared with every copier of
    the process that has the same configuration; a replaced client is the next copier's too."""

    def __init__(self, cfg: ReplicatorConfig) -> None:
        self.cfg = cfg
        self._key = cfg.to_json()

    def source_consumer(self) -> Consumer:
        if self._key not in _consumers:
            self.new_source_consumer()
        return _consumers[self._key]

    def new_source_consumer(self) -> Consumer:
        """Replaces the cached consumer; the caller closes the one it had."""
        _consumers[self._key] = kafka_clients.source_consumer(self.cfg, _across_a_link.get(self._key, False))
        return _consumers[self._key]

    def sized_for_source_link(self, topic: str) -> Consumer | None:
        """Once per process: times the source's round trip for `topic` with the cached consumer and,
        where the source is a link away, replaces that consumer by one with larger fetches and
        returns it (the caller closes the one it had). None: the consumer stays (a source that does
        not answer is judged at the next attempt)."""
        if self._key in _across_a_link:
            return None
        seconds = source_link.round_trip_s(self.source_consumer(), topic)
        if seconds is None:
            return None
        _across_a_link[self._key] = far = source_link.crosses_a_link(seconds)
        log.info("the source answered a metadata request in %.1f ms: %s", seconds * 1000,
                 "a link away, so the copy fetches twice as much per round trip" if far
                 else "near, so the copy fetches with the default sizes",
                 extra={"event": "source_link", "crosses_a_link": far, "round_trip_ms": round(seconds * 1000, 1)})
        return self.new_source_consumer() if far else None

    def group_reader(self) -> Consumer:
        if self._key not in _group_readers:
            _group_readers[self._key] = kafka_clients.group_reader(self.cfg)
        return _group_readers[self._key]

    def new_group_reader(self) -> Consumer:
        """Replaces the cached reader (a new one looks the group's coordinator up afresh); the caller
        closes the one it had."""
        _group_readers[self._key] = kafka_clients.group_reader(self.cfg)
        return _group_readers[self._key]

    def source_cluster(self) -> str:
        return self._fact("source", lambda: self.source_consumer().list_topics(timeout=30).cluster_id or "unknown")

    def target_cluster(self) -> str:
        return self._fact("target", lambda: self.group_reader().list_topics(timeout=30).cluster_id or "unknown")

    def index_partitions(self) -> int:
        """The partition count of the job's translation index topic on the target."""
        return int(self._fact("index", self._count_index_partitions))

    def _count_index_partitions(self) -> str:
        topic = index.index_topic(self.cfg.name)
        md = self.group_reader().list_topics(topic, timeout=30).topics.get(topic)
        if md is None or md.error is not None or not md.partitions:
            raise RuntimeError(f"the translation index topic {topic!r} is missing on the target (the job "
                               f"creates it at start; translation_index=false turns the index off)")
        return str(len(md.partitions))

    def _fact(self, name: str, ask) -> str:
        key = f"{self._key}|{name}"
        if key not in _facts:
            _facts[key] = ask()
        return _facts[key]
