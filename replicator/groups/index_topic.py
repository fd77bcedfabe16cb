"""The translation index topic on the target: created by the job before any shard writes to it, and
kept at least as long as the data it translates (retention never below the replicated topics')."""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from replicator.access import permissions
from replicator.clients.client_errors import is_authorization_error
from replicator.clients.topic_creation import create_topic_if_missing
from replicator.config import ReplicatorConfig
from replicator.groups.index import INDEX_PARTITIONS
from replicator.names import index_topic
from replicator.topics.sync import VISIBLE_TIMEOUT_S

log = logging.getLogger(__name__)
KAFKA_DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000


def wanted_retention_ms(topic_configs: dict[str, dict[str, str]]) -> int:
    """The longest retention of the replicated target topics (-1: forever). A compacted topic keeps
    records for ever, so its old offsets stay translatable only if the index does too."""
    best = KAFKA_DEFAULT_RETENTION_MS
    for configs in topic_configs.values():
        policies = {x.strip() for x in configs.get("cleanup.policy", "delete").split(",")}
        if "delete" not in policies:  # compacted only: records live until a newer one of their key
            return -1
        retention = int(configs.get("retention.ms", KAFKA_DEFAULT_RETENTION_MS))
        if retention < 0:
            return -1
        best = max(best, retention)
    return best


def _longer(a: int, b: int) -> bool:
    """True when retention `a` keeps records longer than `b`."""
    return b >= 0 and (a < 0 or a > b)


def ensure_index_topic(cfg: ReplicatorConfig, target: AdminClient, target_topics: list[str]) -> str | None:
    """Creates the index topic if missing and raises its retention to the replicated topics' longest.
    Returns its name, or None when the index is off (or meaningless: at-least-once has no transaction
    to write it in)."""
    if not (cfg.translation_index and cfg.exactly_once):
        return None
    name = index_topic(cfg.name)
    try:
        described = _describe(target, target_topics)
    except KafkaException as e:
        if not is_authorization_error(e.args[0]):
            raise
        # DescribeConfigs on the target topics is an optional ACL (config sync): size for the default.
        log.warning("translation index retention: %s; assuming Kafka's default retention for them",
                    permissions.lacks(cfg, "target", ["DescribeConfigs"],
                                      "Topic " + ", ".join(f"'{t}'" for t in target_topics)),
                    extra={"event": "index_retention_unknown"})
        described = {}
    retention = wanted_retention_ms(described)
    if name not in target.list_topics(timeout=30).topics:
        configs = {"cleanup.policy": "delete", "retention.ms": str(retention), "retention.bytes": "-1",
                   "message.timestamp.type": "CreateTime"}
        rf = cfg.replication_factor
        try:
            if create_topic_if_missing(target, NewTopic(name, INDEX_PARTITIONS, rf, config=configs)):
                log.info("created the translation index topic %s (retention.ms=%d)", name, retention,
                         extra={"event": "index_topic_created", "topic": name})
        except KafkaException as e:
            if is_authorization_error(e.args[0]):
                raise permissions.creation_denied(cfg, name, grow=False) from None
            raise RuntimeError(f"creating the translation index topic {name!r} failed: {e.args[0].str()}") from None
        _await(target, name)
        return name
    operation = "DescribeConfigs/AlterConfigs"  # the set grants AlterConfigs, which implies DescribeConfigs
    try:
        have = int(_describe(target, [name])[name].get("retention.ms", KAFKA_DEFAULT_RETENTION_MS))
        if _longer(retention, have):
            operation = "AlterConfigs"
            resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
                ConfigEntry("retention.ms", str(retention), incremental_operation=AlterConfigOpType.SET)])
            target.incremental_alter_configs([resource], request_timeout=30)[resource].result()
            log.info("raised the translation index retention.ms from %d to %d", have, retention,
                     extra={"event": "index_retention_raised", "topic": name})
    except KafkaException as e:
        if not is_authorization_error(e.args[0]):
            raise
        log.warning("translation index retention sizing skipped: %s; keep its retention.ms at least the "
                    "replicated topics' (%d)", permissions.lacks(cfg, "target", [operation], f"Topic '{name}'"),
                    retention, extra={"event": "index_retention_skipped", "topic": name})
    return name


def _describe(admin: AdminClient, topics: list[str]) -> dict[str, dict[str, str]]:
    if not topics:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    futures = admin.describe_configs(resources, request_timeout=30)
    return {r.name: {k: e.value for k, e in f.result().items() if e.value is not None} for r, f in futures.items()}


def _await(target: AdminClient, name: str, timeout: float = VISIBLE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while True:
        md = target.list_topics(name, timeout=30).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) >= 1:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"translation index topic {name!r} not visible {timeout:.0f}s after creation")
        time.sleep(0.2)
