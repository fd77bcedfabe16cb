"""What a failed chaos run leaves to diagnose: for every partition verify found diverging, the source
log (committed records, and every offset read uncommitted, so aborted records and markers show as
holes), the target's committed records, and the job's translation index entries for it (each
transaction's source range, first target offset, count and skipped runs).

A violation seen once in many runs is only diagnosable from these: the sandbox is gone after the test.
"""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

from replicator import names
from replicator.groups import index


def _consumer(bootstrap: str, committed: bool) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-forensics", "enable.auto.commit": False,
                     "enable.partition.eof": True, "auto.offset.reset": "earliest",
                     "isolation.level": "read_committed" if committed else "read_uncommitted"})


def _read(bootstrap: str, topic: str, partition: int, committed: bool, key: bytes | None = None) -> list:
    """The partition's records from its start to its end (messages, not decoded)."""
    consumer = _consumer(bootstrap, committed)
    out = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        idle = 0
        while idle < 20:
            m = consumer.poll(0.5)
            if m is None:
                idle += 1
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                continue
            if key is None or m.key() == key:
                out.append(m)
    finally:
        consumer.close()
    return out


def _row(m) -> dict:
    return {"offset": m.offset(), "value": (m.value() or b"").decode(errors="replace")[:40], "ts": m.timestamp()[1]}


def _entries(target: str, job: str, target_topic: str, partition: int) -> list[dict]:
    topic = names.index_topic(job)
    key = index.entry_key(target_topic, partition)
    part = index.index_partition(target_topic, partition, _partition_count(target, topic))
    rows = []
    for m in _read(target, topic, part, True, key):
        e = index.IndexEntry.decode(m.value())
        rows.append({"at": m.offset(), "begin": e.begin, "end": e.end, "first_target": e.first_target,
                     "count": e.count, "gaps": e.gaps, "contiguous": e.contiguous})
    return rows


def _partition_count(bootstrap: str, topic: str) -> int:
    consumer = _consumer(bootstrap, True)
    try:
        return len(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    finally:
        consumer.close()


def dump(source: str, target: str, job: str, report: dict, workdir: Path) -> list[Path]:
    """Writes forensics-<topic>-<partition>.json for every partition of `report` (verify's JSON) that
    diverged; returns the files written."""
    written = []
    for p in report.get("partitions", []):
        if not (p.get("missing") or p.get("duplicates") or p.get("extra") or p.get("reordered")
                or p.get("first_divergence")):
            continue
        st, tt, n = p["source_topic"], p["target_topic"], p["partition"]
        out = {
            "partition": p,
            "index_entries": _entries(target, job, tt, n),
            "source_committed": [_row(m) for m in _read(source, st, n, True)],
            "source_all_offsets": [m.offset() for m in _read(source, st, n, False)],
            "target_committed": [_row(m) for m in _read(target, tt, n, True)],
        }
        path = workdir / f"forensics-{tt}-{n}.json"
        path.write_text(json.dumps(out, indent=1))
        written.append(path)
    return written
