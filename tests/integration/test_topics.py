"""Topic management on the real sandbox: selection, naming policies, target topic creation with the
source's partitions and configs, topics and partitions added while running, config drift, deleted
topics, the provenance header, and a prefix-policy active/active pair that does not loop."""

from __future__ import annotations

import json
import subprocess
import time

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
)

from replicator.replication_policy import PROVENANCE_HEADER
from tests.kafka_helpers import (
    assert_identical,
    create_topic,
    end_offsets,
    fake_group_offsets,
    produce_transactional,
    read_all,
    record_view,
)
from tests.replicator_process import BIN, ReplicatorProcess, wait_until

# CreateTime an hour old: a target stamping LogAppendTime would show it (and retention keeps it).
BASE_TS = int(time.time() * 1000) - 3_600_000
FAST_REFRESH = {"REPLICATOR_REFRESH_TOPICS_INTERVAL_SECONDS": "2",
                "REPLICATOR_SYNC_TOPIC_CONFIGS_INTERVAL_SECONDS": "2"}


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _topics(bootstrap: str, containing: str) -> dict[str, int]:
    """Replicated topics only: the job's own internal topics (`__replicator.<name>.*`, named after
    the job) are not part of what these tests compare."""
    md = _admin(bootstrap).list_topics(timeout=30)
    return {n: len(t.partitions) for n, t in md.topics.items()
            if containing in n and not n.startswith("__") and t.error is None}


def _configs(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    resource, admin = ConfigResource(ConfigResource.Type.TOPIC, topic), _admin(bootstrap)
    return admin.describe_configs([resource])[resource].result(timeout=30)


def _overrides(bootstrap: str, topic: str) -> dict[str, str]:
    return {k: e.value for k, e in _configs(bootstrap, topic).items()
            if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def _alter(bootstrap: str, topic: str, **values: str) -> None:
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in values.items()]
    resource, admin = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries), _admin(bootstrap)
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def _cluster_id(bootstrap: str) -> str:
    return _admin(bootstrap).list_topics(timeout=30).cluster_id


def _records(partitions: list[int], count: int, tag: str, headers=None) -> list[tuple]:
    return [(partitions[i % len(partitions)], f"k{i % 17}".encode(), f"{tag}-{i}".encode(),
             headers if headers is not None else [("h", tag.encode())], BASE_TS + i) for i in range(count)]


def _caught_up(source_bs: str, target_bs: str, group: str, topic: str, target_topic: str) -> bool:
    """The fake group says every committed source offset of the topic is copied."""
    partitions = _topics(source_bs, topic).get(topic)
    if partitions is None or _topics(target_bs, target_topic).get(target_topic, 0) < partitions:
        return False
    ends = end_offsets(source_bs, topic, partitions)
    committed = fake_group_offsets(target_bs, group)
    return all(committed.get((target_topic, p)) == ends[p] for p in range(partitions))


def _assert_stamped_copy(source_bs: str, target_bs: str, topic: str, partitions: int) -> int:
    """Target = source minus the records that came from the target, each with the provenance
    header naming the source cluster appended; order, keys, values, headers, timestamps kept."""
    source_id, target_id = _cluster_id(source_bs).encode(), _cluster_id(target_bs).encode()
    src, dst = read_all(source_bs, topic, partitions), read_all(target_bs, topic, partitions)
    copied = 0
    for p in range(partitions):
        want = [record_view(m) for m in src[p] if (PROVENANCE_HEADER, target_id) not in (m.headers() or [])]
        got = []
        for m in dst[p]:
            headers = list(m.headers() or [])
            assert headers[-1] == (PROVENANCE_HEADER, source_id), f"{topic}[{p}]: no provenance header"
            got.append((m.key(), m.value(), tuple(headers[:-1]), m.timestamp()[1]))
        assert got == want, f"{topic}[{p}]: target differs from the source"
        copied += len(got)
    return copied


