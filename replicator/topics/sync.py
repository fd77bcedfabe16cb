"""Target topics: which source topics are selected, and their target topics created (with the
source's partition count and configs) or grown before any record or offset is written for them;
config drift re-synced incrementally.

What a target topic carries (`desired_configs`):
- the source topic's own overrides (`DYNAMIC_TOPIC_CONFIG` entries only: broker defaults stay the
  target's), minus per-cluster operational settings (`CONFIG_EXCLUDES`, as MirrorMaker 2 excludes)
  and the user's `config_sync_exclude`;
- `cleanup.policy` always, default or not: a compacted topic must never start life as `delete`;
- `message.timestamp.type=CreateTime`, so copied records keep their source timestamps;
- `max.message.bytes` raised to the source's when the target's would be smaller (never lowered:
  the replicator's producer batches records and needs at least the target's default).
Drift sync only ever SETs keys the replicator manages, so settings made on the target alone survive.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from replicator.access import permissions
from replicator.clients.client_errors import is_authorization_error
from replicator.config import ReplicatorConfig
from replicator.replication_policy import policy_for
from replicator.topics.filter import TopicFilter

log = logging.getLogger("replicator.topic_sync")  # the log's public name, kept when the module moved
# How long a created topic may take to become visible. A broker applies creations in order and
# shows one only after the logs of those before it exist: at a first start with 5,000 partitions,
# the translation index topic (created last) came 61 s after creation on a slow disk (BENCHMARKS.md).
VISIBLE_TIMEOUT_S = 300.0

# Per-cluster operational settings that must not travel with a topic (full-match regexes).
CONFIG_EXCLUDES = (
    r"min\.insync\.replicas", r"(leader|follower)\.replication\.throttled\.replicas",
    r"message\.timestamp\.(difference|before|after)\.max\.ms", r"message\.downconversion\.enable",
    r"unclean\.leader\.election\.enable", r"remote\.storage\.enable", r"local\.retention\.(ms|bytes)",
    r"confluent\..*",
)
# Decided by the replicator itself, whatever the excludes say.
MANAGED = ("cleanup.policy", "message.timestamp.type", "max.message.bytes")
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
# Failures are plain RuntimeErrors: when one ends the streaming query, the driver reports it by its
# "RuntimeError: " line, so the user reads e.g. why a target topic could not be grown.


@dataclass(frozen=True)
class TopicMapping:
    source: str
    target: str
    partitions: int


@dataclass
class TopicPlan:
    """What the replicator would do for one selected topic (the dry run shows it)."""

    mapping: TopicMapping
    target_partitions: int | None  # None: the target topic does not exist yet
    configs: dict[str, str]  # what the target topic carries (is created with / is synced to)
    changes: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # key -> (target now, wanted)

    @property
    def action(self) -> str:
        if self.target_partitions is None:
            return "create"
        if self.target_partitions < self.mapping.partitions:
            return "grow"
        return "sync" if self.changes else "in sync"


# -- selection --------------------------------------------------------------------------------
def selection(cfg: ReplicatorConfig, source: AdminClient, timeout: float = 30.0
              ) -> tuple[dict[str, int], dict[str, str]]:
    """Selected source topics with their partition counts, and every other topic with the reason."""
    topic_filter = TopicFilter(cfg.topics, cfg.topics_exclude)
    policy = policy_for(cfg)
    selected, skipped = {}, {}
    for name, t in source.list_topics(timeout=timeout).topics.items():
        if t.error is not None:
            skipped[name] = f"unavailable ({t.error.str()})"
        elif reason := topic_filter.reason(name):
            skipped[name] = reason
        elif policy.is_remote(name):
            skipped[name] = f"replica of a topic of the target (alias '{cfg.target_alias}'): not sent back"
        else:
            selected[name] = len(t.partitions)
    return selected, skipped


def discover(cfg: ReplicatorConfig, source: AdminClient, timeout: float = 30.0) -> dict[str, int]:
    """Source topics selected by the config, with their partition counts."""
    return selection(cfg, source, timeout)[0]


def deleted(before: list[TopicMapping], selected: Mapping[str, int], skipped: Mapping[str, str]) -> list[str]:
    """Source topics replicated before that the source no longer lists at all (not merely unavailable)."""
    return sorted(m.source for m in before if m.source not in selected and m.source not in skipped)


def mappings_for(cfg: ReplicatorConfig, topics: Mapping[str, int]) -> list[TopicMapping]:
    policy = policy_for(cfg)
    return [TopicMapping(s, policy.target_topic(s), n) for s, n in sorted(topics.items())]


# -- configs ----------------------------------------------------------------------------------
def desired_configs(source_entries: Mapping[str, ConfigEntry], target_max_message_bytes: int,
                    exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """The configs a target topic should carry, from its source topic's described configs."""
    patterns = [re.compile(p) for p in (*CONFIG_EXCLUDES, *exclude)]
    out = {}
    for name, entry in source_entries.items():
        if (entry.is_sensitive or name in MANAGED or entry.value is None
                or entry.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
                or any(p.fullmatch(name) for p in patterns)):
            continue
        out[name] = entry.value
    if (policy := source_entries.get("cleanup.policy")) is not None and policy.value:
        out["cleanup.policy"] = policy.value
    out["message.timestamp.type"] = "CreateTime"
    source_max = source_entries.get("max.message.bytes")
    if source_max is not None and source_max.value and int(source_max.value) > target_max_message_bytes:
        out["max.message.bytes"] = source_max.value
    return out


