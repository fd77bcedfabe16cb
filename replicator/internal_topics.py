"""How the job's own small topics on the target are created: the promotion marker and the group
checkpoints (MirrorMaker 2's as well). Below both the pre-flight checks (`access.permissions`, which
create them to learn whether they may be written) and the features that use them (`groups`).

The translation index is created by `groups.index_topic`: its retention follows the replicated
topics'.
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from replicator import names
from replicator.clients.topic_creation import create_topic_if_missing
from replicator.config import ReplicatorConfig

_VISIBLE_S = 60.0


def create_marker_topic(cfg: ReplicatorConfig, target: AdminClient) -> None:
    """Creates the (empty) promotion marker topic unless it exists (promoted once before): one
    partition, kept forever. KafkaException on any other refusal."""
    create_topic_if_missing(target, NewTopic(names.marker_topic(cfg.name), 1, cfg.replication_factor,
                                             config={"retention.ms": "-1"}))


def checkpoint_topics(cfg: ReplicatorConfig) -> list[str]:
    wanted = [names.checkpoints_topic(cfg.name)]
    if cfg.mm2_compatible_checkpoints:
        wanted.append(names.mm2_checkpoints_topic(cfg.source_alias))
    return wanted


def ensure_checkpoint_topics(cfg: ReplicatorConfig, target: AdminClient) -> None:
    """Creates the missing checkpoints topics (compacted, one partition) and returns once the
    target's metadata shows them; RuntimeError when one cannot be created."""
    wanted = checkpoint_topics(cfg)
    existing = target.list_topics(timeout=30).topics
    missing = [t for t in wanted if t not in existing]
    if not missing:
        return
    for topic in missing:
        try:
            create_topic_if_missing(target, NewTopic(topic, 1, cfg.replication_factor,
                                                     config={"cleanup.policy": "compact"}))
        except KafkaException as e:
            raise RuntimeError(f"creating the checkpoints topic {topic!r} failed: {e}") from None
    deadline = time.monotonic() + _VISIBLE_S
    while any(t not in target.list_topics(timeout=30).topics for t in wanted):
        if time.monotonic() > deadline:
            raise RuntimeError(f"checkpoints topics {wanted} not visible {_VISIBLE_S:.0f}s after creation")
        time.sleep(0.2)