def _dry_run(sandbox, topics: str, *extra: str) -> dict:
    out = subprocess.run([str(BIN), "topics", "--source-bootstrap-servers", sandbox.source.bootstrap,
                          "--target-bootstrap-servers", sandbox.target.bootstrap, "--topics", topics,
                          "--format", "json", *extra], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_dry_run_maps_exactly_the_selected_topics_under_both_policies(sandbox, unique):
    src = sandbox.source.bootstrap
    for name, partitions in ((f"sel-{unique}-orders", 2), (f"sel-{unique}-audit", 1), (f"__sel-{unique}", 1),
                             (f"sel-{unique}-changelog-internal", 1), (f"sel-{unique}.replica", 1),
                             (f"west.sel-{unique}-back", 1)):
        create_topic(src, name, partitions)
    create_topic(src, f"sel-{unique}-compact", 3, {"cleanup.policy": "compact", "retention.ms": "3600000",
                                                   "min.insync.replicas": "1"})
    # Already on the target: short, with a target-only setting and a timestamp type to correct.
    create_topic(sandbox.target.bootstrap, f"sel-{unique}-orders", 1,
                 {"retention.ms": "1000", "message.timestamp.type": "LogAppendTime"})
    include = f".*sel-{unique}.*"

    identity = _dry_run(sandbox, include, "--topics-exclude", f"sel-{unique}-aud.*")
    assert {t["source"]: t["target"] for t in identity["topics"]} == {
        f"sel-{unique}-orders": f"sel-{unique}-orders", f"sel-{unique}-compact": f"sel-{unique}-compact",
        f"west.sel-{unique}-back": f"west.sel-{unique}-back"}
    skipped = identity["not_replicated"]
    assert "excluded by" in skipped[f"sel-{unique}-audit"]
    for internal in (f"__sel-{unique}", f"sel-{unique}-changelog-internal", f"sel-{unique}.replica"):
        assert skipped[internal].startswith("internal topic"), internal
    compact = next(t for t in identity["topics"] if t["source"] == f"sel-{unique}-compact")
    assert compact["action"] == "create" and compact["partitions"] == 3
    assert compact["configs"] == {"cleanup.policy": "compact", "retention.ms": "3600000",
                                  "message.timestamp.type": "CreateTime"}
    orders = next(t for t in identity["topics"] if t["source"] == f"sel-{unique}-orders")
    assert (orders["action"], orders["partitions"], orders["target_partitions"]) == ("grow", 2, 1)
    assert orders["changes"] == {"message.timestamp.type": {"target": "LogAppendTime", "wanted": "CreateTime"}}

    prefix = _dry_run(sandbox, include, "--topics-exclude", f"sel-{unique}-aud.*",
                      "--replication-policy", "prefix", "--source-alias", "east", "--target-alias", "west")
    assert {t["source"]: t["target"] for t in prefix["topics"]} == {
        f"sel-{unique}-orders": f"east.sel-{unique}-orders", f"sel-{unique}-compact": f"east.sel-{unique}-compact"}
    assert "replica of a topic of the target" in prefix["not_replicated"][f"west.sel-{unique}-back"]
    assert _topics(sandbox.target.bootstrap, f"sel-{unique}") == {f"sel-{unique}-orders": 1}, "dry run changed"
    assert _overrides(sandbox.target.bootstrap, f"sel-{unique}-orders")["message.timestamp.type"] == "LogAppendTime"


def test_topics_created_grown_synced_and_deleted_while_running(sandbox, unique, tmp_path):
    src, dst = sandbox.source.bootstrap, sandbox.target.bootstrap
    compact, plain, doomed = f"tm-{unique}-compact", f"tm-{unique}-plain", f"tm-{unique}-doomed"
    late, skip, internal = f"tm-{unique}-late", f"tm-{unique}-skip", f"__tm-{unique}"
    create_topic(src, compact, 3, {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000",
                                   "retention.ms": "86400000", "min.insync.replicas": "1",
                                   "max.message.bytes": "2000000"})
    create_topic(src, plain, 2)
    create_topic(dst, plain, 1, {"retention.bytes": "987654321"})  # short, with a target-only setting
    for name in (doomed, skip, internal):
        create_topic(src, name, 1)
    target_id = _cluster_id(dst).encode()
    produce_transactional(src, compact, _records([0, 1, 2], 300, "c"), f"p-{unique}-1", per_txn=100)
    produce_transactional(src, plain, _records([0, 1], 200, "p"), f"p-{unique}-2", per_txn=100)
    # A record that already came from the target (as the reverse replicator would stamp it).
    produce_transactional(src, plain, _records([0], 1, "loop", [(PROVENANCE_HEADER, target_id)]), f"p-{unique}-3")
    for name in (doomed, skip, internal):
        produce_transactional(src, name, _records([0], 10, name), f"p-{unique}-{name}")

    group = f"__replicator.tm-{unique}"
    env = {**FAST_REFRESH, "REPLICATOR_PROVENANCE_HEADER": "true"}
    with ReplicatorProcess(sandbox, f"(__)?tm-{unique}.*", f"tm-{unique}", tmp_path / "run.log",
                           "--topics-exclude", f"tm-{unique}-sk.*", "--shards", "2", env=env) as job:
        for topic in (compact, plain, doomed):
            wait_until(lambda t=topic: _caught_up(src, dst, group, t, t), 240, f"{topic} copied", job)

        # A compacted topic stays compacted, with its partitions and overrides, minus cluster settings.
        assert _topics(dst, compact)[compact] == 3
        assert _overrides(dst, compact) == {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000",
                                            "retention.ms": "86400000", "max.message.bytes": "2000000",
                                            "message.timestamp.type": "CreateTime"}
        assert _topics(dst, plain)[plain] == 2, "the short target topic was grown"

        # While running: a setting made on the target only, a source config change, a new topic, a
        # new partition, a deleted topic.
        _alter(dst, compact, delete_retention_ms="123456")
        _alter(src, compact, retention_ms="172800000")
        changed_at = time.monotonic()
        create_topic(src, late, 2)
        produce_transactional(src, late, _records([0, 1], 50, "late"), f"p-{unique}-4")
        admin = _admin(src)
        admin.create_partitions([NewPartitions(plain, 3)])[plain].result(timeout=30)
        produce_transactional(src, plain, _records([0, 1, 2], 60, "grown"), f"p-{unique}-2")
        admin.delete_topics([doomed])[doomed].result(timeout=30)

        wait_until(lambda: _caught_up(src, dst, group, late, late), 240, "the new topic copied", job)
        wait_until(lambda: _caught_up(src, dst, group, plain, plain), 240, "the new partition copied", job)
        # A measurement for the report, never an assertion.
        print(f"new topic and new partition copied {time.monotonic() - changed_at:.1f}s after creation "
              f"(refresh interval 2 s)")
        wait_until(lambda: _overrides(dst, compact).get("retention.ms") == "172800000", 120,
                   "the source config change synced", job)
        wait_until(lambda: f"source topic {doomed} was deleted" in job.log(), 120, "the deletion logged", job)
        produce_transactional(src, plain, _records([2], 10, "after-delete"), f"p-{unique}-2")
        wait_until(lambda: _caught_up(src, dst, group, plain, plain), 240, "records after the deletion", job)

        assert _overrides(dst, compact)["delete.retention.ms"] == "123456", "target-only setting wiped"
        assert _overrides(dst, plain)["retention.bytes"] == "987654321", "target-only setting wiped"
        assert _topics(dst, f"tm-{unique}") == {compact: 3, plain: 3, doomed: 1, late: 2}
        assert _assert_stamped_copy(src, dst, compact, 3) == 300
        assert _assert_stamped_copy(src, dst, plain, 3) == 270
        assert _assert_stamped_copy(src, dst, late, 2) == 50
        assert "Traceback" not in job.log()
        assert job.sigterm() == 0


def test_prefix_policy_active_active_pair_does_not_loop(sandbox, unique, tmp_path):
    east, west = sandbox.source, sandbox.target
    aa, bb, aa2, bb2 = (f"{n}-{unique}" for n in ("aa", "bb", "aa2", "bb2"))
    create_topic(east.bootstrap, aa, 2)
    create_topic(west.bootstrap, bb, 1)
    produce_transactional(east.bootstrap, aa, _records([0, 1], 100, "east"), f"e-{unique}")
    produce_transactional(west.bootstrap, bb, _records([0], 50, "west"), f"w-{unique}")

    def replicator(src, dst, alias, other, name):
        return ReplicatorProcess(sandbox, f".*{unique}", name, tmp_path / f"{name}.log", "--shards", "1",
                                 "--replication-policy", "prefix", "--source-alias", alias,
                                 env={**FAST_REFRESH, "REPLICATOR_TARGET_ALIAS": other}, source=src, target=dst)

    e2w, w2e = f"e2w-{unique}", f"w2e-{unique}"
    with replicator(east, west, "east", "west", e2w) as a, replicator(west, east, "west", "east", w2e) as b:
        wait_until(lambda: _caught_up(east.bootstrap, west.bootstrap, f"__replicator.{e2w}", aa, f"east.{aa}"),
                   300, "east -> west", a)
        wait_until(lambda: _caught_up(west.bootstrap, east.bootstrap, f"__replicator.{w2e}", bb, f"west.{bb}"),
                   300, "west -> east", b)
        # Each side now holds the other's replica. A topic created after that is picked up by a
        # later refresh, which also saw the replica: had the guard failed, it would have copied it.
        create_topic(east.bootstrap, aa2, 1)
        create_topic(west.bootstrap, bb2, 1)
        produce_transactional(east.bootstrap, aa2, _records([0], 5, "east2"), f"e2-{unique}")
        produce_transactional(west.bootstrap, bb2, _records([0], 5, "west2"), f"w2-{unique}")
        wait_until(lambda: _caught_up(east.bootstrap, west.bootstrap, f"__replicator.{e2w}", aa2, f"east.{aa2}"),
                   240, "a later east topic", a)
        wait_until(lambda: _caught_up(west.bootstrap, east.bootstrap, f"__replicator.{w2e}", bb2, f"west.{bb2}"),
                   240, "a later west topic", b)

        assert _topics(east.bootstrap, unique) == {aa: 2, aa2: 1, f"west.{bb}": 1, f"west.{bb2}": 1}
        assert _topics(west.bootstrap, unique) == {bb: 1, bb2: 1, f"east.{aa}": 2, f"east.{aa2}": 1}
        assert {t for t, _ in fake_group_offsets(west.bootstrap, f"__replicator.{e2w}")} == {f"east.{aa}",
                                                                                            f"east.{aa2}"}
        assert {t for t, _ in fake_group_offsets(east.bootstrap, f"__replicator.{w2e}")} == {f"west.{bb}",
                                                                                            f"west.{bb2}"}
        assert assert_identical(east.bootstrap, west.bootstrap, aa, 2, f"east.{aa}") == 100
        assert assert_identical(west.bootstrap, east.bootstrap, bb, 1, f"west.{bb}") == 50
        assert a.sigterm() == 0
        assert b.sigterm() == 0


def test_driver_and_planner_growing_the_same_topics_at_once_is_not_an_error(sandbox, unique):
    """Both refresh loops may find a target topic short and grow it at the same moment."""
    import threading

    from replicator.config import load
    from replicator.topics.sync import ensure_target_topics, selection

    names = [f"race-{unique}-{i}" for i in range(6)]
    for name in names:
        create_topic(sandbox.source.bootstrap, name, 4)
        create_topic(sandbox.target.bootstrap, name, 1)
    cfg = load({"source_bootstrap_servers": sandbox.source.bootstrap, "topics": f"race-{unique}-.*",
                "target_bootstrap_servers": sandbox.target.bootstrap}, environ={})
    selected = selection(cfg, _admin(sandbox.source.bootstrap))[0]
    errors: list[BaseException] = []

    def grow() -> None:
        try:
            ensure_target_topics(cfg, _admin(sandbox.source.bootstrap), _admin(sandbox.target.bootstrap), selected)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=grow) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    # A grown topic reaches the broker's metadata cache a moment after CreatePartitions answers; a
    # clean-clone run read one of the six at 1 partition right after the threads ended.
    wait_until(lambda: _topics(sandbox.target.bootstrap, f"race-{unique}") == dict.fromkeys(names, 4), 30,
               "every raced topic at 4 partitions")
    assert _topics(sandbox.target.bootstrap, f"race-{unique}") == dict.fromkeys(names, 4)
