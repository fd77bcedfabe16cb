"""`replicator verify` against real clusters whose target was written by hand, right and wrong.

The target side is written here with a transactional producer that commits the fake group's offsets
in the same transaction, exactly as the engine does, so every kind of damage verify must name can
be placed precisely: duplicates, losses, reordering, foreign records, values from aborted source
transactions, and transactions left open on the target.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from replicator.offsets import CommitMetadata
from tests.kafka_helpers import create_topic, fake_group_offsets, produce_transactional

BIN = Path(sys.executable).with_name("replicator")
Record = tuple  # (partition, key, value, headers, timestamp)


def source_records(n: int, tag: str) -> list[Record]:
    # Recent timestamps: retention (7 days by record time) must not delete the source under the test.
    now = int(time.time() * 1000) - 60_000
    return [(0, f"k{i}".encode(), f"{tag}-{i}".encode(), [("seq", str(i).encode())], now + i) for i in range(n)]


def write_target(bootstrap: str, topic: str, records: list[Record], group: str, committed: int,
                 last_source_offset: int, txn_id: str) -> None:
    """Target records and the fake group's offset in one transaction, as the engine writes them."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(60)
    producer.begin_transaction()
    pairs: list[int] = []
    for _, key, value, headers, ts in records:
        producer.produce(topic, value=value, key=key, partition=0, headers=headers, timestamp=ts,
                         on_delivery=lambda err, msg: pairs.append(msg.offset()))
    producer.flush(60)
    meta = CommitMetadata("src", topic, 1, 0, last_source_offset, max(pairs) if pairs else -1)
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, committed, metadata=meta.encode())],
                                         reader.consumer_group_metadata(), 60)
    producer.commit_transaction(60)
    reader.close()


def run_verify(sandbox, topic: str, name: str, *extra: str) -> tuple[int, dict | str, str]:
    proc = subprocess.run([str(BIN), "verify", "--source-bootstrap-servers", sandbox.source.bootstrap,
                           "--target-bootstrap-servers", sandbox.target.bootstrap, "--topics", topic,
                           "--name", name, *extra], capture_output=True, text=True, timeout=300)
    out = json.loads(proc.stdout) if "json" in extra and proc.stdout.strip() else proc.stdout
    return proc.returncode, out, proc.stderr


def scenario(sandbox, unique: str, label: str, damage) -> tuple[str, str, list[Record]]:
    """A 1-partition source of 40 committed records; the target gets `damage(records)`."""
    topic, name = f"verify-{label}-{unique}", f"v-{label}-{unique}"
    src = source_records(40, label)
    create_topic(sandbox.source.bootstrap, topic)
    create_topic(sandbox.target.bootstrap, topic)
    produce_transactional(sandbox.source.bootstrap, topic, src, f"src-{name}", per_txn=20)
    # Two transactions of 20: offsets 0-19, marker 20, 21-40, marker 41 -> next offset 42.
    write_target(sandbox.target.bootstrap, topic, damage(src), f"__replicator.{name}", 42, 40, f"w-{name}")
    return topic, name, src


