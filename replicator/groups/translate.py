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
- X before the first entry (the index was enabled late, or its oldest entries expired), or no entry
  at all: the nearest known pair is above X (the first entry's first copied record, else the last
  pair the fake group's commit metadata records). An aligned read backwards from it counts the
  source's committed records in [X, pair) and checks that as many target records stand just before
  the pair's target offset, equal one by one (key, value, headers, timestamp); T is the first of
  them. Anything else, or more than MAX_ALIGNED_RECORDS to compare, is "cannot translate". Nothing
  is ever estimated.

Finding e without reading the index linearly: one target partition's entries all sit in one index
partition (`index.index_partition`), in commit order, so their `begin` grows with their index
offset. A binary search over the index partition's offsets probes the first entry of the key at or
after the middle (`IndexReader.entry_at_or_after`): each probe moves one bound, and the stretches
read by successive probes never overlap, so a deep lookup costs O(log entries) short reads when the
key's entries are spread through the partition (the usual case: 8 index partitions for all target
partitions).
"""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from collections.abc import Iterator
from contextlib import closing
from dataclasses import asdict, dataclass
from typing import Protocol

from confluent_kafka import Consumer, Message, TopicPartition

from replicator import names
from replicator.clients import kafka_clients
from replicator.clients.partition_reads import read_to_end
from replicator.config import ReplicatorConfig
from replicator.groups.index import IndexEntry, entry_key, index_partition
from replicator.offsets import read_committed
from replicator.replication_policy import PROVENANCE_HEADER, policy_for

log = logging.getLogger(__name__)
MAX_ALIGNED_RECORDS = 1_000_000
_ALIGNED_CACHE_SIZE = 10_000
_POLL_S = 1.0
_STALL_S = 60.0


class BeforeCut(Protocol):
    """Positions a reverse job's own index cannot reach (`back_translate.BackTranslator`)."""

    def before_cut(self, topic: str, partition: int, x: int) -> bool: ...

    def translate(self, topic: str, partition: int, x: int) -> tuple[int | None, str]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Translation:
    source_topic: str
    partition: int
    source_offset: int  # X
    target_topic: str
    target_offset: int | None  # T, or None when it cannot be translated
    exact: bool
    ahead: int = 0  # source offsets beyond what is replicated (X - N when X > N)
    method: str = "index"  # index | aligned-read | forward-index (back across a failover) | none
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _reader(props: dict, bootstrap: str, name: str) -> Consumer:
    """The translation's reader of one cluster; `commands.groups` (divergence) reads the source
    with it too. Index probes read a few records each: answered at once, not after a fetch wait."""
    return kafka_clients.reader_to_end(props, bootstrap, names.translator_group(name), fetch_wait_ms=10)