def config_changes(desired: Mapping[str, str], target_entries: Mapping[str, ConfigEntry]
                   ) -> dict[str, tuple[str | None, str]]:
    """Keys whose target value differs from the wanted one: (target now, wanted). Keys the target
    has and `desired` lacks are never reported, so target-only settings are left alone."""
    out = {}
    for name, want in desired.items():
        entry = target_entries.get(name)
        have = entry.value if entry is not None else None
        if _normalise(name, have) != _normalise(name, want):
            out[name] = (have, want)
    return out


def _normalise(name: str, value: str | None) -> object:
    if value is None:
        return None
    if name == "cleanup.policy":  # a list: "compact,delete" == "delete,compact"
        return frozenset(v.strip() for v in value.split(","))
    return value.strip()


def _describe(admin: AdminClient, topics: list[str]) -> dict[str, dict[str, ConfigEntry]]:
    if not topics:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    futures = admin.describe_configs(resources, request_timeout=30)
    return {r.name: f.result() for r, f in futures.items()}


def _describe_source(cfg: ReplicatorConfig, source: AdminClient, topics: list[str]
                     ) -> dict[str, dict[str, ConfigEntry]]:
    """The source topics' configs; without DescribeConfigs there (an optional ACL) target topics are
    made with only the configs the replicator manages, and that is said."""
    try:
        return _describe(source, topics)
    except KafkaException as e:
        if not _denied(e):
            raise
        log.warning("creating target topics without the source's topic configs: %s may not DescribeConfigs "
                    "source Topic %s", permissions.who(cfg, "source"), ", ".join(f"'{t}'" for t in topics),
                    extra={"event": "config_sync_skipped"})
        return {t: {} for t in topics}


def _target_default_max_message_bytes(target: AdminClient) -> int:
    """The target brokers' `message.max.bytes` (what a new topic gets without an override)."""
    try:
        brokers = target.list_topics(timeout=30).brokers
        resource = ConfigResource(ConfigResource.Type.BROKER, str(min(brokers)))
        entries = target.describe_configs([resource], request_timeout=30)[resource].result()
        return int(entries["message.max.bytes"].value)
    except (KafkaException, KeyError, ValueError) as e:  # no DescribeConfigs on the cluster: Kafka's default
        log.info("target broker message.max.bytes unknown (%s); assuming Kafka's default", e)
        return KAFKA_DEFAULT_MAX_MESSAGE_BYTES


def _target_max_message_bytes(entries: Mapping[str, ConfigEntry]) -> int:
    entry = entries.get("max.message.bytes")
    return int(entry.value) if entry is not None and entry.value else KAFKA_DEFAULT_MAX_MESSAGE_BYTES


# -- planning and applying ---------------------------------------------------------------------
def plan(cfg: ReplicatorConfig, source: AdminClient, target: AdminClient, topics: Mapping[str, int],
         with_configs: bool = True) -> list[TopicPlan]:
    """What `ensure_target_topics` and `sync_configs` would do, without changing anything. Without
    `with_configs`, existing target topics are not described (their `configs` stay empty)."""
    mappings = mappings_for(cfg, topics)
    existing = target.list_topics(timeout=30).topics
    have = {m.target: len(t.partitions) for m in mappings
            if (t := existing.get(m.target)) is not None and t.error is None}
    missing = [m for m in mappings if m.target not in have]
    described = [m for m in mappings if with_configs or m.target not in have]
    source_cfgs = _describe_source(cfg, source, [m.source for m in described])
    target_cfgs = _describe(target, [m.target for m in described if m.target in have]) if with_configs else {}
    default_max = _target_default_max_message_bytes(target) if missing else KAFKA_DEFAULT_MAX_MESSAGE_BYTES
    plans = []
    for m in mappings:
        if m.target not in have:
            wanted = desired_configs(source_cfgs[m.source], default_max, cfg.config_sync_exclude)
            plans.append(TopicPlan(m, None, wanted))
        elif with_configs:
            current = target_cfgs[m.target]
            wanted = desired_configs(source_cfgs[m.source], _target_max_message_bytes(current),
                                     cfg.config_sync_exclude)
            plans.append(TopicPlan(m, have[m.target], wanted, config_changes(wanted, current)))
        else:
            plans.append(TopicPlan(m, have[m.target], {}))
    return plans


