"""The translation index entry: encoding round trips, self-checks, and exact translation inside it."""

from __future__ import annotations

import random

import pytest

from replicator.groups.index import (
    INDEX_PARTITIONS,
    IndexEntry,
    entry_from_copy,
    entry_key,
    index_partition,
    parse_key,
)
from replicator.groups.index_topic import wanted_retention_ms
from replicator.names import index_topic


def _simulate(begin: int, end: int, copied: list[int], first_target: int) -> tuple[IndexEntry, dict[int, int]]:
    """What the copier does: walk the copied source offsets in order, jump over the others."""
    gaps, pos = [], begin
    for o in copied:
        if o != pos:
            gaps += (pos, o)
        pos = o + 1
    if pos != end:
        gaps += (pos, end)
    placed = {o: first_target + i for i, o in enumerate(copied)}
    entry = entry_from_copy(begin, end, (copied[0], first_target), (copied[-1], placed[copied[-1]]),
                            len(copied), gaps)
    assert entry is not None
    return entry, placed


def _expected(x: int, copied: list[int], placed: dict[int, int], end_target: int) -> int:
    """The target offset a consumer must resume at: the first copied record at or after x."""
    return next((placed[o] for o in copied if o >= x), end_target)


@pytest.mark.parametrize("seed", range(40))
def test_every_source_offset_of_an_entry_translates_exactly(seed):
    rnd = random.Random(seed)
    begin = rnd.choice([0, 7, 2**31 + 5, 2**40])
    length = rnd.randint(1, 300)
    # Aborted runs, single markers and compaction holes: any subset of the run may be missing.
    copied = sorted(rnd.sample(range(begin, begin + length), rnd.randint(1, length)))
    entry, placed = _simulate(begin, begin + length, copied, rnd.randint(0, 10**9))
    entry.check()
    decoded = IndexEntry.decode(entry.encode())
    assert decoded == entry
    for x in range(begin, begin + length + 1):
        assert decoded.translate(x) == _expected(x, copied, placed, entry.end_target), x


@pytest.mark.parametrize("seed", range(40))
def test_every_target_offset_of_an_entry_translates_back_to_the_record_copied_there(seed):
    """`failback`'s reverse lookup: the source offset whose copy sits at t, then the entry's end from
    its commit marker on; translating that forward gives t back."""
    rnd = random.Random(seed)
    begin, length = rnd.choice([0, 7, 2**40]), rnd.randint(1, 300)
    copied = sorted(rnd.sample(range(begin, begin + length), rnd.randint(1, length)))
    entry, placed = _simulate(begin, begin + length, copied, rnd.randint(0, 10**9))
    back = {t: o for o, t in placed.items()}
    for t in range(entry.first_target, entry.end_target + 3):
        y = entry.source_of(t)
        assert y == back.get(t, entry.end), t
        assert entry.translate(y) == min(t, entry.end_target)
    with pytest.raises(ValueError):
        entry.source_of(entry.first_target - 1)


def test_entry_without_gaps_is_small():
    entry, _ = _simulate(1_000_000, 1_200_000, list(range(1_000_000, 1_200_000)), 3_000_000)
    assert entry.gaps == ()
    assert len(entry.encode()) <= 16


def test_leading_and_trailing_gaps_are_kept():
    # Resumed at 10; 10-11 were the marker and an aborted record; 15-19 markers up to the planned end.
    entry, _ = _simulate(10, 20, [12, 13, 14], 100)
    assert entry.gaps == ((10, 12), (15, 20))
    assert [entry.translate(x) for x in (10, 11, 12, 14, 15, 19, 20)] == [100, 100, 100, 102, 103, 103, 103]


@pytest.mark.parametrize("seed", range(20))
def test_first_and_last_pairs_are_the_first_and_last_copied_records(seed):
    rnd = random.Random(seed)
    begin, length = rnd.randint(0, 1000), rnd.randint(1, 60)
    copied = sorted(rnd.sample(range(begin, begin + length), rnd.randint(1, length)))
    entry, placed = _simulate(begin, begin + length, copied, rnd.randint(0, 10**6))
    assert entry.first_pair == (copied[0], placed[copied[0]])
    assert entry.last_pair == (copied[-1], placed[copied[-1]])


def test_pairs_walk_over_gaps_that_touch():
    # The copier can record a run as two touching gaps (end of data, then the planned end).
    entry = entry_from_copy(10, 30, (13, 7), (20, 14), 8, [10, 12, 12, 13, 21, 25, 25, 30])
    assert entry is not None
    assert entry.first_pair == (13, 7) and entry.last_pair == (20, 14)


def test_a_partition_started_at_its_log_start_begins_at_its_first_record():
    entry = entry_from_copy(-2, 9, (5, 0), (8, 3), 4, [])
    assert entry is not None and entry.begin == 5 and entry.translate(5) == 0


def test_no_entry_without_copied_records():
    assert entry_from_copy(10, 20, None, None, 0, [10, 20]) is None


def test_records_landing_on_scattered_target_offsets_are_flagged():
    entry = entry_from_copy(0, 3, (0, 50), (2, 53), 3, [])
    assert entry is not None and not entry.contiguous
    assert not IndexEntry.decode(entry.encode()).contiguous


@pytest.mark.parametrize("bad", [
    IndexEntry(0, 10, 0, 9, ()),  # counts one record more than the run leaves
    IndexEntry(0, 10, 0, 8, ((5, 6), (4, 5))),  # gaps out of order
    IndexEntry(0, 10, 0, 5, ((5, 11),)),  # gap past the end
])
def test_inconsistent_entries_are_refused(bad):
    with pytest.raises(ValueError):
        bad.check()


def test_corrupt_values_are_refused():
    data = IndexEntry(5, 10, 0, 5).encode()
    with pytest.raises(ValueError):
        IndexEntry.decode(data[:-1])
    with pytest.raises(ValueError):
        IndexEntry.decode(b"\x09" + data[1:])
    with pytest.raises(ValueError):
        IndexEntry(5, 10, 0, 5).translate(11)


def test_keys_and_partitions_are_stable():
    assert parse_key(entry_key("orders.eu-1", 17)) == ("orders.eu-1", 17)
    assert index_topic("job-a") == "__replicator.job-a.xlate"
    parts = {index_partition("orders", p) for p in range(64)}
    assert parts <= set(range(INDEX_PARTITIONS)) and len(parts) > 1
    # A key's partition must never change between runs (entries of a partition stay in order).
    assert index_partition("orders", 3) == index_partition("orders", 3)


@pytest.mark.parametrize("configs, wanted", [
    ({}, 7 * 24 * 3600 * 1000),
    ({"a": {"retention.ms": "1000"}, "b": {"retention.ms": str(30 * 86_400_000)}}, 30 * 86_400_000),
    ({"a": {"retention.ms": "-1"}}, -1),
    ({"a": {"cleanup.policy": "compact", "retention.ms": "1000"}}, -1),
    ({"a": {"cleanup.policy": "compact,delete", "retention.ms": str(40 * 86_400_000)}}, 40 * 86_400_000),
])
def test_index_retention_is_at_least_the_replicated_topics(configs, wanted):
    assert wanted_retention_ms(configs) == wanted