@pytest.mark.parametrize("label, damage, expected", [
    ("identical", lambda r: r, {}),
    ("duplicates", lambda r: r[:10] + r[7:10] + r[10:], {"duplicates": 3}),
    ("missing", lambda r: r[:5] + r[7:], {"missing": 2}),
    ("reordered", lambda r: r[:5] + [r[6], r[5]] + r[7:], {"reordered": 1}),
    ("extra", lambda r: r[:5] + [(0, b"x", b"foreign", [], r[5][4])] + r[5:], {"extra": 1}),
    ("alteredheader", lambda r: r[:3] + [(*r[3][:3], [("seq", b"other")], r[3][4])] + r[4:],
     {"missing": 1, "extra": 1}),
    ("alteredtimestamp", lambda r: r[:3] + [(*r[3][:4], r[3][4] + 1)] + r[4:], {"missing": 1, "extra": 1}),
])
def test_verify_names_each_kind_of_damage(sandbox, unique, label, damage, expected):
    topic, name, src = scenario(sandbox, unique, label, damage)
    code, report, err = run_verify(sandbox, topic, name, "--format", "json")
    totals = report["totals"]
    assert totals["source_records"] == len(src), err
    for kind in ("duplicates", "missing", "extra", "reordered"):
        assert totals[kind] == expected.get(kind, 0), (kind, report)
    if expected:
        assert code == 1 and report["ok"] is False and report["violations"]
        assert report["partitions"][0]["first_divergence"] is not None
    else:
        assert code == 0 and report["ok"] is True and report["violations"] == []
        assert totals["target_records"] == len(src)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_verify_reads_topics_stored_in_every_codec(sandbox, unique, codec):
    """Source and target batches stored compressed (the topics' compression.type), as production
    topics often are: verify decodes each codec and still finds a single missing record."""
    topic, name = f"verify-{codec}-{unique}", f"v-{codec}-{unique}"
    src = source_records(40, codec)
    create_topic(sandbox.source.bootstrap, topic, config={"compression.type": codec})
    create_topic(sandbox.target.bootstrap, topic, config={"compression.type": codec})
    produce_transactional(sandbox.source.bootstrap, topic, src, f"src-{name}", per_txn=20)
    write_target(sandbox.target.bootstrap, topic, src[:9] + src[10:], f"__replicator.{name}", 42, 40, f"w-{name}")
    code, report, err = run_verify(sandbox, topic, name, "--format", "json")
    assert isinstance(report, dict), err[-2000:]
    totals = report["totals"]
    assert (totals["source_records"], totals["target_records"], totals["missing"]) == (40, 39, 1), report
    assert (totals["duplicates"], totals["extra"], totals["reordered"]) == (0, 0, 0), report
    assert code == 1 and report["partitions"][0]["first_divergence"] is not None


@pytest.mark.parametrize("label, lose, missing", [("compacted", None, 0), ("compactedlost", "k3", 1)])
def test_verify_compares_each_keys_latest_record_of_compacted_topics(sandbox, unique, label, lose, missing):
    """The target's cleaner kept each key's latest record only (written that way here: the cleaner's
    schedule is its own); verify judges the keys' latest records, and still finds one that is gone."""
    topic, name = f"verify-{label}-{unique}", f"v-{label}-{unique}"
    now = int(time.time() * 1000) - 60_000
    src = [(0, f"k{i % 10}".encode(), f"{label}-{i}".encode(), [("seq", str(i).encode())], now + i)
           for i in range(40)]
    compact = {"cleanup.policy": "compact"}
    create_topic(sandbox.source.bootstrap, topic, config=compact)
    create_topic(sandbox.target.bootstrap, topic, config=compact)
    produce_transactional(sandbox.source.bootstrap, topic, src, f"src-{name}", per_txn=20)
    cleaned = [r for r in src[30:] if r[1] != (lose or "").encode()]
    write_target(sandbox.target.bootstrap, topic, cleaned, f"__replicator.{name}", 42, 40, f"w-{name}")
    code, report, err = run_verify(sandbox, topic, name, "--format", "json")
    assert isinstance(report, dict), err[-2000:]
    part, totals = report["partitions"][0], report["totals"]
    assert (totals["source_records"], totals["target_records"]) == (40, len(cleaned)), report
    assert (totals["missing"], totals["duplicates"], totals["extra"]) == (missing, 0, 0), report
    assert part["note"].startswith("compacted"), part
    assert (code, report["ok"]) == ((1, False) if missing else (0, True)), report


