"""Target topics exist, with enough partitions and the source's configs, before any record is written."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions, NewTopic

from replicator.config import ReplicatorConfig
from replicator.replication_policy import policy_for
from replicator.topic_filter import TopicFilter

log = logging.getLogger(__name__)

# Per-cluster operational settings that must not travel with a topic (as MirrorMaker 2 excludes).
CONFIG_EXCLUDES = (
    "min.insync.replicas", "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas", "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.after.max.ms", "message.downconversion.enable",
    "unclean.leader.election.enable", "remote.storage.enable", "local.retention.ms",
    "local.retention.bytes", "confluent.", "message.timestamp.type",
)


@dataclass(frozen=True)
class TopicMapping:
    source: str
    target: str
    partitions: int


def discover(cfg: ReplicatorConfig, source: AdminClient, timeout: float = 30.0) -> dict[str, int]:
    """Source topics selected by the config, with their partition counts."""
    topic_filter = TopicFilter(cfg.topics, cfg.topics_exclude)
    policy = policy_for(cfg)
    metadata = source.list_topics(timeout=timeout)
    return {name: len(t.partitions) for name, t in metadata.topics.items()
            if t.error is None and topic_filter.accepts(name) and not policy.is_remote(name)}


def _copyable_configs(source: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = source.describe_configs([resource])[resource].result(timeout=30)
    out = {}
    for name, entry in entries.items():
        if entry.is_sensitive or any(name.startswith(x) for x in CONFIG_EXCLUDES):
            continue
        # cleanup.policy is always copied: a compacted topic must never start life as `delete`.
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value or name in ("cleanup.policy",
                                                                                "max.message.bytes"):
            out[name] = entry.value
    return out


def ensure_target_topics(cfg: ReplicatorConfig, source: AdminClient, target: AdminClient,
                         topics: dict[str, int]) -> list[TopicMapping]:
    """Creates missing target topics and grows short ones; returns the source->target mapping."""
    policy = policy_for(cfg)
    mappings = [TopicMapping(s, policy.target_topic(s), n) for s, n in sorted(topics.items())]
    existing = target.list_topics(timeout=30).topics
    to_create, to_grow = [], {}
    for m in mappings:
        have = existing.get(m.target)
        if have is None or have.error is not None:
            configs = _copyable_configs(source, m.source)
            configs["message.timestamp.type"] = "CreateTime"
            to_create.append(NewTopic(m.target, m.partitions, cfg.replication_factor, config=configs))
        elif len(have.partitions) < m.partitions:
            to_grow[m.target] = NewPartitions(m.target, m.partitions)
    for topic, fut in (target.create_topics(to_create).items() if to_create else []):
        try:
            fut.result(timeout=60)
            log.info("created target topic", extra={"topic": topic})
        except KafkaException as e:
            if e.args[0].code() != 36:  # TOPIC_ALREADY_EXISTS: another planner got there first
                raise RuntimeError(f"creating target topic {topic!r} failed: {e.args[0].str()}") from None
    for topic, fut in (target.create_partitions(list(to_grow.values())).items() if to_grow else []):
        try:
            fut.result(timeout=60)
            log.info("grew target topic", extra={"topic": topic, "partitions": to_grow[topic].new_total_count})
        except KafkaException as e:
            raise RuntimeError(f"target topic {topic!r} has fewer partitions than its source and could "
                               f"not be grown: {e.args[0].str()}") from None
    return mappings
