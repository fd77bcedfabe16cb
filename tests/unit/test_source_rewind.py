"""A source consumer that goes back below a partition's copy position (seen once under source
rolling restarts, RELIABILITY.md) must not make the shard copy those records a second time."""

from __future__ import annotations

from types import SimpleNamespace

from replicator.engine.shard_copy import CopyRange, CopyStats, ShardCopier, _PartitionState
from replicator.offsets import CommitMetadata


class Message:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def error(self):
        return None

    def topic(self) -> str:
        return "a"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return f"v{self._offset}".encode()

    def key(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return 0, 1_000 + self._offset

    def headers(self) -> None:
        return None


class Producer:
    def __init__(self) -> None:
        self.values: list[bytes] = []

    def begin_transaction(self) -> None:
        pass

    # confluent-kafka's own positional order, which the copy loop relies on
    def produce(self, topic, value, key, partition, callback=None, on_delivery=None, timestamp=0,
                headers=None) -> None:
        self.values.append(value)

    def poll(self, timeout) -> int:
        return 0


def copier() -> ShardCopier:
    c = object.__new__(ShardCopier)
    c.cfg = SimpleNamespace(exactly_once=True)
    c.shard, c.provenance, c.stats = 0, None, CopyStats()
    c._txn_begun, c._txn_records, c._txn_busy, c._txn_started, c._work_began = False, 0, 0.0, None, 0.0
    return c


def test_records_below_the_copy_position_are_dropped_not_copied_again():
    c, producer = copier(), Producer()
    st = _PartitionState(CopyRange("a", "a", 0, 10), 10, True, CommitMetadata("c", "a", 1, 0), txn_begin=10)
    states = {("a", 0): st}
    c._produce_batch(producer, [Message(o) for o in (10, 11, 12)], states)
    c._produce_batch(producer, [Message(o) for o in (11, 12, 13, 14)], states)
    c._produce_batch(producer, [Message(o) for o in (13, 14, 15)], states)
    assert producer.values == [f"v{o}".encode() for o in range(10, 16)]
    assert st.next == 16 and st.records == 6 and st.gaps == []
    assert c.stats.source_rewinds == 2  # once per rewind, not once per dropped record


def test_a_forward_jump_is_still_a_gap():
    c, producer = copier(), Producer()
    st = _PartitionState(CopyRange("a", "a", 0, 10), 10, True, CommitMetadata("c", "a", 1, 0), txn_begin=10)
    c._produce_batch(producer, [Message(o) for o in (10, 14)], {("a", 0): st})
    assert producer.values == [b"v10", b"v14"] and st.gaps == [11, 14] and c.stats.source_rewinds == 0
