"""The fake consumer group on the target: the single source of truth for what has been copied.

Keyed by *target* topic-partition (the broker refuses offsets for partitions it does not have); the
value is the NEXT source offset to copy. The commit metadata (<= 4 KiB by broker default) records the
source cluster and topic, the target cluster (so a group written elsewhere is told apart, see
engine/cluster_identity.py), the shard layout and job name that wrote it (so a later start can fence
those transactional ids even after `--shards` or `--name` changed), and the last exact
source->target offset pair, which consumer-group failover needs, and when it was committed (an
idle partition's entry is re-committed before the group could expire it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from replicator.clients.client_errors import Outcome, classify
from replicator.clients.kafka_clients import kafka_error
from replicator.config import ReplicatorConfig

NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group holds nothing for the partition
_target_clusters: dict[str, str] = {}  # target bootstrap servers -> cluster id (CommitMetadata.target_cluster_of)


@dataclass(frozen=True)
class CommitMetadata:
    source_cluster: str
    source_topic: str
    shards: int
    shard: int
    source_offset: int = -1  # last copied source offset ...
    target_offset: int = -1  # ... and where it landed on the target
    job: str = ""  # the job name its transactional ids derive from; "" in version 1 entries
    committed_at: int = 0  # unix seconds of the commit that wrote it; 0 before version 3
    target_cluster: str = ""  # the cluster id of the target the entry was committed on; "" before version 4

    def encode(self) -> str:
        return json.dumps({"v": 4, "sc": self.source_cluster, "st": self.source_topic, "n": self.shards,
                           "s": self.shard, "so": self.source_offset, "to": self.target_offset, "j": self.job,
                           "t": self.committed_at, "tc": self.target_cluster}, separators=(",", ":"))

    @staticmethod
    def target_cluster_of(cfg: ReplicatorConfig, client: Consumer, topic: str) -> str:
        """The id of the target cluster `client` talks to, as the shard tasks record it: looked up
        once per process, from one topic's metadata (the whole cluster's is costly at 5,000 partitions)."""
        if cfg.target_bootstrap_servers not in _target_clusters:
            _target_clusters[cfg.target_bootstrap_servers] = client.list_topics(topic, timeout=30).cluster_id or ""
        return _target_clusters[cfg.target_bootstrap_servers]

    @classmethod
    def decode(cls, text: str | None) -> CommitMetadata | None:
        """None for an empty or unreadable entry; `is_damaged` tells the two apart."""
        if not text:
            return None
        try:
            d = json.loads(text)
            return cls(str(d["sc"]), str(d["st"]), int(d["n"]), int(d["s"]), int(d.get("so", -1)),
                       int(d.get("to", -1)), str(d.get("j", "")), int(d.get("t", 0)), str(d.get("tc", "")))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    @classmethod
    def is_damaged(cls, text: str | None) -> bool:
        """Something is stored, but not an entry this replicator can read (truncated, foreign, corrupt)."""
        return bool(text and text.rstrip("\x00")) and cls.decode(text.rstrip("\x00")) is None


@dataclass(frozen=True)
class Committed:
    offset: int  # next source offset to copy; NO_OFFSET when nothing was ever committed
    metadata: CommitMetadata | None
    damaged: bool = False  # metadata present but unreadable: its layout is unknown


def read_committed(reader: Consumer, target_tps: list[tuple[str, int]], timeout: float = 60.0
                   ) -> dict[tuple[str, int], Committed]:
    """Stable committed offsets via a member-less consumer (waits out pending transactional commits)."""
    if not target_tps:
        return {}
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = reader.committed([TopicPartition(t, p) for t, p in target_tps],
                                      timeout=max(1.0, deadline - time.monotonic()))
            break
        except KafkaException as e:
            err = kafka_error(e)
            # A freshly started broker answers group requests with retriable errors until its
            # coordinator is loaded.
            if err is None or classify(err) is not Outcome.RETRY or time.monotonic() > deadline:
                raise
    out = {}
    for tp in result:
        if tp.error is not None:
            raise KafkaException(tp.error)
        out[(tp.topic, tp.partition)] = Committed(tp.offset, CommitMetadata.decode(tp.metadata),
                                                  CommitMetadata.is_damaged(tp.metadata))
    return out


def read_group(reader: Consumer, topics: Iterable[str] | None = None, timeout: float = 60.0
               ) -> dict[tuple[str, int], Committed]:
    """Every stable offset the fake group holds (for `topics`, or all topics of the target).

    Deliberately not AdminClient.list_consumer_group_offsets: in librdkafka 2.16 a coordinator error
    in its response (routine on a starting broker) dereferences the admin client's missing consumer
    group handle and kills the process (SIGSEGV in rd_kafka_cgrp_op). A member-less Consumer of the
    group asks the same question through a real group handle.
    """
    wanted = set(topics) if topics is not None else None
    metadata = reader.list_topics(timeout=30)
    tps = [(name, p) for name, t in metadata.topics.items() if t.error is None and not name.startswith("__")
           and (wanted is None or name in wanted) for p in t.partitions]
    return {tp: c for tp, c in read_committed(reader, tps, timeout).items() if c.offset >= 0}