def test_verify_reports_values_of_aborted_source_transactions(sandbox, unique, tmp_path):
    topic, name = f"verify-aborted-{unique}", f"v-aborted-{unique}"
    create_topic(sandbox.source.bootstrap, topic)
    create_topic(sandbox.target.bootstrap, topic)
    src = source_records(30, "ab")
    # Transactions of 10; the second is aborted: its values must never be visible downstream.
    committed = produce_transactional(sandbox.source.bootstrap, topic, src, f"src-{name}", per_txn=10,
                                      abort_every=2)
    assert committed == 20
    aborted = src[10:20]
    truth = tmp_path / "truth.jsonl"
    truth.write_text("".join(json.dumps({"aborted": v.decode()}) + "\n" for _, _, v, _, _ in aborted))
    # A broken replicator that copied read_uncommitted: it leaked one aborted record.
    leaked = src[:10] + aborted[:1] + src[20:]
    write_target(sandbox.target.bootstrap, topic, leaked, f"__replicator.{name}", 33, 31, f"w-{name}")

    code, report, _ = run_verify(sandbox, topic, name, "--format", "json", "--ground-truth", str(truth))
    assert code == 1
    assert report["totals"]["aborted_visible"] == 1
    assert report["totals"]["extra"] == 1 and report["totals"]["source_records"] == 20
    assert any("aborted" in v for v in report["violations"])


def produce_plain(bootstrap: str, topic: str, records: list[Record]) -> None:
    """A foreign, non-transactional producer writing straight into the target topic."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for _, key, value, headers, ts in records:
        producer.produce(topic, value=value, key=key, partition=0, headers=headers, timestamp=ts)
    assert producer.flush(60) == 0


def assert_caught(sandbox, topic: str, name: str, phrase: str) -> dict:
    """The damage is a violation for a running job's audit and for a quiesced one."""
    for extra in ((), ("--quiesced",)):
        code, report, err = run_verify(sandbox, topic, name, "--format", "json", *extra)
        assert code == 1 and report["ok"] is False, (extra, report, err)
        assert any(phrase in v for v in report["violations"]), (extra, report["violations"])
    code, text, _ = run_verify(sandbox, topic, name)
    assert code == 1 and "FAILED" in text and phrase in text
    return report


@pytest.mark.parametrize("label", ["appendedcopy", "appendedforeign"])
def test_verify_reports_records_appended_after_the_replicated_range(sandbox, unique, label):
    """A new user's check: replicate, stop, write one record straight into the target topic. The
    group's pair ends before it, but nothing the replication wrote can be there."""
    topic, name, src = scenario(sandbox, unique, label, lambda r: r)
    appended = src[5] if label == "appendedcopy" else (0, b"x", b"foreign", [], src[5][4])
    produce_plain(sandbox.target.bootstrap, topic, [appended])
    report = assert_caught(sandbox, topic, name, "after the replicated range")
    part = report["partitions"][0]
    assert report["totals"]["foreign"] == part["foreign"] == 1
    assert part["first_foreign"] == 41  # after the 40 records and the commit marker
    assert part["foreign_copies"] == (1 if label == "appendedcopy" else 0)
    assert report["totals"]["source_records"] == report["totals"]["target_records"] == len(src)


def test_verify_reports_foreign_writes_inside_the_replicated_range(sandbox, unique):
    """A foreign producer writes between two transactions of the replication."""
    topic, name = f"verify-inside-{unique}", f"v-inside-{unique}"
    src = source_records(40, "inside")
    create_topic(sandbox.source.bootstrap, topic)
    create_topic(sandbox.target.bootstrap, topic)
    produce_transactional(sandbox.source.bootstrap, topic, src, f"src-{name}", per_txn=20)
    group = f"__replicator.{name}"
    write_target(sandbox.target.bootstrap, topic, src[:20], group, 21, 19, f"w-{name}")
    produce_plain(sandbox.target.bootstrap, topic, [(0, b"x", b"interloper", [], src[0][4])])
    write_target(sandbox.target.bootstrap, topic, src[20:], group, 42, 40, f"w-{name}")
    report = assert_caught(sandbox, topic, name, "records that are not on the source")
    assert report["totals"]["extra"] == 1 and report["totals"]["foreign"] == 0
    assert report["partitions"][0]["first_divergence"]["target_offset"] == 21


