"""Which record of a consumed batch carries the delivery report that becomes the recorded
source->target offset pair (commit metadata)."""

from __future__ import annotations

from dataclasses import dataclass

from replicator.engine.shard_copy import CopyRange, _last_index_per_partition, _PartitionState
from replicator.offsets import CommitMetadata


@dataclass
class Msg:  # what the function reads of a consumed record
    t: str
    p: int
    o: int
    e: object = None  # what error() returns

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def error(self):
        return self.e


def lasts(msgs: list, states: dict) -> set[int]:
    return _last_index_per_partition(msgs, [(m.topic(), m.partition()) for m in msgs], states)


def states(**ends: int | None) -> dict:
    out = {}
    for key, end in ends.items():
        topic, partition = key.rsplit("_", 1)
        out[(topic, int(partition))] = _PartitionState(CopyRange(topic, topic, int(partition), 0, end), 0, False,
                                                       CommitMetadata("c", topic, 1, 0))
    return out


def test_the_pair_comes_from_the_last_record_produced_not_the_last_consumed():
    # The source grew after planning: the batch holds records past the range end (10), which the
    # shard does not produce. The pair must name offset 9, the last one it does produce.
    msgs = [Msg("a", 0, o) for o in range(7, 13)]
    assert lasts(msgs, states(a_0=10)) == {2}


def test_one_pair_per_partition_and_none_for_a_partition_entirely_past_its_end():
    msgs = [Msg("a", 0, 4), Msg("a", 1, 8), Msg("a", 0, 5), Msg("a", 1, 9), Msg("a", 0, 6)]
    assert lasts(msgs, states(a_0=100, a_1=100)) == {3, 4}
    assert lasts(msgs, states(a_0=100, a_1=8)) == {4}


def test_a_partition_missing_from_the_batch_does_not_hide_the_others_last_record():
    # Steady state: a small batch holds only some of the shard's partitions.
    msgs = [Msg("a", 0, 4), Msg("a", 0, 5), Msg("b", 2, 7)]
    assert lasts(msgs, states(a_0=None, a_1=None, b_2=None, b_3=None)) == {1, 2}


def test_the_pair_skips_a_trailing_error_of_the_same_partition():
    msgs = [Msg("a", 0, 4), Msg("a", 0, 5), Msg("a", 0, 6, e="PARTITION_EOF")]
    assert lasts(msgs, states(a_0=None)) == {1}


def test_a_partition_the_shard_does_not_copy_gets_no_pair():
    msgs = [Msg("a", 0, 4), Msg("z", 0, 5)]
    assert lasts(msgs, states(a_0=None)) == {0}
