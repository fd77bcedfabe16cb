"""verify on compacted topics: each side's log cleaner keeps only part of what was written, so the
latest record of each key is what must match (`compare_latest`)."""

from __future__ import annotations

from replicator.commands.verify import compare_latest

# (key, record) in log order; None is a tombstone.
WRITTEN = [(1, 10), (2, 20), (1, 11), (3, 30), (2, None), (1, 12)]


def test_both_sides_compacted_differently_match():
    target_cleaned = [(3, 30), (2, None), (1, 12)]
    source_cleaned = [(3, 30), (1, 12)]  # its tombstone already gone past delete.retention.ms
    assert compare_latest(source_cleaned, target_cleaned, set(), set()) == \
        {"missing": 0, "duplicates": 0, "extra": 0, "reordered": 0}
    assert compare_latest(WRITTEN, target_cleaned, set(), set())["missing"] == 0


def test_a_key_whose_latest_record_is_gone_from_the_target_is_missing():
    assert compare_latest(WRITTEN, [(3, 30), (1, 11)], set(), set()) == \
        {"missing": 1, "duplicates": 0, "extra": 1, "reordered": 0}
    assert compare_latest(WRITTEN, [(3, 30)], set(), set())["missing"] == 1


def test_a_key_absent_on_a_side_is_explained_only_by_a_later_record_on_that_side():
    # The source's cleaner removed key 4's record behind one written past the compared range.
    assert compare_latest(WRITTEN, WRITTEN + [(4, 40)], {4}, set())["extra"] == 0
    assert compare_latest(WRITTEN, WRITTEN + [(4, 40)], set(), set())["extra"] == 1
    # The target's cleaner removed key 3's behind one written after the range was fixed.
    assert compare_latest(WRITTEN, [(1, 12)], set(), {3})["missing"] == 0


def test_two_different_latest_records_are_never_explained():
    assert compare_latest([(1, 12)], [(1, 99)], {1}, {1}) == {"missing": 1, "duplicates": 0, "extra": 1,
                                                              "reordered": 0}
