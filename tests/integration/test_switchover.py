"""Planned switchover with producers stopped (zero loss, zero duplicates, the old direction refuses
to start), then failback: the reverse job copies only what was produced on the new primary, and a
group consumed there translates back exactly, one still before the cut too (through the forward
job's index); `divergence` lists what the old source holds beyond the cut; and the original direction
again, whose groups all translate, those in the original log through the first job's index."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from replicator.names import marker_topic
from replicator.sandbox import Sandbox
from tests.index_helpers import commit_offsets, committed_offsets, next_record_view
from tests.kafka_helpers import (
    assert_identical,
    create_topic,
    end_offsets,
    produce_transactional,
    read_all,
    topic_names,
)
from tests.replicator_process import BIN, ReplicatorProcess, wait_until

PARTITIONS = 2


def _records(n: int, start: int = 0) -> list[tuple]:
    import time

    base = int(time.time() * 1000) - 600_000
    return [(i % PARTITIONS, f"k{i}".encode(), f"v-{i}".encode(), None, base + i) for i in range(start, start + n)]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=900)


def test_switchover_then_failback(sandbox: Sandbox, unique: str, tmp_path: Path):
    a, b = sandbox.source.bootstrap, sandbox.target.bootstrap
    topic, fwd, rev = f"sw-{unique}", f"sw-{unique}", f"swback-{unique}"
    group, early, at_cut = f"sw-{unique}-app", f"sw-{unique}-early", f"sw-{unique}-at-cut"
    create_topic(a, topic, PARTITIONS)
    produce_transactional(a, topic, _records(2_000), f"s-{unique}", per_txn=100, abort_every=4)
    commit_offsets(a, group, topic, {0: 300, 1: 500})
    commit_offsets(a, early, topic, {0: 100, 1: 150})
    fwd_conn = ["--source-bootstrap-servers", a, "--target-bootstrap-servers", b, "--topics", topic, "--name", fwd]
    env = {"REPLICATOR_GROUP_SYNC_INTERVAL_SECONDS": "1", "REPLICATOR_GROUPS": f"sw-{unique}-.*"}

    with ReplicatorProcess(sandbox, topic, fwd, tmp_path / "fwd.log", "--shards", "1", env=env) as job:
        wait_until(lambda: "progress:" in job.log(), 300, "the forward job", job)
        out = _cli("switchover", *fwd_conn, "--format", "json", "--timeout", "600")
        assert out.returncode == 0, out.stdout + out.stderr
        report = json.loads(out.stdout)
        assert report["lost_partitions"] == 0 and report["marker"]["kind"] == "switchover"
        # The running job sees the marker and stops by itself.
        assert job.wait(120) == 0
    assert "promoted" in job.log()
    assert assert_identical(a, b, topic, PARTITIONS) == 1_500  # zero loss, zero duplicates
    for p, x in ((0, 300), (1, 500)):
        t = committed_offsets(b, group, topic, PARTITIONS)[p]
        assert next_record_view(b, topic, p, t) == next_record_view(a, topic, p, x)
    refused = _cli("run", *fwd_conn, "--metrics-port", "0", "--metrics-host", "127.0.0.1")
    assert refused.returncode == 1 and "promoted" in refused.stderr + refused.stdout

    # After the cut: the new primary gets new records; the old source got one more it never sent.
    cut_a, cut_b = end_offsets(a, topic, PARTITIONS), end_offsets(b, topic, PARTITIONS)
    produce_transactional(a, topic, _records(3, start=50_000), f"late-{unique}")
    produce_transactional(b, topic, _records(400, start=10_000), f"n-{unique}", per_txn=50)
    div = _cli("divergence", *fwd_conn, "--format", "json")
    assert div.returncode == 3, div.stdout + div.stderr
    rows = json.loads(div.stdout)["partitions"]
    assert sum(r["records"] for r in rows) == 3 and all(r["from"] == cut_a[r["partition"]] for r in rows)

    # Failback: the reverse job starts at the cut, copies only the 400 new records back.
    rev_conn = ["--source-bootstrap-servers", b, "--target-bootstrap-servers", a, "--topics", topic, "--name", rev]
    out = _cli("failback", *rev_conn, "--forward-name", fwd, "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    before = {p: len(v) for p, v in read_all(a, topic, PARTITIONS).items()}
    b_ends = end_offsets(b, topic, PARTITIONS)
    # The application consumed some new records on the new primary; it translates back exactly.
    # Another consumed there only records from before the cut: it translates back through the
    # forward job's index, past the 3 records the old source got after the cut.
    new_b = read_all(b, topic, PARTITIONS)
    x_b = {p: new_b[p][-50].offset() for p in range(PARTITIONS)}
    commit_offsets(b, group, topic, x_b)
    early_b = {p: new_b[p][400 + p].offset() for p in range(PARTITIONS)}
    assert all(int(new_b[p][400 + p].value()[2:]) < 2_000 for p in range(PARTITIONS))  # copied before the cut
    commit_offsets(b, early, topic, early_b)
    commit_offsets(b, at_cut, topic, cut_b)  # consumed everything there was at the switchover
    env_rev = {"REPLICATOR_GROUP_SYNC_INTERVAL_SECONDS": "1", "REPLICATOR_GROUPS": f"sw-{unique}-.*"}
    with ReplicatorProcess(sandbox, topic, rev, tmp_path / "rev.log", "--shards", "1", env=env_rev,
                           source=sandbox.target, target=sandbox.source) as job:
        def translated(g: str, x: dict[int, int]) -> bool:
            at = committed_offsets(a, g, topic, PARTITIONS)
            return len(at) == PARTITIONS and all(
                next_record_view(a, topic, p, at[p]) == next_record_view(b, topic, p, x[p]) for p in range(PARTITIONS))

        def back() -> bool:
            fake = committed_offsets(a, f"__replicator.{rev}", topic, PARTITIONS)
            return (fake == b_ends and translated(group, x_b) and translated(early, early_b)
                    and committed_offsets(a, at_cut, topic, PARTITIONS) == cut_a)
        wait_until(back, 300, "the reverse copy and group translation", job, interval=2)
        after = read_all(a, topic, PARTITIONS)
        assert sum(len(after[p]) - before[p] for p in range(PARTITIONS)) == 400  # only the new records
        # The records copied back are not divergence: still the 3 the old source got on its own.
        div = _cli("divergence", *fwd_conn, "--format", "json")
        assert div.returncode == 3 and json.loads(div.stdout)["diverged_records"] == 3, div.stdout + div.stderr
        # Back to the old source as primary: the reverse job's own switchover, which stops it.
        out = _cli("switchover", *rev_conn, "--format", "json", "--timeout", "600")
        assert out.returncode == 0 and json.loads(out.stdout)["lost_partitions"] == 0, out.stdout + out.stderr
        assert job.wait(120) == 0

    # And the original direction again: a failback of the reverse job, under a new name (the first
    # job's offsets group predates the reverse copy). It copies only what the old source got since.
    fwd2 = f"sw2-{unique}"
    fwd2_conn = ["--source-bootstrap-servers", a, "--target-bootstrap-servers", b, "--topics", topic, "--name", fwd2]
    b_before = {p: len(v) for p, v in read_all(b, topic, PARTITIONS).items()}
    out = _cli("failback", *fwd2_conn, "--forward-name", rev, "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    produce_transactional(a, topic, _records(100, start=90_000), f"m-{unique}", per_txn=25)
    a_ends = end_offsets(a, topic, PARTITIONS)
    with ReplicatorProcess(sandbox, topic, fwd2, tmp_path / "fwd2.log", "--shards", "1", env=env) as job:
        wait_until(lambda: committed_offsets(b, f"__replicator.{fwd2}", topic, PARTITIONS) == a_ends, 300,
                   "the third leg's copy", job, interval=2)
        # Every group translates in the third leg too: those the reverse job's copy holds through its
        # index, `early` and `at_cut` (in the original log, older than that copy) through the first
        # job's index, which copied that log into b.
        out = _cli("groups", *fwd2_conn, "--format", "json")
        assert out.returncode == 0, out.stdout + out.stderr
        states = {g["group"]: g["state"] for g in json.loads(out.stdout)["groups"]}
        assert set(states) == {group, early, at_cut} and set(states.values()) <= {"synced", "would-sync"}, states
        assert job.sigterm() == 0
    b_after = read_all(b, topic, PARTITIONS)
    assert sum(len(b_after[p]) - b_before[p] for p in range(PARTITIONS)) == 100  # nothing copied twice


def test_switchover_waits_while_the_source_is_still_written_or_consumed(sandbox: Sandbox, unique: str,
                                                                       tmp_path: Path):
    """A planned switchover promotes only a quiet source: a replication that keeps up with a trickle
    reads lag 0 while its producers still write (their records after the fence were lost), and a
    consumer still running on the source moves its group past the final sync (duplicates on the
    target). Both time out with nothing fenced or written; a mistyped --name is refused at once."""
    import threading

    from confluent_kafka import Consumer, Producer

    from tests.engine_checks import feeding

    a, b = sandbox.source.bootstrap, sandbox.target.bootstrap
    topic, name, group = f"swq-{unique}", f"swq-{unique}", f"swq-{unique}-app"
    create_topic(a, topic, PARTITIONS)
    produce_transactional(a, topic, _records(200), f"s-{unique}")
    conn = ["--source-bootstrap-servers", a, "--target-bootstrap-servers", b, "--topics", topic]
    env = {"REPLICATOR_GROUP_SYNC_INTERVAL_SECONDS": "1", "REPLICATOR_GROUPS": f"swq-{unique}-.*"}

    typo = _cli("switchover", *conn, "--name", f"{name}-typo", "--timeout", "600")
    assert typo.returncode == 1 and "holds no offsets" in typo.stderr, typo.stdout + typo.stderr
    assert f"__replicator.{name}-typo.checkpoints" not in topic_names(b)

    def trickle(stop: threading.Event) -> None:
        producer, i = Producer({"bootstrap.servers": a}), 0
        while not stop.wait(0.2):
            producer.produce(topic, f"t{i}".encode(), partition=i % PARTITIONS)
            producer.poll(0)
            i += 1
        producer.flush(30)

    def consume(stop: threading.Event) -> None:
        consumer = Consumer({"bootstrap.servers": a, "group.id": group, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        while not stop.is_set():
            consumer.poll(0.2)
        consumer.close()

    with ReplicatorProcess(sandbox, topic, name, tmp_path / "job.log", "--shards", "1", env=env) as job:
        wait_until(lambda: "progress:" in job.log(), 300, "the job", job)
        for feed, phrase in ((trickle, "the source's end offsets still move"),
                             (consume, f"groups still consuming on the source: {group}")):
            with feeding(feed):
                time.sleep(5)  # the job copies the trickle / the consumer joins and commits
                out = _cli("switchover", *conn, "--name", name, "--timeout", "20")
            assert out.returncode == 4 and phrase in out.stderr, out.stdout + out.stderr
            assert marker_topic(name) not in topic_names(b)
        out = _cli("switchover", *conn, "--name", name, "--timeout", "300")
        assert out.returncode == 0 and "zero loss" in out.stdout, out.stdout + out.stderr
        assert job.wait(120) == 0
