"""What a shard does when its source position lies below the log start: where a partition's copy
begins (no index gap, so a translation below it is refused, not guessed) versus data loss."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from replicator.config import ReplicatorConfig
from replicator.engine.partition_copy import CopyRange, PartitionCopy
from replicator.engine.shard_copy import ShardCopier
from replicator.engine.source_reader import DataLossError
from replicator.offsets import CommitMetadata
from tests.unit.copier_fakes import Clients, Record, copier


class Consumer:  # what the rule reads and does on the consumer
    def __init__(self, low: int) -> None:
        self.low, self.assigned = low, []

    def get_watermark_offsets(self, tp, timeout):
        return self.low, self.low + 1_000

    def incremental_unassign(self, tps) -> None:
        pass

    def incremental_assign(self, tps) -> None:
        self.assigned += [(tp.topic, tp.partition, tp.offset) for tp in tps]


def out_of_range(st: PartitionCopy, low: int, on_data_loss: str = "fail") -> ShardCopier:
    c = copier(ReplicatorConfig(translation_index=False, on_data_loss=on_data_loss), clients=Clients(Consumer(low)))
    c._source.event(Record("a", 0, st.next, KafkaError.OFFSET_OUT_OF_RANGE), {("a", 0): st})
    return c


def state(next_offset: int, promised: bool) -> PartitionCopy:
    return PartitionCopy(CopyRange("a", "a", 0, 0, 10_000), next_offset, promised, CommitMetadata("c", "a", 1, 0),
                         txn_begin=next_offset)


def test_a_fresh_partition_starting_below_the_log_start_begins_there_without_a_gap():
    st = state(0, promised=False)
    copier = out_of_range(st, low=300)
    assert (st.next, st.txn_begin, st.gaps) == (300, 300, [])
    assert copier._source.consumer.assigned == [("a", 0, 300)] and copier.stats.data_loss_events == 0


def test_records_deleted_under_a_committed_position_are_data_loss():
    st = state(120, promised=True)
    with pytest.raises(DataLossError, match=r"offsets 120\.\.299"):
        out_of_range(st, low=300)
    st = state(120, promised=True)
    copier = out_of_range(st, low=300, on_data_loss="skip")
    assert (st.next, st.gaps, copier.stats.data_loss_events) == (300, [120, 300], 1)


def test_records_deleted_under_the_open_transactions_position_are_data_loss_too():
    # Nothing committed yet, but the task copied records up to 120: what lay above them is lost.
    st = state(120, promised=False)
    st.records = 20
    with pytest.raises(DataLossError, match=r"offsets 120\.\.299"):
        out_of_range(st, low=300)
