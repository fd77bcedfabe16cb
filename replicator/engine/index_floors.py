"""Where a start must resume when the target holds committed copies past the fake group's offsets.

A transaction's data, index entries and offsets commit together, so the group should never be
behind the target. make chaos (three brokers, transaction version 0) saw it anyway: after a
coordinator failover during a commit, the transaction's data and index entry were committed and the
group kept answering the offset from before it, across a restart of its coordinator. A running task
resumes such a partition at its floor (`ShardCopier._read_resume_points`); a new job has no floors,
so its pre-flight looks for the same thing on the target:

1. a partition whose read_committed end leaves room, past the record the group's metadata names as
   the last one copied and its commit marker, for another record and marker holds something newer:
   aborted records (a kill in the middle of a transaction: the common case), or the unrecorded commit;
2. reading it read_committed from `to + 1` tells them apart: a committed record is returned only
   in the second case;
3. the translation index, written in the same transactions, then says how far the copies reach: the
   last entry of the partition ends at the source offset to resume at.

Only partitions with something past their last commit are read, so a start after a clean stop reads
nothing but the ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from replicator import names
from replicator.clients import kafka_clients
from replicator.clients.partition_reads import read_to_end
from replicator.config import ReplicatorConfig
from replicator.groups.index import IndexEntry, entry_key, index_partition, parse_key
from replicator.offsets import Committed, read_committed

log = logging.getLogger("replicator.job")

_MARKER = 1  # the commit marker after a transaction's last record takes one offset
# The index is read from this long before the group's last commit of a partition: the entry sought
# was written after that commit, by a clock that may differ from the one that stamped it.
_CLOCK_SLACK_S = 60.0
_READ_STALL_S = 30.0


@dataclass(frozen=True)
class Behind:
    target_topic: str
    partition: int
    committed: int  # the group's next source offset
    resume: int  # where the index says the copies reach


def suspects(committed: dict[tuple[str, int], Committed], ends: dict[tuple[str, int], int]
             ) -> dict[tuple[str, int], int]:
    """(target topic, partition) -> the target offset to read from, for every partition whose
    read_committed end lies past its last commit's records and marker (step 1)."""
    out = {}
    for tp, end in ends.items():
        c = committed.get(tp)
        if c is None or c.offset < 0:
            if end >= 1 + _MARKER:
                out[tp] = 0  # records, but no offset: a first commit whose offsets are missing
        elif c.metadata is not None and c.metadata.target_offset >= 0:
            after = c.metadata.target_offset + 1 + _MARKER  # where the next transaction's records go
            if end >= after + 1 + _MARKER:  # room for a committed record and its marker
                out[tp] = c.metadata.target_offset + 1
    return out


def committed_past(reader: Consumer, starts: dict[tuple[str, int], int]) -> set[tuple[str, int]]:
    """The partitions of `starts` holding a committed record at or after their start (step 2): each
    is read until its first record or its end, whichever comes first."""
    found: set[tuple[str, int]] = set()
    left = set(starts)
    if not left:
        return found
    reader.assign([TopicPartition(t, p, o) for (t, p), o in starts.items()])
    deadline = time.monotonic() + _READ_STALL_S
    try:
        while left:
            m = reader.poll(1.0)
            if m is None:
                if time.monotonic() > deadline:
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"reading {len(left)} target "
                                                    f"partitions past their last commit: no record and no end "
                                                    f"in {_READ_STALL_S:g} s"))
                continue
            tp = (m.topic(), m.partition())
            if tp not in left:
                continue  # fetched before it was dropped
            if m.error() is None:
                found.add(tp)
            elif m.error().code() != KafkaError._PARTITION_EOF:
                raise KafkaException(m.error())
            left.discard(tp)
            reader.incremental_unassign([TopicPartition(*tp)])
            deadline = time.monotonic() + _READ_STALL_S
    finally:
        reader.unassign()
    return found