def _to_end(consumer: Consumer, topic: str, partition: int, start: int) -> Iterator[Message]:
    """Committed records of one partition from `start` until its end (see `read_to_end`)."""
    return read_to_end(consumer, [TopicPartition(topic, partition, start)], stall_s=_STALL_S, poll_s=_POLL_S)


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
        self.topic = names.index_topic(job_name)
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
        return self._last_entry(target_topic, partition, lambda e: e.begin <= x)

    def last_entry_landing_at_or_before(self, target_topic: str, partition: int, t: int
                                        ) -> tuple[int, IndexEntry] | None:
        """The last entry whose first copy is at target offset t or before (a reverse lookup)."""
        return self._last_entry(target_topic, partition, lambda e: e.first_target <= t)

    def _last_entry(self, target_topic: str, partition: int, at_or_before) -> tuple[int, IndexEntry] | None:
        """The last entry of the partition that `at_or_before` accepts; it accepts a prefix of the
        entries, which begin and land in increasing order."""
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
            elif at_or_before(found[1]):
                best, lo = found, found[0] + 1
            else:
                hi = mid  # entries from found on lie beyond, and none sits in [mid, found)
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
        topic = names.index_topic(cfg.name)
        md = self.target.list_topics(topic, timeout=30).topics.get(topic)
        partitions = len(md.partitions) if md is not None and md.error is None and md.partitions else 0
        self.index = IndexReader(self.target, cfg.name, partitions) if partitions else None
        # Set for a reverse job that `failback` prepared: positions below the failover cut.
        self.back: BeforeCut | None = None
        # Aligned reads back from a pair, by (target topic, partition, X, pair): the answer cannot
        # change while the pair stays the nearest, and a lagging group asks again every sync round.
        self._aligned_cache: dict[tuple[str, int, int, tuple[int, int]], int] = {}

    def close(self) -> None:
        if self.back is not None:
            self.back.close()
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
        if self.back is not None and self.back.before_cut(source_topic, partition, xe):
            t, why = self.back.translate(source_topic, partition, xe)
            return result(t, t is not None, "forward-index" if t is not None else "none", why, ahead)
        if self.index is None:
            return self._from_commit_pair(result, source_topic, target_topic, partition, xe, ahead,
                                          "no translation index on the target (translation_index off)")
        found = self.index.last_entry_beginning_at_or_before(target_topic, partition, xe)
        if found is None:
            first = self.index.first_entry(target_topic, partition)
            if first is not None:
                return self._aligned_before(result, first[1].first_pair, source_topic, target_topic, partition, xe,
                                            ahead, f"older than the translation index (its first entry starts "
                                                   f"at source offset {first[1].begin})")
            return self._from_commit_pair(result, source_topic, target_topic, partition, xe, ahead,
                                          "the translation index holds no entry for it")
        offset, e = found
        if xe <= e.end:
            return result(e.translate(xe), e.contiguous, "index",
                          "" if e.contiguous else "another producer wrote into the target partition", ahead)
        # Beyond e's run: exact at e's end unless records were copied without index entries.
        nxt = self.index.next_entry(target_topic, partition, offset)
        stop = nxt[1].first_target if nxt else None
        if not read_records(self.target, target_topic, partition, e.end_target, stop, limit=1):
            return result(e.end_target, e.contiguous, "index", "", ahead)
        return self._aligned(result, e.last_pair, source_topic, target_topic, partition, xe, ahead)

    def _from_commit_pair(self, result, source_topic: str, target_topic: str, partition: int, x: int, ahead: int,
                          why: str) -> Translation:
        """No index entry to start from: the last exact pair the fake group's commit metadata holds.
        Nothing was copied between that record and N, so X above it maps just past its copy."""
        c = read_committed(self.group, [(target_topic, partition)]).get((target_topic, partition))
        md = c.metadata if c is not None else None
        if md is None or md.source_offset < 0 or md.target_offset < 0:
            return result(None, False, "none", f"{why}, and no copied record is known to start an aligned read from",
                          ahead)
        if x > md.source_offset and x <= c.offset:
            return result(md.target_offset + 1, True, "aligned-read", "", ahead)
        return self._aligned_before(result, (md.source_offset, md.target_offset), source_topic, target_topic,
                                    partition, x, ahead, why)

    def _aligned_before(self, result, pair: tuple[int, int], source_topic: str, target_topic: str, partition: int,
                        x: int, ahead: int, why: str) -> Translation:
        """X at or below a known pair (s, t): the k committed source records in [X, s) must be the k
        committed target records just before t, one by one; then T is the first of them (t when
        k = 0). Records are compared by a digest of what a copy preserves, so a long read holds
        16 bytes per record, not the records."""
        def refuse(reason: str) -> Translation:
            return result(None, False, "none", f"source offset {x} is {why}; {reason}", ahead)

        cached = self._aligned_cache.get((target_topic, partition, x, pair))
        if cached is not None:
            return result(cached, True, "aligned-read", "", ahead)
        if self.source is None:
            return refuse("an aligned read needs the source, which is not reachable")
        s, t = pair
        low = self.source.get_watermark_offsets(TopicPartition(source_topic, partition), timeout=30)[0]
        if x < low:
            return refuse(f"the source no longer holds it (its log starts at {low})")
        src: list[bytes] = []
        anchor = None
        with closing(_to_end(self.source, source_topic, partition, x)) as records:
            for m in records:
                if m.offset() >= s:
                    anchor = m if m.offset() == s else None
                    break
                if len(src) >= MAX_ALIGNED_RECORDS:
                    return refuse(f"an aligned read would compare over {MAX_ALIGNED_RECORDS} records")
                src.append(_digest(m))
        # The consumer resets to the log start when X was deleted meanwhile: counted short, refused.
        if self.source.get_watermark_offsets(TopicPartition(source_topic, partition), timeout=30)[0] > x:
            return refuse("the source deleted it while it was being read")
        if anchor is None:
            return refuse(f"the source no longer holds the copied record at offset {s} to align on")
        k = len(src)
        tail = self._target_tail(target_topic, partition, t, k + 1)
        if tail is None or tail[-1][0] != t:
            return refuse(f"the target no longer holds the copy at offset {t} to align on")
        if tail[-1][1] != _digest(anchor, self.cfg.provenance_header):
            return refuse(f"source offset {s} and target offset {t} differ: the known pair does not hold")
        if len(tail) < k + 1:
            return refuse(f"the source holds {k} records in [{x}, {s}), the target only {len(tail) - 1} before {t}")
        for (offset, got), want in zip(tail[-k - 1:-1], src, strict=True):
            if got != want:
                return refuse(f"target offset {offset} is not a copy of the source record the aligned read "
                              f"pairs it with: the logs are not aligned")
        if len(self._aligned_cache) >= _ALIGNED_CACHE_SIZE:
            self._aligned_cache.clear()
        self._aligned_cache[(target_topic, partition, x, pair)] = tail[-k - 1][0]
        return result(tail[-k - 1][0], True, "aligned-read", "", ahead)

    def _target_tail(self, topic: str, partition: int, t: int, n: int) -> list[tuple[int, bytes]] | None:
        """The last `n` committed target records up to offset t (inclusive) as (offset, digest), or
        fewer when the log holds fewer; None when there is no record at t. Reads back in widening
        windows: markers and aborted records occupy offsets too, so n records may span more."""
        low = self.target.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[0]
        span = n + 16
        while True:
            start = max(low, t + 1 - span)
            tail: deque[tuple[int, bytes]] = deque(maxlen=n)
            with closing(_to_end(self.target, topic, partition, start)) as records:
                for m in records:
                    if m.offset() > t:
                        break
                    tail.append((m.offset(), _digest(m, self.cfg.provenance_header)))
            if not tail or tail[-1][0] != t:
                return None
            if len(tail) >= n or start <= low:
                return list(tail)
            span *= 2

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


def _digest(m, stamped: bool = False) -> bytes:
    return hashlib.blake2b(repr(_view(m, stamped)).encode(), digest_size=16).digest()


def _view(m, stamped: bool = False) -> tuple:
    """What a copy preserves; a copy made with provenance_header on carries one more header, last."""
    headers = list(m.headers() or ())
    if stamped and headers and headers[-1][0] == PROVENANCE_HEADER:
        headers.pop()
    return m.key(), m.value(), tuple(headers), m.timestamp()[1]