def test_verify_reports_target_records_deleted(sandbox, unique):
    from confluent_kafka.admin import AdminClient

    topic, name, src = scenario(sandbox, unique, "deleted", lambda r: r)
    admin = AdminClient({"bootstrap.servers": sandbox.target.bootstrap})
    for fut in admin.delete_records([TopicPartition(topic, 0, 10)]).values():
        fut.result(timeout=60)
    report = assert_caught(sandbox, topic, name, "the target log starts at offset 10")
    assert report["totals"]["missing"] == 10 and report["totals"]["target_records"] == len(src) - 10


def test_verify_reports_a_recreated_target_topic(sandbox, unique):
    """Deleting the target topic drops the group's offsets for it; whatever then sits in the new
    topic was not written by the replication, and the copy is no longer caught up."""
    from confluent_kafka.admin import AdminClient

    topic, name, src = scenario(sandbox, unique, "recreated", lambda r: r)
    admin = AdminClient({"bootstrap.servers": sandbox.target.bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=60)
    deadline = time.monotonic() + 60
    while True:  # the deletion completes asynchronously
        try:
            create_topic(sandbox.target.bootstrap, topic)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    code, report, err = run_verify(sandbox, topic, name, "--format", "json", "--quiesced", "--require-caught-up")
    assert code == 1, (report, err)
    assert any("source end" in v or "records deleted or topic recreated" in v for v in report["violations"])
    produce_plain(sandbox.target.bootstrap, topic, src[:3])
    assert_caught(sandbox, topic, name, "that the replication did not write")


def test_verify_reports_an_open_transaction_and_lso_below_hw(sandbox, unique):
    topic, name, _ = scenario(sandbox, unique, "open", lambda r: r)
    producer = Producer({"bootstrap.servers": sandbox.target.bootstrap, "transactional.id": f"{name}-shard-0",
                         "transaction.timeout.ms": 600_000})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, value=b"uncommitted", partition=0)
    producer.flush(60)
    try:
        code, report, _ = run_verify(sandbox, topic, name, "--format", "json")
        assert code == 0, "an open transaction of a running replicator is normal"
        part = report["partitions"][0]
        assert part["open_transaction"] is True and part["lso"] < part["hw"]
        assert [t["transactional_id"] for t in report["open_transactions"]] == [f"{name}-shard-0"]
        assert report["open_transactions"][0]["partitions"] == [f"{topic}[0]"]

        code, report, _ = run_verify(sandbox, topic, name, "--format", "json", "--quiesced")
        assert code == 1
        assert any("high watermark" in v for v in report["violations"])
    finally:
        producer.abort_transaction(60)
    code, report, _ = run_verify(sandbox, topic, name, "--format", "json", "--quiesced")
    assert code == 0, report["violations"]
    assert report["partitions"][0]["lso_equals_hw"] is True


def test_verify_require_caught_up_and_text_summary(sandbox, unique):
    topic, name, src = scenario(sandbox, unique, "behind", lambda r: r)
    produce_transactional(sandbox.source.bootstrap, topic, source_records(5, "more"), f"more-{name}")
    code, text, _ = run_verify(sandbox, topic, name)
    assert code == 0 and "OK:" in text and f"{len(src)} source records" in text
    ids = {c.name: AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(timeout=30).cluster_id
           for c in sandbox.clusters}
    assert (f"source: cluster {ids['source']} at {sandbox.source.bootstrap}; "
            f"target: cluster {ids['target']} at {sandbox.target.bootstrap}") in text, text
    code, text, _ = run_verify(sandbox, topic, name, "--require-caught-up")
    assert code == 1 and "FAILED" in text and "source end" in text


