"""The lag in seconds from what the shards copy: a shard's open transaction starts at the oldest
record not yet copied of each partition it holds records of, so the driver needs no read of the
source for those partitions (across a WAN link each read cost a record batch per lagging partition
at every progress line, BENCHMARKS.md)."""

from __future__ import annotations

import pytest

from replicator.clients import kafka_clients
from replicator.config import ReplicatorConfig
from replicator.engine.shard_partitions import ShardPartitions
from replicator.engine.task_control import ControlServer, DriverLink
from replicator.engine.task_report import TaskReport
from replicator.ops.lag import PartitionLag, with_ages, with_copied_ages
from tests.unit.copier_fakes import partition_state


def lag(partition: int, committed: int, end: int = 100) -> PartitionLag:
    return PartitionLag("s", "t", partition, end, committed, 0)


def test_a_record_the_copy_read_at_the_resume_offset_gives_the_age():
    lags = [lag(0, 10), lag(1, 20), lag(2, 100), lag(3, 30)]
    copied = {("s", 0): (10, 111), ("s", 1): (15, 99), ("s", 2): (90, 5)}
    aged = with_copied_ages(lags, copied)
    assert [x.oldest_timestamp_ms for x in aged] == [111, None, None, None]  # 1: the copy moved on since
    assert aged[2] is lags[2] and aged[3] is lags[3]  # caught up, or nothing known: as it was


def test_the_source_is_not_read_for_partitions_whose_age_is_known(monkeypatch):
    def no_reads(cfg):
        raise AssertionError("the source was read")

    monkeypatch.setattr(kafka_clients, "source_peeker", no_reads)
    lags = with_copied_ages([lag(0, 10), lag(1, 100)], {("s", 0): (10, 111)})
    aged = with_ages(ReplicatorConfig(name="ages"), lags)
    assert [x.oldest_timestamp_ms for x in aged] == [111, -1]
    assert aged[0].seconds(now=0.211) == pytest.approx(0.1)


def test_a_task_says_where_its_open_transactions_begin_and_the_driver_keeps_it():
    parts = ShardPartitions()
    parts.states = {("s", 0): partition_state("s", 0, 14, records=4, first_ts=1_000, txn_begin=10),
                    ("s", 1): partition_state("s", 1, 20, txn_begin=20)}  # nothing in the transaction
    assert parts.oldest() == {"s|0": [10, 1_000]}

    server = ControlServer()
    try:
        report = TaskReport(dict, parts.oldest)
        report.link = DriverLink(f"127.0.0.1:{server.port}", batch=1, shard=0)
        report.send()
        assert server.oldest() == {("s", 0): (10, 1_000)}
        parts.states[("s", 0)] = partition_state("s", 0, 30, records=2, first_ts=2_000, txn_begin=14)
        report.send()
        assert server.oldest() == {("s", 0): (10, 1_000)}  # looked at every second, not at every call
        report._oldest_checked = 0.0
        report.send()
        assert server.oldest() == {("s", 0): (14, 2_000)}
        report.link.close()
    finally:
        server.close()
