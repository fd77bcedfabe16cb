"""Exact translation of a source offset to the target offset a consumer must resume at.

For source offset X of a partition whose fake-group position (next source offset to copy) is N:
- X > N: the data from N on is not copied yet; X translates as N does and `ahead` = X - N says how
  many source offsets that group is ahead of the replica (its data not yet replicated).
- otherwise the index entry e with the largest `begin` <= X gives it: T = e.translate(X) when X is
  inside e's run (exact, see `index.IndexEntry`); beyond its end no record was copied before the
  next entry, which the target's own log confirms (no committed record between e's commit marker
  and the next entry's first record), so T = e's end. When the log shows records the index does not
  describe (the index was off for a while), an aligned read of both logs from e's last copied record
  counts the records up to X and checks each copy against its source: exact or refused.
- X before the first entry (the index was enabled late, or expired): the aligned read needs a known
  pair below X, which does not exist: "cannot translate". Nothing is ever estimated.

Finding e without reading the index linearly: one target partition's entries all sit in one index
partition (`index.index_partition`), in commit order, so their `begin` grows with their index
offset. A binary search over the index partition's offsets probes the first entry of the key at or
after the middle (`IndexReader.entry_at_or_after`): each probe moves one bound, and the stretches
read by successive probes never overlap, so a deep lookup costs O(log entries) short reads when the
key's entries are spread through the partition (the usual case: 8 index partitions for all target
partitions).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from replicator import kafka_clients
from replicator.config import ReplicatorConfig
from replicator.groups.index import IndexEntry, entry_key, index_partition, index_topic
from replicator.offsets import read_committed
from replicator.replication_policy import PROVENANCE_HEADER, policy_for

log = logging.getLogger(__name__)
MAX_ALIGNED_RECORDS = 1_000_000
_POLL_S = 1.0
_STALL_S = 60.0


@dataclass(frozen=True)
class Translation:
    source_topic: str
    partition: int
    source_offset: int  # X
    target_topic: str
    target_offset: int | None  # T, or None when it cannot be translated
    exact: bool
    ahead: int = 0  # source offsets beyond what is replicated (X - N when X > N)
    method: str = "index"  # index | aligned-read | none
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _reader(props: dict, bootstrap: str, name: str) -> Consumer:
    return Consumer(kafka_clients.with_logging({"fetch.wait.max.ms": 10, **props, "bootstrap.servers": bootstrap,
                                                "group.id": f"{name}.translator", "enable.auto.commit": False,
                                                "isolation.level": "read_committed", "enable.partition.eof": True,
                                                "auto.offset.reset": "earliest"}))


def _to_end(consumer: Consumer, topic: str, partition: int, start: int) -> Iterator[Message]:
    """Committed records of one partition from `start` until its end, for a caller that may stop
    early: close the generator (`contextlib.closing`) to unassign at once."""
    consumer.assign([TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + _STALL_S
    try:
        while True:
            msgs = consumer.consume(500, _POLL_S)
            if not msgs and time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic}[{partition}] from {start}: no record and no end in {_STALL_S}s")
            deadline = time.monotonic() + _STALL_S if msgs else deadline
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    raise RuntimeError(f"reading {topic}[{partition}] from {start}: {err.str()}")
                yield m
    finally:
        consumer.unassign()


def read_records(consumer: Consumer, topic: str, partition: int, start: int, stop: int | None = None,
                 limit: int | None = None) -> list:
    """Committed records of one partition from `start`, up to offset `stop` (exclusive), `limit`
    records, or the partition's end, whichever comes first."""
    out: list = []
    with closing(_to_end(consumer, topic, partition, start)) as records:
        for m in records:
            if stop is not None and m.offset() >= stop:
                break
            out.append(m)
            if limit is not None and len(out) >= limit:
                break
    return out


class IndexReader:
    """Reads a target partition's index entries by probing the index partition that holds them."""

    def __init__(self, consumer: Consumer, job_name: str, partitions: int) -> None:
        self.consumer = consumer
        self.topic = index_topic(job_name)
        self.partitions = partitions
        self.probes = 0
        self.records_read = 0

    def bounds(self, ip: int) -> tuple[int, int]:
        return self.consumer.get_watermark_offsets(TopicPartition(self.topic, ip), timeout=30)

    def entry_at_or_after(self, key: bytes, ip: int, start: int, limit: int) -> tuple[int, IndexEntry] | None:
        """The first committed entry of `key` at index offset >= start and < limit."""
        if start >= limit:
            return None
        self.probes += 1
        with closing(_to_end(self.consumer, self.topic, ip, start)) as records:
            for m in records:
                if m.offset() >= limit:
                    return None
                self.records_read += 1
                if m.key() == key:
                    return m.offset(), IndexEntry.decode(m.value())
        return None

    def last_entry_beginning_at_or_before(self, target_topic: str, partition: int, x: int
                                          ) -> tuple[int, IndexEntry] | None:
        key = entry_key(target_topic, partition)
        ip = index_partition(target_topic, partition, self.partitions)
        lo, hi = self.bounds(ip)
        best = None
        # Invariant: the wanted entry is `best` or lies in [lo, hi).
        while lo < hi:
            mid = (lo + hi) // 2
            found = self.entry_at_or_after(key, ip, mid, hi)
            if found is None:
                hi = mid  # no entry of the key in [mid, hi)
            elif found[1].begin <= x:
                best, lo = found, found[0] + 1
            else:
                hi = mid  # entries from found on begin after x, and none sits in [mid, found)
        return best

    def next_entry(self, target_topic: str, partition: int, after: int) -> tuple[int, IndexEntry] | None:
        key = entry_key(target_topic, partition)
        ip = index_partition(target_topic, partition, self.partitions)
        return self.entry_at_or_after(key, ip, after + 1, self.bounds(ip)[1])

    def first_entry(self, target_topic: str, partition: int) -> tuple[int, IndexEntry] | None:
        key = entry_key(target_topic, partition)
        ip = index_partition(target_topic, partition, self.partitions)
        lo, hi = self.bounds(ip)
        return self.entry_at_or_after(key, ip, lo, hi)


