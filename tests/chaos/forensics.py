"""What a failed chaos run leaves to diagnose: for every partition verify found diverging, the source
log (committed records, and every offset read uncommitted, so aborted records and markers show as
holes), the target's committed records, and the job's translation index entries for it (each
transaction's source range, first target offset, count and skipped runs).

A violation seen once in many runs is only diagnosable from these: the sandbox is gone after the test.
"""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Consumer

from replicator import names
from replicator.groups import index
from tests.kafka_helpers import read_all


def _row(m) -> dict:
    return {"offset": m.offset(), "value": (m.value() or b"").decode(errors="replace")[:40], "ts": m.timestamp()[1]}


def _entry(m) -> dict:
    e = index.IndexEntry.decode(m.value())
    return {"at": m.offset(), "begin": e.begin, "end": e.end, "first_target": e.first_target, "count": e.count,
            "gaps": e.gaps, "contiguous": e.contiguous}


def _partition_count(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-forensics"})
    try:
        return len(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    finally:
        consumer.close()


def dump(source: str, target: str, job: str, report: dict, workdir: Path) -> list[Path]:
    """Writes forensics-<topic>-<partition>.json for every partition of `report` (verify's JSON) that
    diverged; returns the files written."""
    diverged = [p for p in report.get("partitions", []) if p.get("first_divergence")]
    if not diverged:
        return []
    index_topic = names.index_topic(job)
    entries = [m for ms in read_all(target, index_topic, _partition_count(target, index_topic)).values() for m in ms]
    logs: dict[tuple, dict[int, list]] = {}  # (bootstrap, topic, isolation) -> partition -> records, read once

    def records(bootstrap: str, topic: str, isolation: str = "read_committed") -> dict[int, list]:
        if (bootstrap, topic, isolation) not in logs:
            logs[bootstrap, topic, isolation] = read_all(bootstrap, topic, _partition_count(bootstrap, topic),
                                                         isolation=isolation)
        return logs[bootstrap, topic, isolation]

    written = []
    for p in diverged:
        st, tt, n = p["source_topic"], p["target_topic"], p["partition"]
        key = index.entry_key(tt, n)
        out = {
            "partition": p,
            "index_entries": [_entry(m) for m in entries if m.key() == key],
            "source_committed": [_row(m) for m in records(source, st)[n]],
            "source_all_offsets": [m.offset() for m in records(source, st, "read_uncommitted")[n]],
            "target_committed": [_row(m) for m in records(target, tt)[n]],
        }
        path = workdir / f"forensics-{tt}-{n}.json"
        path.write_text(json.dumps(out, indent=1))
        written.append(path)
    return written
