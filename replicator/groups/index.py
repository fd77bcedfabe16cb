"""The translation index: one entry per committed copy transaction and target partition it advanced,
written by the shard inside that transaction, so it is visible exactly when the data is.

An entry covers a contiguous run of source offsets [begin, end) of one partition: the transaction
copied `count` of them, in order, to target offsets first_target .. first_target+count-1 (one shard
writes a target partition, and a transaction's records land contiguously). Every other source offset
of the run is a *gap* (aborted records, transaction markers, offsets removed by compaction, records
the provenance filter dropped, a data-loss skip), stored as (start, end) runs. With that, any source
offset X in [begin, end) maps exactly: T = first_target + (offsets of the run below X that were
copied), which is where a consumer resuming at T reads next exactly the record a source consumer at X
reads next (the first copied record at or after X; past the last one, our commit marker's offset,
which is what a consumer that read the last record commits).

Value layout (unsigned varints after a version byte and a flags byte):
    1, flags, begin, end-begin, first_target, count, #gaps, then per gap (start-prev_end, length)
where prev_end starts at `begin`. Key: b"<target topic>:<partition>" (topic names cannot hold ':').
Entries of one target partition always go to the same index partition (`index_partition`), in
commit order: a later transaction of that partition starts only after the earlier one committed.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from replicator.names import index_topic  # noqa: F401 - `engine.shard_copy` names the topic through this module

VERSION = 1
FLAG_NOT_CONTIGUOUS = 1  # the target offsets did not follow one another: someone else wrote there
# Fixed at creation and never grown: the partition of a key must not change while entries exist.
INDEX_PARTITIONS = 8


def entry_key(target_topic: str, partition: int) -> bytes:
    return f"{target_topic}:{partition}".encode()


def parse_key(key: bytes) -> tuple[str, int]:
    topic, _, p = key.decode().rpartition(":")
    return topic, int(p)


def index_partition(target_topic: str, partition: int, partitions: int = INDEX_PARTITIONS) -> int:
    return zlib.crc32(entry_key(target_topic, partition)) % partitions


@dataclass(frozen=True)
class IndexEntry:
    begin: int  # first source offset covered (the partition's committed position before the transaction)
    end: int  # exclusive: the committed position after it (the fake group's value)
    first_target: int  # target offset of the first copied record
    count: int  # records copied
    gaps: tuple[tuple[int, int], ...] = ()  # source offset runs [start, end) inside [begin, end) not copied
    contiguous: bool = True

    @property
    def end_target(self) -> int:
        """Just past the last copied record: the offset of this transaction's commit marker."""
        return self.first_target + self.count

    @property
    def first_pair(self) -> tuple[int, int]:
        """(source, target) offsets of the first copied record (gaps may touch: walk over them)."""
        source = self.begin
        for start, stop in self.gaps:
            if start != source:
                break
            source = stop
        return source, self.first_target

    @property
    def last_pair(self) -> tuple[int, int]:
        """(source, target) offsets of the last copied record."""
        source = self.end
        for start, stop in reversed(self.gaps):
            if stop != source:
                break
            source = start
        return source - 1, self.end_target - 1

    def covers(self, source_offset: int) -> bool:
        return self.begin <= source_offset < self.end

    def translate(self, source_offset: int) -> int:
        """The exact target offset for a source offset in [begin, end]."""
        if not self.begin <= source_offset <= self.end:
            raise ValueError(f"source offset {source_offset} outside [{self.begin}, {self.end}]")
        skipped = 0
        for start, stop in self.gaps:
            if start >= source_offset:
                break
            skipped += min(stop, source_offset) - start
        return self.first_target + (source_offset - self.begin - skipped)

    def source_of(self, target_offset: int) -> int:
        """The inverse of `translate`: the source offset whose copy sits at `target_offset`, for
        first_target <= target_offset < end_target; `end` from end_target on (the commit marker,
        and up to the next entry nothing was copied). A consumer there on the source reads next the
        record a consumer at `target_offset` on the target reads next."""
        if target_offset < self.first_target:
            raise ValueError(f"target offset {target_offset} before the entry's first copy {self.first_target}")
        if target_offset >= self.end_target:
            return self.end
        left = target_offset - self.first_target  # copied offsets to pass
        source = self.begin
        for start, stop in self.gaps:
            if left < start - source:
                break
            left -= start - source
            source = stop
        return source + left

    def check(self) -> None:
        """Raises ValueError unless the entry is self-consistent (gaps ordered, inside, and leaving
        exactly `count` copied offsets)."""
        prev = self.begin
        for start, stop in self.gaps:
            if not prev <= start < stop <= self.end:
                raise ValueError(f"gap [{start}, {stop}) out of order or outside [{self.begin}, {self.end})")
            prev = stop
        copied = self.end - self.begin - sum(stop - start for start, stop in self.gaps)
        if copied != self.count or self.count < 0 or self.first_target < 0:
            raise ValueError(f"entry covers {copied} copied offsets but counts {self.count}")

    def encode(self) -> bytes:
        out = bytearray((VERSION, 0 if self.contiguous else FLAG_NOT_CONTIGUOUS))
        for v in (self.begin, self.end - self.begin, self.first_target, self.count, len(self.gaps)):
            _put(out, v)
        prev = self.begin
        for start, stop in self.gaps:
            _put(out, start - prev)
            _put(out, stop - start)
            prev = stop
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> IndexEntry:
        if not data or data[0] != VERSION:
            raise ValueError(f"unknown index entry version {data[0] if data else None}")
        flags, pos = data[1], 2
        begin, pos = _get(data, pos)
        length, pos = _get(data, pos)
        first_target, pos = _get(data, pos)
        count, pos = _get(data, pos)
        ngaps, pos = _get(data, pos)
        gaps, prev = [], begin
        for _ in range(ngaps):
            delta, pos = _get(data, pos)
            size, pos = _get(data, pos)
            gaps.append((prev + delta, prev + delta + size))
            prev += delta + size
        return cls(begin, begin + length, first_target, count, tuple(gaps), not flags & FLAG_NOT_CONTIGUOUS)


def _put(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError(f"index values are non-negative, got {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _get(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated index entry")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def entry_from_copy(begin: int, end: int, first: tuple[int, int] | None, last: tuple[int, int] | None,
                    count: int, flat_gaps: list[int]) -> IndexEntry | None:
    """The entry of one partition's transaction, from what the copier saw: the resume position
    `begin` (negative when the partition started at its log start), the committed position `end`,
    the (source, target) offsets of the first and last copied records (delivery reports), the number
    copied and the jumps of its source position (start, end, start, end, ...). None when the
    transaction copied no record of the partition: source offsets without an entry map to the end
    of the entry before them, which is exact since nothing was copied in between."""
    if count <= 0 or first is None or last is None:
        return None
    begin = begin if begin >= 0 else first[0]
    gaps = [(flat_gaps[i], flat_gaps[i + 1]) for i in range(0, len(flat_gaps), 2)
            if flat_gaps[i] >= begin and flat_gaps[i + 1] > flat_gaps[i]]
    contiguous = last[1] - first[1] + 1 == count
    return IndexEntry(begin, end, first[1], count, tuple(gaps), contiguous)
