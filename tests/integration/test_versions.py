"""The engine's exactly-once check across Kafka versions: the classic replication job is a migration
off an older cluster (old source -> new target), and some targets lag behind their sources.

Each pair of clusters gets SIGKILLed replicator runs, a zombie twin and aborted source transactions,
then must hold exactly the source's committed records, with nothing open on the target, as judged by
the test's own reader and by `replicator verify --quiesced --require-caught-up`.

`make versions` runs the matrix (marker `versions`, not part of `make test`: about 4 minutes per
pair on this 2-core machine, see docs/reliability.md, "Kafka versions").
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from replicator.sandbox import Sandbox
from replicator.sandbox.cluster import SOURCE_PORT, _port_shift
from tests.engine_checks import PARTITIONS, feeding, final_catch_up, run_then_crash, sample_records, target_is_stable
from tests.kafka_helpers import assert_identical, create_topic, produce_transactional
from tests.replicator_process import BIN, ReplicatorProcess, wait_until
from tests.zk_cluster import ZooKeeperKafkaCluster

ZK = "-zk"  # a version suffix: that cluster runs in ZooKeeper mode (Kafka 3.x only)


def _box(root: Path, source: str, target: str) -> Sandbox:
    # Own ports (the session sandbox keeps running): +60 on the shift, below the +50 pairs' range.
    box = Sandbox(root=root, port_shift=_port_shift() + 60, source_version=source.removesuffix(ZK),
                  target_version=target.removesuffix(ZK))
    for role, version in (("source", source), ("target", target)):
        if version.endswith(ZK):
            c = getattr(box, role)
            setattr(box, role, ZooKeeperKafkaCluster(c.name, c.port, c.root, c.version))
    assert box.source.port != SOURCE_PORT + _port_shift()
    return box


def _capped_feeder(box: Sandbox, topic: str, unique: str, stop: threading.Event, limit: int) -> None:
    """Live source traffic with aborted transactions, bounded: on this shared 2-core machine an
    unbounded feeder outruns the job and the final catch-up never ends."""
    sent = 0
    while not stop.is_set() and sent < limit:
        produce_transactional(box.source.bootstrap, topic, sample_records(1_000, start=1_000_000 + sent),
                              f"bg-{unique}", per_txn=250, abort_every=3)
        sent += 1_000
        stop.wait(0.5)


def exactly_once_across(box: Sandbox, unique: str, logs: Path, crashes: int = 2, zombie: bool = True,
                        preload: int = 30_000) -> None:
    topic, name = f"ver-{unique}", f"ver-{unique}"
    create_topic(box.source.bootstrap, topic, PARTITIONS)
    produce_transactional(box.source.bootstrap, topic, sample_records(preload), f"pre-{unique}",
                          per_txn=1_000, abort_every=5)
    with feeding(lambda stop: _capped_feeder(box, topic, unique, stop, 20_000)):
        for n in range(crashes):
            run_then_crash(box, topic, name, logs / f"crash{n}.log", 3 + 2 * n,
                           "--shards", "2", "--batch-duration-seconds", "5", start_timeout=600)
        if zombie:
            with ReplicatorProcess(box, topic, name, logs / "a.log", "--shards", "2",
                                   "--batch-duration-seconds", "5") as a, \
                 ReplicatorProcess(box, topic, name, logs / "b.log", "--shards", "2",
                                   "--batch-duration-seconds", "5") as b:
                # Both copy the same stream until one of them has been fenced by the other.
                wait_until(lambda: "fenced" in a.log() + b.log(), 600, "a twin to be fenced")
                for job in (a, b):
                    if job.running():
                        job.sigterm()
    final_catch_up(box, topic, name, logs / "final.log", 900, "catch-up")
    assert assert_identical(box.source.bootstrap, box.target.bootstrap, topic, PARTITIONS) > preload * 4 // 5
    target_is_stable(box, topic)
    proc = subprocess.run([str(BIN), "verify", "--source-bootstrap-servers", box.source.bootstrap,
                           "--target-bootstrap-servers", box.target.bootstrap, "--topics", topic, "--name", name,
                           "--format", "json", "--quiesced", "--require-caught-up"],
                          capture_output=True, text=True, timeout=300)
    report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    assert proc.returncode == 0, (report.get("violations"), proc.stderr[-2000:])
    assert report["totals"]["source_records"] == report["totals"]["target_records"] > preload * 4 // 5


def _run_pair(tmp_path_factory, unique: str, source: str, target: str) -> None:
    root = tmp_path_factory.mktemp(f"v-{source}-{target}")
    box = _box(root, source, target)
    box.up(fresh=True)
    try:
        logs = root / "logs"
        logs.mkdir()
        exactly_once_across(box, unique, logs)
    finally:
        box.down()


# (source, target): why each pair matters is in docs/reliability.md ("Kafka versions").
MATRIX = [("3.6.2", "4.1.2"), ("4.1.2", "3.6.2"), ("3.9.1" + ZK, "4.1.2"), ("4.1.2", "3.9.1")]


@pytest.mark.versions
@pytest.mark.parametrize("source, target", MATRIX, ids=[f"{s}-to-{t}" for s, t in MATRIX])
def test_version_matrix(tmp_path_factory, unique, source, target):
    _run_pair(tmp_path_factory, unique, source, target)