def test_verify_with_nothing_to_compare_exits_1_instead_of_ok(sandbox, unique):
    """A wrong --name, or a job that never committed: no "OK" for an audit that compared nothing."""
    topic = f"verify-none-{unique}"
    create_topic(sandbox.source.bootstrap, topic)
    produce_transactional(sandbox.source.bootstrap, topic, source_records(3, "x"), f"none-{unique}")
    code, text, _ = run_verify(sandbox, topic, f"v-none-{unique}")  # no target topic, no group
    assert code == 1 and "OK:" not in text, text
    assert "NOTHING VERIFIED" in text and "1 of 1 selected source topics have no target topic" in text, text
    code, report, _ = run_verify(sandbox, f"{topic}-absent", f"v-none-{unique}", "--format", "json")
    assert code == 1 and report["nothing_verified"] and report["selected_source_topics"] == 0, report


def test_verify_unreachable_cluster_exits_1_naming_it(sandbox):
    role = "target"  # the source goes through the same code path
    args = {"source": sandbox.source.bootstrap, "target": sandbox.target.bootstrap, role: "127.0.0.1:1"}
    proc = subprocess.run([str(BIN), "verify", "--source-bootstrap-servers", args["source"],
                           "--target-bootstrap-servers", args["target"], "--topics", "x", "--name", "x"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert f"cannot reach the {role} cluster at 127.0.0.1:1" in proc.stderr


def test_verify_invalid_configuration_exits_2(sandbox):
    proc = subprocess.run([str(BIN), "verify", "--source-bootstrap-servers", sandbox.source.bootstrap,
                           "--target-bootstrap-servers", "nonsense", "--topics", "x"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "target_bootstrap_servers" in proc.stderr


def test_verify_while_the_job_runs_judges_nothing_of_ours_and_catches_a_foreign_record(sandbox, unique, tmp_path):
    """The real engine copies a live stream in small transactions while verify runs again and again:
    its in-flight transactions and offset commits racing the audit are never foreign; a record
    written straight into the target meanwhile is."""
    import threading

    from tests.replicator_process import ReplicatorProcess, wait_until

    topic, name = f"verify-live-{unique}", f"v-live-{unique}"
    create_topic(sandbox.source.bootstrap, topic, 2)
    create_topic(sandbox.target.bootstrap, topic, 2)
    stop = threading.Event()

    def feed() -> None:
        i = 0
        while not stop.is_set():
            now = int(time.time() * 1000)
            batch = [(n % 2, None, f"live-{n}".encode(), None, now) for n in range(i, i + 200)]
            produce_transactional(sandbox.source.bootstrap, topic, batch, f"feed-{name}", per_txn=50, abort_every=3)
            i += 200
            stop.wait(0.5)  # a steady trickle: the audit's reads stay short

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        with ReplicatorProcess(sandbox, topic, name, tmp_path / "job.log", "--shards", "2",
                               "--max-records-per-transaction", "100") as job:
            group = f"__replicator.{name}"
            wait_until(lambda: len(fake_group_offsets(sandbox.target.bootstrap, group)) == 2, 240,
                       "the job's first commits", job)
            for _ in range(2):
                code, report, err = run_verify(sandbox, topic, name, "--format", "json")
                assert code == 0, (report["violations"] if isinstance(report, dict) else report, err)
                assert report["totals"]["foreign"] == 0 and report["totals"]["source_records"] > 0
            produce_plain(sandbox.target.bootstrap, topic, [(0, b"x", b"foreign-live", [], int(time.time() * 1000))])
            code, report, err = run_verify(sandbox, topic, name, "--format", "json")
            assert code == 1, (report, err)
            assert report["totals"]["foreign"] + report["totals"]["extra"] == 1, report["violations"]
            assert job.sigterm() == 0
    finally:
        stop.set()
        feeder.join()
