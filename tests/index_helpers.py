"""Test-side reading of the translation index (read_committed, like any consumer of the target)."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from replicator.groups.index import INDEX_PARTITIONS, IndexEntry, parse_key
from replicator.names import index_topic
from tests.kafka_helpers import commit_member_less, read_all, record_view


def read_index(bootstrap: str, job_name: str, isolation: str = "read_committed"
               ) -> dict[tuple[str, int], list[IndexEntry]]:
    """Every visible entry, per target partition, in index order (one target partition's entries all
    stand in one index partition, so reading partition by partition keeps their order)."""
    out: dict[tuple[str, int], list[IndexEntry]] = {}
    for records in read_all(bootstrap, index_topic(job_name), INDEX_PARTITIONS, isolation=isolation).values():
        for m in records:
            out.setdefault(parse_key(m.key()), []).append(IndexEntry.decode(m.value()))
    return out


def assert_index_exact(source_bs: str, target_bs: str, job_name: str, source_topic: str, target_topic: str,
                       partitions: int, start: int = 0) -> int:
    """The committed index chains without holes from `start` to the source's end, and maps every
    copied source record to the target record equal to it. Returns the number of entries."""
    entries = read_index(target_bs, job_name)
    src = read_all(source_bs, source_topic, partitions)
    dst = read_all(target_bs, target_topic, partitions)
    total = 0
    for p in range(partitions):
        chain = entries.get((target_topic, p), [])
        assert chain, f"no index entry for {target_topic}[{p}]"
        total += len(chain)
        for e in chain:
            e.check()
            assert e.contiguous
        for a, b in zip(chain, chain[1:], strict=False):
            # Transactions that copied no record of the partition leave no entry: nothing to map there.
            assert a.end <= b.begin and a.end_target <= b.first_target, (a, b)
        assert chain[0].begin <= max(start, src[p][0].offset() if src[p] else start)
        by_target = {m.offset(): m for m in dst[p]}
        for m in src[p]:
            x = m.offset()
            e = next(e for e in chain if e.covers(x))
            t = e.translate(x)
            assert t in by_target, f"{source_topic}[{p}] offset {x} maps to {t}, not a record on the target"
            assert record_view(by_target[t]) == record_view(m), f"{source_topic}[{p}] offset {x} -> {t}"
    return total


def commit_offsets(bootstrap: str, group: str, topic: str, offsets: dict[int, int], metadata: str = "") -> None:
    """Commits a group's offsets as a stopped application would have (member-less)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        commit_member_less(c, [TopicPartition(topic, p, o, metadata=metadata) if metadata
                               else TopicPartition(topic, p, o) for p, o in offsets.items()])
    finally:
        c.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        res = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in res if tp.offset >= 0}


def next_record_view(bootstrap: str, topic: str, partition: int, offset: int):
    """What a read_committed consumer positioned at `offset` reads next (None at the end)."""
    from replicator.groups.translate import read_records

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-next", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        got = read_records(c, topic, partition, offset, limit=1)
        return record_view(got[0]) if got else None
    finally:
        c.close()


def positions_of_every_kind(src: list, start: int, end: int) -> dict[str, int]:
    """Source offsets of every kind a group may stand at: the start, inside a transaction, on a
    marker, just after one, inside an aborted transaction, on a compaction hole, the end."""
    offsets = [m.offset() for m in src]
    present = set(offsets)
    holes = [o for o in range(start, end) if o not in present]
    out = {"start": start, "end": end, "second": offsets[1]}
    for a, b in zip(offsets, offsets[1:], strict=False):
        if b == a + 2:  # one offset skipped: a marker (or a single compacted record)
            out.setdefault("on-single-gap", a + 1)
            out.setdefault("after-single-gap", b)
        if b > a + 2:  # a run: an aborted transaction and its marker, or compacted records
            out.setdefault("inside-run-gap", a + 2)
            out.setdefault("after-run-gap", b)
        if b == a + 1 and a > start + 10:
            out.setdefault("inside-transaction", b)
    if holes:
        out["last-hole"] = holes[-1]
    out["near-end"] = offsets[-3]
    return out