def last_entries(reader: Consumer, index_topic: str, index_partitions: int, keys: Iterable[tuple[str, int]],
                 since_ms: dict[tuple[str, int], int]) -> dict[tuple[str, int], IndexEntry]:
    """The last committed index entry of each (target topic, partition) in `keys`, reading each index
    partition that holds one from the earliest `since_ms` of its keys (step 3)."""
    wanted: dict[int, set[bytes]] = {}
    since: dict[int, int] = {}
    for t, p in keys:
        ip = index_partition(t, p, index_partitions)
        wanted.setdefault(ip, set()).add(entry_key(t, p))
        since[ip] = min(since.get(ip, since_ms[(t, p)]), since_ms[(t, p)])
    if not wanted:
        return {}
    starts = reader.offsets_for_times([TopicPartition(index_topic, ip, ms) for ip, ms in since.items()], timeout=30)
    # No entry at or after the time (-1): the partition's end, so nothing newer is read.
    tps = [TopicPartition(index_topic, tp.partition, tp.offset if tp.offset >= 0 else -1) for tp in starts]
    last: dict[tuple[str, int], IndexEntry] = {}
    with closing(read_to_end(reader, tps, stall_s=_READ_STALL_S)) as records:
        for m in records:
            if m.key() in wanted.get(m.partition(), ()):
                last[parse_key(m.key())] = IndexEntry.decode(m.value())
    return last


def find(cfg: ReplicatorConfig, target: AdminClient, tps: list[tuple[str, int]]) -> list[Behind]:
    """The partitions of `tps` whose copies on the target reach past the fake group's offset."""
    if not (cfg.exactly_once and cfg.translation_index and tps):
        return []
    group = kafka_clients.group_reader(cfg)
    try:
        committed = read_committed(group, tps)
    finally:
        group.close()
    req = {TopicPartition(t, p): OffsetSpec.latest() for t, p in tps}
    ends = {(tp.topic, tp.partition): fut.result().offset
            for tp, fut in target.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED,
                                               request_timeout=30).items()}
    starts = suspects(committed, ends)
    if not starts:
        return []
    # A read that finds only aborted records ends at the partition's end, which a fetch at the end
    # reports once fetch.wait.max.ms passes: 0.52 s of every restart with librdkafka's 500 ms default,
    # 0.03 s with 10 ms (four partitions, one aborted transaction each).
    reader = kafka_clients.translator_reader(cfg, fetch_wait_ms=10)
    try:
        began = time.monotonic()
        past = committed_past(reader, starts)
        if not past:
            log.info("%d target partitions hold records past their last commit, none committed (read in %.2f s)",
                     len(starts), time.monotonic() - began,
                     extra={"event": "group_behind_target_checked", "partitions": len(starts)})
            return []
        log.warning("the target holds committed records past the offsets group's position in %d partitions "
                    "(e.g. %s[%d]); reading how far from the translation index", len(past), *sorted(past)[0],
                    extra={"event": "group_behind_target", "partitions": len(past)})
        since = {}
        for tp in past:
            c = committed.get(tp)
            last_commit_s = c.metadata.committed_at if c is not None and c.metadata is not None else 0
            since[tp] = max(0, int((last_commit_s - _CLOCK_SLACK_S) * 1000))
        index_partitions = len(reader.list_topics(names.index_topic(cfg.name), timeout=30)
                               .topics[names.index_topic(cfg.name)].partitions)
        entries = last_entries(reader, names.index_topic(cfg.name), index_partitions, past, since)
    finally:
        reader.close()
    out = []
    for t, p in sorted(past):
        c = committed.get((t, p))
        offset = c.offset if c is not None else -1
        e = entries.get((t, p))
        if e is None or e.end <= offset:
            log.warning("target %s[%d] holds committed records past the offsets group's position %d that the "
                        "translation index does not account for (another producer writes there?): resuming at "
                        "the group's position", t, p, offset, extra={"event": "group_behind_target_unexplained"})
            continue
        out.append(Behind(t, p, offset, e.end))
    for b in out:
        log.warning("target %s[%d]: the offsets group says %d, but copies up to source offset %d are committed "
                    "(translation index): resuming there", b.target_topic, b.partition, b.committed, b.resume,
                    extra={"event": "group_behind_target_resumed", "seconds": round(time.monotonic() - began, 3)})
    return out