def last_copied(e: IndexEntry) -> tuple[int, int]:
    """(source, target) offsets of an entry's last copied record."""
    source = e.gaps[-1][0] - 1 if e.gaps and e.gaps[-1][1] == e.end else e.end - 1
    return source, e.end_target - 1


class Translator:
    """Translates source positions of one job's replicated partitions. Reads the target (index,
    fake group, data); reads the source only for an aligned read."""

    def __init__(self, cfg: ReplicatorConfig, source_reachable: bool = True) -> None:
        self.cfg = cfg
        self.policy = policy_for(cfg)
        self.target = _reader(cfg.client_properties("target"), cfg.target_bootstrap_servers, cfg.name)
        self.source = (_reader(cfg.client_properties("source"), cfg.source_bootstrap_servers, cfg.name)
                       if source_reachable else None)
        self.group = kafka_clients.group_reader(cfg)
        topic = index_topic(cfg.name)
        md = self.target.list_topics(topic, timeout=30).topics.get(topic)
        partitions = len(md.partitions) if md is not None and md.error is None and md.partitions else 0
        self.index = IndexReader(self.target, cfg.name, partitions) if partitions else None

    def close(self) -> None:
        for c in (self.target, self.source, self.group):
            if c is not None:
                c.close()

    def replicated_position(self, target_topic: str, partition: int) -> int | None:
        """N: the next source offset to copy (stable), or None when nothing was copied."""
        c = read_committed(self.group, [(target_topic, partition)]).get((target_topic, partition))
        return c.offset if c is not None and c.offset >= 0 else None

    def translate(self, source_topic: str, partition: int, x: int, replicated: int | None = None) -> Translation:
        target_topic = self.policy.target_topic(source_topic)

        def result(t: int | None, exact: bool, method: str, reason: str = "", ahead: int = 0) -> Translation:
            return Translation(source_topic, partition, x, target_topic, t, exact, ahead, method, reason)

        n = replicated if replicated is not None else self.replicated_position(target_topic, partition)
        if n is None:
            return result(None, False, "none", "nothing of this partition is replicated yet")
        ahead = max(0, x - n)
        xe = min(x, n)
        if self.index is None:
            return result(None, False, "none", "no translation index on the target (translation_index off)", ahead)
        found = self.index.last_entry_beginning_at_or_before(target_topic, partition, xe)
        if found is None:
            first = self.index.first_entry(target_topic, partition)
            where = f"its first entry starts at source offset {first[1].begin}" if first else "it holds no entry"
            return result(None, False, "none", f"source offset {xe} is older than the translation index "
                                               f"({where}: enabled late, expired, or copied from mid-log)", ahead)
        offset, e = found
        if xe <= e.end:
            return result(e.translate(xe), e.contiguous, "index",
                          "" if e.contiguous else "another producer wrote into the target partition", ahead)
        # Beyond e's run: exact at e's end unless records were copied without index entries.
        nxt = self.index.next_entry(target_topic, partition, offset)
        stop = nxt[1].first_target if nxt else None
        if not read_records(self.target, target_topic, partition, e.end_target, stop, limit=1):
            return result(e.end_target, e.contiguous, "index", "", ahead)
        return self._aligned(result, last_copied(e), source_topic, target_topic, partition, xe, ahead)

    def _aligned(self, result, pair: tuple[int, int], source_topic: str, target_topic: str, partition: int,
                 x: int, ahead: int) -> Translation:
        """Counts the source's committed records in [pair source, x) and walks as many on the target
        from the pair's target offset, checking each copy; T is the next target record."""
        if self.source is None:
            return result(None, False, "none", "the index does not cover this offset and the source is not "
                                               "reachable for an aligned read", ahead)
        s0, t0 = pair
        src = read_records(self.source, source_topic, partition, s0, x, limit=MAX_ALIGNED_RECORDS + 1)
        if len(src) > MAX_ALIGNED_RECORDS:
            return result(None, False, "none", f"an aligned read would compare over {MAX_ALIGNED_RECORDS} records",
                          ahead)
        if not src or src[0].offset() != s0:
            return result(None, False, "none", f"the source no longer holds the anchor record at offset {s0}",
                          ahead)
        dst = read_records(self.target, target_topic, partition, t0, limit=len(src) + 1)
        if len(dst) < len(src) or dst[0].offset() != t0:
            return result(None, False, "none", "the target holds fewer records than the source from the anchor",
                          ahead)
        stamped = self.cfg.provenance_header
        for a, b in zip(src, dst, strict=False):
            if _view(a) != _view(b, stamped):
                return result(None, False, "none", f"source offset {a.offset()} and target offset {b.offset()} "
                                                   f"differ: the logs are not aligned", ahead)
        t = dst[len(src)].offset() if len(dst) > len(src) else dst[-1].offset() + 1
        return result(t, True, "aligned-read", "", ahead)


def _view(m, stamped: bool = False) -> tuple:
    """What a copy preserves; a copy made with provenance_header on carries one more header, last."""
    headers = list(m.headers() or ())
    if stamped and headers and headers[-1][0] == PROVENANCE_HEADER:
        headers.pop()
    return m.key(), m.value(), tuple(headers), m.timestamp()[1]
