"""Group checkpointing and sync on real brokers: exact values, and every safety rule."""

from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from replicator import config
from replicator.clients import kafka_clients
from replicator.engine.shard_copy import CopyRange, ShardCopier
from replicator.groups import sync as sync_mod
from replicator.groups.checkpoints import CheckpointStore, parse_mm2
from replicator.groups.index_topic import ensure_index_topic
from replicator.groups.sync import GroupSync, group_offsets
from replicator.groups.translate import Translator, read_records
from replicator.names import mm2_checkpoints_topic
from replicator.sandbox.jars import classpath
from replicator.topics import sync as topic_sync
from tests.engine_checks import sample_records
from tests.index_helpers import commit_offsets, next_record_view
from tests.kafka_helpers import commit_member_less, create_topic, end_offsets, produce_transactional

PARTITIONS = 2
JAVA = Path(__file__).resolve().parents[1] / "java"


def _target_committed(bootstrap: str, group: str, topic: str) -> dict[int, TopicPartition]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        res = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        c.close()
    return {tp.partition: tp for tp in res if tp.offset >= 0}


class _Member:
    """A live consumer of the group on the target (a member: the coordinator refuses admin commits)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "session.timeout.ms": 10_000})
        self.consumer.subscribe([topic])
        self.stop, self.read = threading.Event(), 0
        self.joined = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.is_set():
            m = self.consumer.poll(0.2)
            if self.consumer.assignment():
                self.joined.set()
            if m is not None and m.error() is None:
                self.read += 1

    def commit_and_leave(self) -> None:
        self.stop.set()
        self.thread.join()
        self.consumer.commit(asynchronous=False)
        self.consumer.close()


@pytest.fixture
def replicated(sandbox, unique):
    """A topic with aborted source transactions, copied with its index, and a config for it."""
    topic, name = f"gs-{unique}", f"gs-{unique}"
    create_topic(sandbox.source.bootstrap, topic, PARTITIONS)
    produce_transactional(sandbox.source.bootstrap, topic, sample_records(3_000, partitions=PARTITIONS),
                          f"s-{unique}", per_txn=100, abort_every=4)
    cfg = config.load({"source_bootstrap_servers": sandbox.source.bootstrap,
                       "target_bootstrap_servers": sandbox.target.bootstrap, "topics": re.escape(topic),
                       "name": name, "shards": 1, "groups": f"gs-{unique}-.*",
                       "mm2_compatible_checkpoints": True, "source_alias": f"src{unique}"}, environ={})
    source, target = kafka_clients.source_admin(cfg), kafka_clients.target_admin(cfg)
    mappings = topic_sync.ensure_target_topics(cfg, source, target, topic_sync.discover(cfg, source))
    ensure_index_topic(cfg, target, [topic])
    ends = end_offsets(sandbox.source.bootstrap, topic, PARTITIONS)
    ShardCopier(cfg, 0).copy([CopyRange(m.source, m.target, p, 0, ends[p]) for m in mappings
                              for p in range(PARTITIONS)])
    return cfg, topic, ends


def test_group_sync_rules(sandbox, unique, replicated, monkeypatch):
    cfg, topic, ends = replicated
    src, dst = sandbox.source.bootstrap, sandbox.target.bootstrap
    g_synced, g_active, g_taken = f"gs-{unique}-synced", f"gs-{unique}-active", f"gs-{unique}-taken"
    commit_offsets(src, g_synced, topic, {0: 400, 1: ends[1]}, metadata="app-meta")
    commit_offsets(src, g_taken, topic, {0: 10, 1: 20})
    commit_offsets(src, g_active, topic, {0: 50, 1: 60})
    commit_offsets(src, f"console-consumer-{unique}", topic, {0: 5})  # internal: never synced
    member = _Member(dst, g_active, topic)
    assert member.joined.wait(60), "the target consumer never joined its group"

    sync = GroupSync(cfg)
    by_group = {s.group: s for s in sync.run_once()}
    assert set(by_group) == {g_synced, g_active, g_taken}
    translator = Translator(cfg)
    try:
        # Synced exactly, metadata kept, no leader epoch.
        assert by_group[g_synced].state == "synced"
        committed = _target_committed(dst, g_synced, topic)
        for p, x in ((0, 400), (1, ends[1])):
            t = translator.translate(topic, p, x)
            assert committed[p].offset == t.target_offset and t.exact
            assert committed[p].metadata == "app-meta"
            assert committed[p].leader_epoch is None or committed[p].leader_epoch < 0
            assert next_record_view(dst, topic, p, committed[p].offset) == next_record_view(src, topic, p, x)
        # A group with a member on the target is never written.
        assert by_group[g_active].state == "active-on-target"
        assert _target_committed(dst, g_active, topic) == {}
        assert member.read > 0
        member.commit_and_leave()  # it consumed on the target: the group is the application's now
        assert by_group[g_taken].state == "synced"
        taker = Consumer({"bootstrap.servers": dst, "group.id": g_taken, "enable.auto.commit": False})
        commit_member_less(taker, [TopicPartition(topic, 0, 5)])
        taker.close()

        # The source group reset backwards: followed. Groups used on the target: taken over.
        commit_offsets(src, g_synced, topic, {0: 100})
        commit_offsets(src, g_taken, topic, {0: 30, 1: 40})
        commit_offsets(src, g_active, topic, {0: 70})
        by_group = {s.group: s for s in sync.run_once()}
        t100 = translator.translate(topic, 0, 100).target_offset
        assert _target_committed(dst, g_synced, topic)[0].offset == t100
        assert by_group[g_synced].state == "synced"
        for g in (g_taken, g_active):
            assert by_group[g].state == "taken-over", by_group[g]
        assert _target_committed(dst, g_taken, topic)[0].offset == 5
        assert 1 not in _target_committed(dst, g_active, topic) or \
            _target_committed(dst, g_active, topic)[1].offset != translator.translate(topic, 1, 60).target_offset

        # Taken over survives a restart of the sync (it is recorded on the target).
        sync.stop()
        sync = GroupSync(cfg)
        by_group = {s.group: s for s in sync.run_once()}
        assert by_group[g_taken].state == "taken-over" and _target_committed(dst, g_taken, topic)[0].offset == 5

        # Killed between the target write and its confirmation: the next sync owns the value.
        commit_offsets(src, g_synced, topic, {0: 900})
        real_commit = sync_mod.commit_group

        def commit_then_die(*args):
            real_commit(*args)
            raise KeyboardInterrupt("killed after the write")

        monkeypatch.setattr(sync_mod, "commit_group", commit_then_die)
        with pytest.raises(KeyboardInterrupt):
            sync.run_once()
        monkeypatch.setattr(sync_mod, "commit_group", real_commit)
        commit_offsets(src, g_synced, topic, {0: 1000}, metadata="app-meta-2")
        # The "killed" sync's clients are closed, as a dead process's would be: left open, its
        # kafka-python thread kept reconnecting after the clusters stopped, logging into a closed
        # pytest stream ("--- Logging error ---" at the end of `make test`).
        sync.stop()
        sync = GroupSync(cfg)
        by_group = {s.group: s for s in sync.run_once()}
        assert by_group[g_synced].state == "synced"
        committed = _target_committed(dst, g_synced, topic)[0]
        assert committed.offset == translator.translate(topic, 0, 1000).target_offset
        assert committed.metadata == "app-meta-2"

        # MirrorMaker 2's checkpoint format: the newest record per key carries our translation.
        mm2 = {}
        c = Consumer({"bootstrap.servers": dst, "group.id": "t", "enable.auto.commit": False,
                      "enable.partition.eof": True})
        for m in read_records(c, mm2_checkpoints_topic(cfg.source_alias), 0, 0):
            group, t_topic, p, up, down, meta = parse_mm2(m.key(), m.value())
            mm2[(group, t_topic, p)] = (up, down, meta)
        c.close()
        assert mm2[(g_synced, topic, 0)] == (1000, translator.translate(topic, 0, 1000).target_offset, "app-meta-2")
        # ... and MirrorMaker 2's own client reads it so (RemoteClusterUtils.translateOffsets).
        java = subprocess.run(["java", "-cp", classpath(), str(JAVA / "TranslateOffsets.java"), dst, cfg.source_alias,
                               g_synced], capture_output=True, text=True, timeout=300)
        assert java.returncode == 0, java.stderr[-3000:]
        assert f"{topic} 0 {translator.translate(topic, 0, 1000).target_offset}" in java.stdout.splitlines()
        store = CheckpointStore(cfg).load()
        assert store.checkpoints[(g_synced, topic, 0)].x == 1000
    finally:
        sync.stop()
        translator.close()
    assert group_offsets({}, dst, f"console-consumer-{unique}", [(topic, 0)]) == {}
