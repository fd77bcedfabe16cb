"""One source partition's copy: its planned range, and its state in a shard task's running attempt."""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import KafkaError

from replicator.offsets import CommitMetadata

OFFSET_BEGINNING = -2


@dataclass(frozen=True)
class CopyRange:
    source_topic: str
    target_topic: str
    partition: int
    start: int  # used only where the fake group holds nothing yet; -1: the log start
    end: int | None = None  # exclusive (a last stable offset of the source); None: whatever arrives


@dataclass
class PartitionCopy:
    r: CopyRange
    next: int  # next source offset to copy (or OFFSET_BEGINNING until the first record)
    promised: bool  # the fake group holds an offset (at start or since a commit): a gap below it is data loss
    meta: CommitMetadata
    done: bool = False
    dirty: bool = False  # advanced in the open transaction
    refresh: bool = False  # committed only to keep an idle partition's offset from expiring
    records: int = 0
    bytes: int = 0
    first_ts: int = -1
    last_ts: int = -1
    pair: tuple[int, int] | None = None  # last (source offset, target offset) acknowledged
    # For the translation index, per open transaction: where the partition stood when it began, the
    # (source, target) offsets of its first copied record, and the source offsets it skipped.
    txn_begin: int = -1
    first_pair: tuple[int, int] | None = None
    first_copied: int = -1  # source offset of the open transaction's first copied record
    gaps: list[int] = field(default_factory=list)  # flat [start, end, start, end, ...]
    delivery_error: KafkaError | None = None  # the target refused a record of the open transaction
    rewound_from: int = -1  # the copy position when the consumer last went back below it (logged once)
    # The source's end (last stable offset) at the partition's last end-of-partition event, -1 when
    # unsure. A record arriving after it moves `next` past it.
    end_seen: int = -1
    # Where the partition's next copied record lands on the target, when this attempt knows it (a
    # transactional copy only: see `landing`); -1 when unknown.
    target_next: int = -1

    @property
    def key(self) -> str:
        """How the driver names the partition ("topic|partition")."""
        return f"{self.r.source_topic}|{self.r.partition}"

    def skip_to(self, offset: int) -> None:
        """Moves the position over source offsets that are not copied (markers, aborted or compacted
        records, a data-loss jump, the end of the range): the index records them as a gap."""
        if 0 <= self.next < offset:
            self.gaps += (self.next, offset)
        self.next = offset

    def beyond(self, offset: int) -> bool:
        return self.r.end is not None and offset >= self.r.end

    def settled(self) -> bool:
        """The group holds the source's end as the partition's last fetch saw it (an end-of-partition
        event, nothing arrived since, nothing of it in the open transaction)."""
        return self.end_seen >= 0 and self.next == self.end_seen and self.promised and not self.dirty

    def landing(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """The (source, target) offset pairs of the open transaction's first and last copied records,
        known before their delivery reports when `target_next` is; else None.

        One shard writes a target partition, so its records land contiguously from where its last
        transaction ended: the last record's offset + 2, past that transaction's commit marker."""
        if self.target_next < 0 or not self.records:
            return None
        last, gaps, i = self.next, self.gaps, len(self.gaps)
        while i and gaps[i - 1] == last:  # skipped source offsets after the last copied record
            last = gaps[i - 2]
            i -= 2
        return (self.first_copied, self.target_next), (last - 1, self.target_next + self.records - 1)

    def committed(self) -> None:
        """Its transaction committed: the next one starts from here, and the fake group holds its
        offset now, so a later gap is data loss."""
        self.dirty, self.refresh, self.records, self.bytes, self.first_ts, self.last_ts = False, False, 0, 0, -1, -1
        self.txn_begin, self.first_pair, self.gaps, self.delivery_error = self.next, None, [], None
        self.first_copied = -1
        self.promised = True


class PairReport:
    """A delivery report that records the exact (source offset, target offset) pair of its record."""

    __slots__ = ("st", "source_offset", "first")

    def __init__(self, st: PartitionCopy, source_offset: int, first: bool = False) -> None:
        self.st, self.source_offset, self.first = st, source_offset, first

    def __call__(self, err, msg) -> None:
        if err is not None:
            if self.st.delivery_error is None:
                self.st.delivery_error = err
            return
        if self.st.pair is None or self.source_offset > self.st.pair[0]:
            self.st.pair = (self.source_offset, msg.offset())
        if self.first:
            self.st.first_pair = (self.source_offset, msg.offset())
