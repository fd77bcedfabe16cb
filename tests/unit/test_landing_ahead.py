"""Index entries and offsets sent before the records are acknowledged: a transactional copy that
committed a partition before in this attempt knows where its next records land (one writer per
target partition, one commit marker after each transaction), sends the index entries and offsets at
once, and checks the delivery reports against the prediction before the commit, where commits cross
a link. A landing elsewhere (another producer writes there) aborts the transaction and turns the
prediction off."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException

from replicator.config import ReplicatorConfig
from replicator.engine.partition_copy import PartitionCopy
from replicator.groups.index import IndexEntry, index_topic
from replicator.offsets import CommitMetadata
from tests.unit.copier_fakes import Clients, Target, copier, partition_state, records

MARKER = -1


class TxnTarget(Target):
    """A Target whose commit writes one marker to every partition of the transaction, and which logs
    the order of what the copier sends."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []
        self.entries: list[IndexEntry] = []
        self.offsets: list = []
        self._touched: set = set()

    def produce(self, topic, value, key, partition, callback=None, on_delivery=None, timestamp=0,
                headers=None) -> None:
        self._touched.add((topic, partition))
        if topic == index_topic("job"):
            self.events.append("index")
            self.entries.append(IndexEntry.decode(value))
            self.logs.setdefault((topic, partition), []).append(0)
            return
        super().produce(topic, value, key, partition, callback, on_delivery, timestamp, headers)

    def flush(self, timeout) -> int:
        self.events.append("flush")
        self.poll(0)
        return 0

    def send_offsets_to_transaction(self, offsets, group, timeout) -> None:
        self.events.append("offsets")
        self.offsets = offsets

    def commit_transaction(self, timeout) -> None:
        self.events.append("commit")
        for tp in self._touched:
            self.logs[tp].append(MARKER)
        self._touched.clear()


class Group:
    def consumer_group_metadata(self) -> str:
        return "g"

    def list_topics(self, topic, timeout):  # the target cluster's id, for the commit metadata
        return type("Metadata", (), {"cluster_id": "target"})()


def shard(link: bool = True, **cfg) -> tuple:
    """A copier whose target is a link away (`link`), or near: these fake commits take no time."""
    target = TxnTarget()
    c = copier(ReplicatorConfig(name="job", **cfg), target=target, clients=Clients(group=Group()))
    c._producer.crosses_a_link = link
    c._producer._ended = lambda seconds: None
    states = {("s", 0): partition_state("s", 0, 0, None, "t"), ("s", 1): partition_state("s", 1, 0, None, "t")}
    return c, target, states


def transaction(c, target: TxnTarget, states: dict, *batches) -> list[str]:
    target.events.clear()
    for batch in batches:
        c._produce_batch(batch, states)
    c._commit(states)
    return list(target.events)


def committed_pairs(target: TxnTarget) -> list[tuple[int, int]]:
    metas = [CommitMetadata.decode(o.metadata) for o in target.offsets]
    return [(m.source_offset, m.target_offset) for m in metas]


def test_the_landing_is_the_first_and_last_copied_records_past_the_last_commit_marker():
    st = partition_state("s", 0, 10, None, "t")
    st.txn_begin, st.target_next = 10, 7
    assert st.landing() is None  # nothing copied yet
    st.skip_to(12)  # a marker and an aborted record before the first copied one
    st.first_copied, st.next, st.records = 12, 16, 4
    st.skip_to(18)
    st.skip_to(20)  # skipped after the last copied record: not part of the pair
    assert st.landing() == ((12, 7), (15, 10))
    assert PartitionCopy(st.r, 10, True, st.meta, records=3).landing() is None  # target offset unknown


def test_a_transaction_after_a_commit_sends_its_index_entries_and_offsets_before_the_records_are_acknowledged():
    c, target, states = shard()
    # The attempt's first transaction: nothing is known, the records are acknowledged first.
    assert transaction(c, target, states, records("s", 0, range(0, 5)), records("s", 1, range(0, 3))) == [
        "flush", "index", "index", "offsets", "flush", "commit"]
    # Then the landing is known: entries and offsets go out with the records in flight.
    events = transaction(c, target, states, records("s", 0, [5, 6, 8]), records("s", 1, [3]))
    assert events == ["index", "index", "offsets", "flush", "commit"]
    assert target.logs[("t", 0)] == [0, 1, 2, 3, 4, MARKER, 5, 6, 8, MARKER]
    # The entries and metadata name where the records did land, as after a flush.
    first, second = target.entries[2:]
    assert (first.begin, first.end, first.first_target, first.count, first.gaps) == (5, 9, 6, 3, ((7, 8),))
    assert first.contiguous and (second.first_target, second.count) == (4, 1)
    assert committed_pairs(target) == [(8, 8), (3, 4)]
    assert all(first.translate(s) == target.logs[("t", 0)].index(s) for s in (5, 6, 8))


def test_a_partition_first_copied_in_this_transaction_waits_for_its_acknowledgement():
    c, target, states = shard()
    transaction(c, target, states, records("s", 0, range(0, 5)))
    assert transaction(c, target, states, records("s", 0, [5]), records("s", 1, [0])) == [
        "flush", "index", "index", "offsets", "flush", "commit"]
    assert transaction(c, target, states, records("s", 0, [6]), records("s", 1, [1])) == [
        "index", "index", "offsets", "flush", "commit"]


def test_beside_the_target_the_records_are_acknowledged_first_in_every_transaction():
    c, target, states = shard(link=False)
    for batch in (range(0, 5), range(5, 7), range(7, 9)):
        assert transaction(c, target, states, records("s", 0, batch)) == [
            "flush", "index", "offsets", "flush", "commit"]


def test_a_landing_elsewhere_aborts_the_transaction_and_turns_the_prediction_off():
    c, target, states = shard()
    transaction(c, target, states, records("s", 0, range(0, 5)))
    target.logs[("t", 0)].append(99)  # another producer writes to the target partition
    with pytest.raises(KafkaException) as e:
        transaction(c, target, states, records("s", 0, [5, 6]))
    assert e.value.args[0].txn_requires_abort()
    assert target.events == ["index", "offsets", "flush"]  # no commit
    assert not c._predict


def test_at_least_once_acknowledges_the_records_before_every_offset_commit():
    c, target, states = shard(guarantee="at-least-once")
    group = c.group
    group.commit = lambda offsets, asynchronous: target.events.append("offsets")
    for batch in (range(0, 5), range(5, 7), range(7, 9)):
        assert transaction(c, target, states, records("s", 0, batch)) == ["flush", "offsets"]
