"""Which target partitions a start reads past the fake group's last commit (`index_floors.suspects`):
only those whose read_committed end lies past the last copied record and its commit marker."""

from __future__ import annotations

from replicator.engine.index_floors import suspects
from replicator.offsets import CommitMetadata, Committed


def at(offset: int, to: int) -> Committed:
    return Committed(offset, CommitMetadata("c", "s", 1, 0, source_offset=offset - 1, target_offset=to))


def test_a_partition_ending_at_its_last_commit_marker_is_not_read():
    assert suspects({("t", 0): at(500, 99)}, {("t", 0): 101}) == {}


def test_a_partition_with_records_past_its_last_commit_is_read_from_after_that_record():
    # A kill's aborted transaction, or a commit the group does not show: read from 100 to tell.
    assert suspects({("t", 0): at(500, 99)}, {("t", 0): 140}) == {("t", 0): 100}


def test_one_control_record_more_is_not_enough_to_read():
    # A commit marker written twice after a coordinator failover is one offset, not a record and a marker.
    assert suspects({("t", 0): at(500, 99)}, {("t", 0): 102}) == {}
    assert suspects({("t", 0): at(500, 99)}, {("t", 0): 103}) == {("t", 0): 100}


def test_records_without_any_group_offset_are_read_from_the_start():
    assert suspects({}, {("t", 0): 10, ("t", 1): 0}) == {("t", 0): 0}


def test_an_entry_without_a_target_offset_cannot_be_compared_and_is_not_read():
    assert suspects({("t", 0): Committed(500, None), ("t", 1): at(500, -1)}, {("t", 0): 900, ("t", 1): 900}) == {}
