"""SIGKILL of a running `replicator run` while its group sync is writing leaves every target group at
a correct value: a kill can land between a checkpoint record and the group commit it announces, or
between the commit and its confirmation; the restarted job must neither mistake its own write for a
consumer's (taken over) nor leave a group anywhere but at an exact translation."""

from __future__ import annotations

import bisect
import json
import random
import subprocess
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from tests.engine_checks import sample_records
from tests.index_helpers import commit_offsets, committed_offsets
from tests.kafka_helpers import assert_identical, create_topic, end_offsets, produce_transactional, read_all
from tests.replicator_process import BIN, ReplicatorProcess, wait_until

PARTITIONS = 2
GROUPS = 30  # enough that one sync round writes for several seconds: the kill lands inside it
KILLS = 3


class _TargetGroups:
    """Reads the target groups' committed offsets through member-less consumers kept open (cheap
    enough to poll while a sync round runs; never a member, so the sync's commits are not refused)."""

    def __init__(self, bootstrap: str, groups: list[str], topic: str) -> None:
        self.topic = topic
        self.consumers = {g: Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False})
                          for g in groups}

    def read(self) -> dict[str, dict[int, int]]:
        out = {}
        for g, c in self.consumers.items():
            res = c.committed([TopicPartition(self.topic, p) for p in range(PARTITIONS)], timeout=30)
            out[g] = {tp.partition: tp.offset for tp in res if tp.offset >= 0}
        return out

    def close(self) -> None:
        for c in self.consumers.values():
            c.close()


def _positions(rng: random.Random, ends: dict[int, int]) -> dict[int, int]:
    return {p: rng.choice((0, ends[p], rng.randrange(0, ends[p] + 1))) for p in range(PARTITIONS)}


def test_sigkill_during_group_sync_leaves_every_group_exact(sandbox, unique, tmp_path: Path):
    src, dst = sandbox.source.bootstrap, sandbox.target.bootstrap
    topic = name = f"gk-{unique}"
    groups = [f"gk-{unique}-{i:02d}" for i in range(GROUPS)]
    create_topic(src, topic, PARTITIONS)
    produce_transactional(src, topic, sample_records(2_400, partitions=PARTITIONS), f"s-{unique}", per_txn=60,
                          abort_every=3)
    ends = end_offsets(src, topic, PARTITIONS)
    # Source offsets never held by a record (markers, aborted records): positions a consumer may
    # commit after a transaction ends, where a wrong translation is easiest.
    source_offsets = {p: [m.offset() for m in ms] for p, ms in read_all(src, topic, PARTITIONS).items()}
    rng = random.Random(unique)
    # Every set of source positions the groups were given, in order: a group must always stand at
    # the exact translation of one of them.
    wanted: list[dict[str, dict[int, int]]] = []

    def move_source_groups() -> int:
        wanted.append({g: _positions(rng, ends) for g in groups})
        for g in groups:
            commit_offsets(src, g, topic, wanted[-1][g])
        return len(wanted) - 1

    move_source_groups()
    env = {"REPLICATOR_GROUP_SYNC_INTERVAL_SECONDS": "1", "REPLICATOR_GROUPS": f"gk-{unique}-.*"}

    def job(run: int) -> ReplicatorProcess:
        return ReplicatorProcess(sandbox, topic, name, tmp_path / f"job-{run}.log", "--shards", "1", env=env)

    target = _TargetGroups(dst, groups, topic)
    try:
        with job(0) as first:
            wait_until(lambda: committed_offsets(dst, f"__replicator.{name}", topic, PARTITIONS) == ends, 300,
                       "replication", first, interval=2)
            # The copy is exact (one record per source record, in order), so a target position is
            # right iff as many records stand before it as before X on the source.
            assert_identical(src, dst, topic, PARTITIONS)
            target_offsets = {p: [m.offset() for m in ms] for p, ms in read_all(dst, topic, PARTITIONS).items()}

            def correct(g: str, k: int, now: dict[int, int]) -> bool:
                return now.keys() == wanted[k][g].keys() and all(
                    bisect.bisect_left(target_offsets[p], t) == bisect.bisect_left(source_offsets[p], wanted[k][g][p])
                    for p, t in now.items())

            wait_until(lambda: all(correct(g, 0, v) for g, v in target.read().items()), 300, "the first sync",
                       first, interval=2)
            first.sigkill()

        for kill in range(1, KILLS + 1):
            with job(kill) as running:
                # Killed once some groups hold their new translation and others still an old one:
                # inside a round. A round that finished between two looks gets new positions.
                deadline = time.monotonic() + 600
                while running.running() and time.monotonic() < deadline:
                    before = target.read()
                    k = move_source_groups()
                    already = sum(correct(g, k, before[g]) for g in groups)  # the move changed nothing there
                    while True:
                        moved = sum(correct(g, k, v) for g, v in target.read().items())
                        if already < moved < GROUPS or moved == GROUPS or not running.running() \
                                or time.monotonic() > deadline:
                            break
                        time.sleep(0.02)
                    if already < moved < GROUPS:
                        running.sigkill()
                        break
                assert not running.running(), f"kill {kill}: never caught a sync round in progress"
            # Every group is at the exact translation of a position its source group held (a group
            # the killed rounds did not reach yet keeps an older one); none ahead, none elsewhere.
            now = target.read()
            wrong = {g: v for g, v in now.items() if not any(correct(g, k, v) for k in range(len(wanted)))}
            assert not wrong, f"after kill {kill}: groups not at an exact translation: {wrong}"

        last_wanted = len(wanted) - 1
        with job(KILLS + 1) as last:
            wait_until(lambda: all(correct(g, last_wanted, v) for g, v in target.read().items()), 300,
                       "the last sync", last, interval=2)
            listed = subprocess.run([str(BIN), "groups", "--source-bootstrap-servers", src,
                                     "--target-bootstrap-servers", dst, "--topics", topic, "--name", name,
                                     "--format", "json"], capture_output=True, text=True, timeout=600,
                                    env=last.env)
            assert listed.returncode == 0, listed.stdout + listed.stderr
            doc = json.loads(listed.stdout)
            states = {g["group"]: g["state"] for g in doc["groups"]}
            # None wrongly taken over: the killed runs' own writes were recognised as theirs.
            assert states == dict.fromkeys(groups, "synced"), states
            assert all(g["ahead"] == 0 for g in doc["groups"])
            assert last.sigterm() == 0
    finally:
        target.close()
