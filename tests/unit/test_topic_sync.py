"""Which configs a target topic gets, what counts as drift, and what the dry run calls each case."""

from __future__ import annotations

from confluent_kafka.admin import ConfigEntry, ConfigSource

from replicator.config import ReplicatorConfig
from replicator.topics.sync import TopicMapping, TopicPlan, config_changes, desired_configs

# As described by a broker: the source is an int.
DYNAMIC, DEFAULT = ConfigSource.DYNAMIC_TOPIC_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value


def _entries(**values: tuple) -> dict[str, ConfigEntry]:
    out = {}
    for key, (value, source, *sensitive) in values.items():
        name = key.replace("__", "-").replace("_", ".")
        out[name] = ConfigEntry(name, value, source=source, is_sensitive=bool(sensitive and sensitive[0]))
    return out


def test_only_source_overrides_travel_minus_cluster_settings_and_excludes():
    source = _entries(retention_ms=("3600000", DYNAMIC), segment_bytes=("1073741824", DEFAULT),
                      min_insync_replicas=("2", DYNAMIC), unclean_leader_election_enable=("true", DYNAMIC),
                      leader_replication_throttled_replicas=("*", DYNAMIC), compression_type=("zstd", DYNAMIC),
                      confluent_tier_enable=("true", DYNAMIC), some_secret=("x", DYNAMIC, True),
                      cleanup_policy=("delete", DEFAULT), max_message_bytes=("1048588", DEFAULT),
                      message_timestamp_type=("LogAppendTime", DYNAMIC))
    assert desired_configs(source, 1_048_588, exclude=(r"compression\..*",)) == {
        "retention.ms": "3600000", "cleanup.policy": "delete", "message.timestamp.type": "CreateTime"}


def test_compaction_is_always_copied_and_max_message_bytes_never_lowered():
    source = _entries(cleanup_policy=("compact,delete", DYNAMIC), max_message_bytes=("5000000", DYNAMIC))
    assert desired_configs(source, 1_048_588) == {"cleanup.policy": "compact,delete",
                                                  "message.timestamp.type": "CreateTime",
                                                  "max.message.bytes": "5000000"}
    small = _entries(cleanup_policy=("compact", DYNAMIC), max_message_bytes=("65536", DYNAMIC))
    # The replicator's producer batches up to the target's default: a smaller limit would refuse them.
    assert "max.message.bytes" not in desired_configs(small, 1_048_588)
    assert desired_configs(small, 1_048_588)["cleanup.policy"] == "compact"


def test_drift_sets_differences_and_never_touches_target_only_settings():
    wanted = {"retention.ms": "7200000", "cleanup.policy": "compact,delete", "message.timestamp.type": "CreateTime"}
    target = _entries(retention_ms=("3600000", DYNAMIC), cleanup_policy=("delete,compact", DYNAMIC),
                      message_timestamp_type=("CreateTime", DEFAULT), retention_bytes=("999", DYNAMIC))
    assert config_changes(wanted, target) == {"retention.ms": ("3600000", "7200000")}
    assert config_changes({"segment.ms": "1000"}, {}) == {"segment.ms": (None, "1000")}


def test_plan_actions():
    m = TopicMapping("a", "a", 4)
    assert TopicPlan(m, None, {}).action == "create"
    assert TopicPlan(m, 2, {}).action == "grow"
    assert TopicPlan(m, 4, {}, {"retention.ms": ("1", "2")}).action == "sync"
    assert TopicPlan(m, 8, {}).action == "in sync"


def test_topic_options_survive_the_trip_to_the_executors():
    cfg = ReplicatorConfig(topics="x", config_sync_exclude=("a.*",), sync_topic_configs=False,
                           provenance_header=True, target_alias="west", refresh_topics_interval_seconds=2.0)
    assert ReplicatorConfig.from_json(cfg.to_json()) == cfg
