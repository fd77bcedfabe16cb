"""A source consumer that goes back below a partition's copy position (seen once under source
rolling restarts, docs/design.md, "Source realities") must not make the shard copy those records a second time."""

from __future__ import annotations

from tests.unit.copier_fakes import Target, copier, partition_state, records


def test_records_below_the_copy_position_are_dropped_not_copied_again():
    target = Target()
    c = copier(target=target)
    st = partition_state("a", 0, 10, txn_begin=10)
    states = {("a", 0): st}
    c._produce_batch(records("a", 0, (10, 11, 12)), states)
    c._produce_batch(records("a", 0, (11, 12, 13, 14)), states)
    c._produce_batch(records("a", 0, (13, 14, 15)), states)
    assert target.logs[("a", 0)] == list(range(10, 16))
    assert st.next == 16 and st.records == 6 and st.gaps == []
    assert c.stats.source_rewinds == 2  # once per rewind, not once per dropped record


def test_a_forward_jump_is_still_a_gap():
    target = Target()
    c = copier(target=target)
    st = partition_state("a", 0, 10, txn_begin=10)
    c._produce_batch(records("a", 0, (10, 14)), {("a", 0): st})
    assert target.logs[("a", 0)] == [10, 14] and st.gaps == [11, 14] and c.stats.source_rewinds == 0
