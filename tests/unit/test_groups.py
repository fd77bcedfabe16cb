"""Group selection, checkpoint formats and group metrics (no broker needed)."""

from __future__ import annotations

import struct

import pytest

from replicator.config import ConfigError, load
from replicator.groups.checkpoints import Checkpoint, mm2_key, mm2_value, parse_mm2
from replicator.groups.sync import GroupFilter, GroupStatus, PartitionStatus
from replicator.ops.metrics import ReplicatorMetrics

BASE = {"source_bootstrap_servers": "127.0.0.1:19092", "target_bootstrap_servers": "127.0.0.1:29092",
        "topics": "orders.*"}


@pytest.mark.parametrize("group, accepted", [
    ("billing", True), ("orders-app", True),
    ("__replicator.job", False), ("__consumer_offsets", False), ("console-consumer-123", False),
    ("connect-sink", False), ("mm2-offsets", False), ("job.source-reader", False), ("job.translator", False),
    ("excluded-app", False),
])
def test_group_filter_skips_internal_and_excluded_groups(group, accepted):
    assert GroupFilter(".*", ("excluded-.*",)).accepts(group) is accepted


def test_group_filter_include_is_a_full_match():
    f = GroupFilter("app-.*")
    assert f.accepts("app-1") and not f.accepts("my-app-1")


def test_group_options_are_validated():
    cfg = load({**BASE, "groups": ["a.*", "b"], "groups_exclude": "x.*,y", "group_sync_interval_seconds": "2.5",
                "sync_group_offsets": "false", "mm2_compatible_checkpoints": "true"}, environ={})
    assert cfg.groups == "(?:a.*)|(?:b)" and cfg.groups_exclude == ("x.*", "y")
    assert cfg.group_sync_interval_seconds == 2.5 and not cfg.sync_group_offsets and cfg.mm2_compatible_checkpoints
    defaults = load(BASE, environ={})
    assert defaults.groups == ".*" and defaults.group_sync_interval_seconds == 5.0 and defaults.sync_group_offsets
    for key, bad in (("groups", "a("), ("groups_exclude", "[x"), ("group_sync_interval_seconds", "0"),
                     ("sync_group_offsets", "maybe"), ("mm2_compatible_checkpoints", "2")):
        with pytest.raises(ConfigError) as e:
            load({**BASE, key: bad}, environ={})
        assert e.value.key == key


def test_mm2_checkpoint_layout():
    # MirrorMaker 2's Checkpoint: key (STRING group, STRING topic, INT32 partition); value INT16
    # version 0, then INT64 upstream offset, INT64 offset, STRING metadata (Kafka protocol types).
    key, value = mm2_key("g", "orders", 3), mm2_value(41, 17, "m")
    assert key == b"\x00\x01g\x00\x06orders" + struct.pack(">i", 3)
    assert value == struct.pack(">hqq", 0, 41, 17) + b"\x00\x01m"
    assert parse_mm2(key, value) == ("g", "orders", 3, 41, 17, "m")


def test_checkpoint_owns_written_and_pending_values():
    assert Checkpoint(10, 5, True, 0, "index", w=5, p=9).owned() == {5, 9}
    assert Checkpoint(10, 5, True, 0, "index").owned() == set()


def test_group_metrics():
    m = ReplicatorMetrics()
    part = PartitionStatus("orders", 0, "orders", 10, 8, True, 3, "index")
    m.on_groups([GroupStatus("a", "synced", [part]), GroupStatus("b", "taken-over", [part]),
                 GroupStatus("c", "synced")])
    text = m.exposition().decode()
    assert 'replicator_groups{state="synced"} 2.0' in text
    assert 'replicator_groups{state="taken-over"} 1.0' in text
    assert 'replicator_group_sync_lag_offsets{group="a"} 3.0' in text
    assert 'replicator_group_checkpoint_timestamp_seconds{group="b"}' in text
    assert 'group="c"' not in text  # nothing to checkpoint: no series
    m.on_groups([GroupStatus("a", "synced", [part])], failed={"b"})  # b failed this round: kept
    text = m.exposition().decode()
    assert 'group="b"' in text and 'group="a"' in text
    m.on_groups([GroupStatus("a", "synced", [part])])  # b gone from the source
    assert 'group="b"' not in m.exposition().decode()


def test_a_source_group_is_read_as_it_committed_and_kept_to_the_replicated_partitions():
    from types import SimpleNamespace

    from kafka import TopicPartition as Tp
    from kafka.structs import OffsetAndMetadata

    from replicator.groups.sync import GroupSync

    class Admin:  # what the group's OffsetFetch answers: everything it committed, nothing else
        def list_group_offsets(self, spec):
            assert spec == {"app": None}  # the whole group, not a partition list
            return {"app": {Tp("orders", 0): OffsetAndMetadata(40, "meta\x00", -1),
                            Tp("orders", 1): OffsetAndMetadata(7, "", -1),
                            Tp("orders", 5): OffsetAndMetadata(9, "", -1),  # past the selected partition count
                            Tp("payments", 0): OffsetAndMetadata(3, "", -1),  # not replicated
                            Tp("orders", 2): OffsetAndMetadata(-1, "", -1)}}

    sync = SimpleNamespace(_offsets_admin=Admin())
    got = GroupSync._source_offsets(sync, "app", {"orders": 3})
    assert got == {("orders", 0): (40, "meta"), ("orders", 1): (7, "")}


def test_a_source_unreachable_for_the_offsets_fails_the_groups_round_not_the_sync_thread(monkeypatch):

    import kafka
    from kafka.errors import KafkaConnectionError

    from replicator.groups.sync import GroupSync

    def unreachable(**settings):
        raise KafkaConnectionError("no broker answered")

    monkeypatch.setattr(kafka, "KafkaAdminClient", unreachable)
    sync = object.__new__(GroupSync)
    sync._offsets_admin, sync.cfg = None, load(BASE, environ={})
    with pytest.raises(RuntimeError, match="KafkaConnectionError"):  # run_once counts it as this group's failure
        GroupSync._source_offsets(sync, "app", {"orders": 3})


def test_a_moved_coordinator_is_looked_up_again_at_the_next_round(monkeypatch):
    # kafka-python 3.0 caches a group's coordinator for the client's life: the failing client is
    # dropped, and the next round's new one finds where the coordinator went.
    import kafka
    from kafka.errors import NotCoordinatorError

    from replicator.groups.sync import GroupSync

    built = []

    class Admin:
        def __init__(self, **settings) -> None:
            self.closed = False
            built.append(self)

        def list_group_offsets(self, spec):
            if len(built) == 1:
                raise NotCoordinatorError("the coordinator moved")
            return {"app": {}}

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(kafka, "KafkaAdminClient", Admin)
    sync = object.__new__(GroupSync)
    sync._offsets_admin, sync.cfg = None, load(BASE, environ={})
    with pytest.raises(RuntimeError, match="NotCoordinatorError"):
        GroupSync._source_offsets(sync, "app", {"orders": 3})
    assert built[0].closed and sync._offsets_admin is None
    assert GroupSync._source_offsets(sync, "app", {"orders": 3}) == {}
    assert len(built) == 2 and not built[1].closed