def ensure_target_topics(cfg: ReplicatorConfig, source: AdminClient, target: AdminClient,
                         topics: Mapping[str, int]) -> list[TopicMapping]:
    """Creates missing target topics and grows short ones, and returns only once the target's
    metadata shows them: the fake group refuses offsets for partitions the target does not have."""
    plans = plan(cfg, source, target, topics, with_configs=False)
    to_create = [NewTopic(p.mapping.target, p.mapping.partitions, cfg.replication_factor, config=p.configs)
                 for p in plans if p.action == "create"]
    to_grow = [NewPartitions(p.mapping.target, p.mapping.partitions) for p in plans if p.action == "grow"]
    created = target.create_topics(to_create, request_timeout=60) if to_create else {}
    for topic, err in _outcomes(cfg, created, grow=False):
        if err is None:
            log.info("created target topic %s", topic, extra={"event": "topic_created", "topic": topic})
        elif err.code() != KafkaError.TOPIC_ALREADY_EXISTS:  # else another planner got there first
            raise RuntimeError(f"creating target topic {topic!r} failed: {err.str()}")
    grown = target.create_partitions(to_grow, request_timeout=60) if to_grow else {}
    for topic, err in _outcomes(cfg, grown, grow=True):
        if err is None:
            log.info("grew target topic %s", topic, extra={"event": "topic_grown", "topic": topic})
            continue
        # INVALID_PARTITIONS: the driver's and the planner's refreshes both grew it; fine if it is.
        wanted = next(p.mapping.partitions for p in plans if p.mapping.target == topic)
        if err.code() != KafkaError.INVALID_PARTITIONS or _partitions(target, topic) < wanted:
            raise RuntimeError(f"target topic {topic!r} has fewer partitions than its source and could "
                               f"not be grown: {err.str()}")
    if to_create or to_grow:
        _await_metadata(target, {p.mapping.target: p.mapping.partitions for p in plans
                                 if p.action in ("create", "grow")})
    return [p.mapping for p in plans]


def _outcomes(cfg: ReplicatorConfig, futures: Mapping[str, Future], grow: bool
              ) -> Iterator[tuple[str, KafkaError | None]]:
    """Each topic's result of a create/grow request (None: done); a denied one raises the error that
    names the missing ACL."""
    for topic, fut in futures.items():
        try:
            fut.result()
        except KafkaException as e:
            if _denied(e):
                raise permissions.creation_denied(cfg, topic, grow=grow) from None
            yield topic, e.args[0]
        else:
            yield topic, None


def _denied(e: KafkaException) -> bool:
    return bool(e.args) and is_authorization_error(e.args[0])


def _partitions(target: AdminClient, topic: str) -> int:
    md = target.list_topics(topic, timeout=30).topics.get(topic)
    return len(md.partitions) if md is not None and md.error is None else 0


def _await_metadata(target: AdminClient, wanted: dict[str, int], timeout: float = VISIBLE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while True:
        topics = target.list_topics(timeout=30).topics
        short = {t: n for t, n in wanted.items()
                 if (md := topics.get(t)) is None or md.error is not None or len(md.partitions) < n}
        if not short:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"target topics {sorted(short)} not visible with their partitions "
                                 f"{timeout:.0f}s after creation")
        time.sleep(0.2)


def sync_configs(cfg: ReplicatorConfig, source: AdminClient, target: AdminClient,
                 mappings: list[TopicMapping]) -> dict[str, dict[str, tuple[str | None, str]]]:
    """Re-applies drifted configs with incremental SETs; returns what was changed per target topic."""
    plans = [p for p in plan(cfg, source, target, {m.source: m.partitions for m in mappings})
             if p.target_partitions is not None and p.changes]
    if not plans:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, p.mapping.target, incremental_configs=[
        ConfigEntry(k, want, incremental_operation=AlterConfigOpType.SET) for k, (_, want) in p.changes.items()])
        for p in plans]
    changed = {}
    futures = target.incremental_alter_configs(resources, request_timeout=30)
    for p, resource in zip(plans, resources, strict=True):
        try:
            futures[resource].result()
        except KafkaException as e:  # e.g. a key this target's version does not know: keep replicating
            log.warning("could not sync configs of target topic %s: %s", p.mapping.target, e.args[0].str(),
                        extra={"event": "config_sync_failed", "topic": p.mapping.target})
            continue
        changed[p.mapping.target] = p.changes
        log.info("synced configs of target topic %s: %s", p.mapping.target,
                 ", ".join(f"{k}={want}" for k, (_, want) in sorted(p.changes.items())),
                 extra={"event": "config_synced", "topic": p.mapping.target})
    return changed
