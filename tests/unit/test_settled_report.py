"""What a shard task tells the driver is settled: the driver takes those partitions' lag as 0
without asking the clusters (BENCHMARKS.md, 2026-11-26 night), so a partition must leave the set as
soon as anything of it is copied or unsure, and join it only once the group holds the source's end."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import KafkaError

from replicator.engine.shard_copy import CopyRange, CopyStats, ShardCopier, _PartitionState
from replicator.offsets import CommitMetadata


class Msg:
    def __init__(self, partition: int, offset: int, err: int | None = None) -> None:
        self._p, self._o, self._err = partition, offset, err

    def error(self):
        return KafkaError(self._err) if self._err is not None else None

    def topic(self):
        return "s"

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def value(self):
        return b"v"

    def key(self):
        return None

    def timestamp(self):
        return (1, 1_000)

    def headers(self):
        return None


class Link:
    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.up = True

    def report(self, stats, settled=None) -> bool:
        if self.up:
            self.sent.append(settled or {})
        return self.up


class Producer:
    def produce(self, *args, **kwargs) -> None:
        pass

    def poll(self, timeout) -> None:
        pass


def copier() -> tuple[ShardCopier, dict, Link]:
    c = object.__new__(ShardCopier)
    c.cfg = SimpleNamespace(exactly_once=False)
    c.shard, c.provenance, c.stats, c._floors = 0, None, CopyStats(), {}
    c._link, c._reported, c._sent_settled = Link(), 0.0, {}
    c._settled_checked = c._settled_resent = 0.0
    c._consume_error_logged = -100.0
    c._txn_started, c._txn_records, c._txn_begun, c._txn_busy, c._work_began = None, 0, False, 0.0, 0.0
    states = {("s", p): _PartitionState(CopyRange("s", "t", p, -1), 10, True, CommitMetadata("c", "s", 1, 0))
              for p in (0, 1)}
    c._states = states
    return c, states, c._link


def report(c: ShardCopier) -> dict:
    c._settled_checked = 0.0  # due now
    before = len(c._link.sent)
    c._report()
    return c._link.sent[-1] if len(c._link.sent) > before else {}


def test_a_partition_is_settled_once_the_group_holds_the_end_its_last_fetch_saw():
    c, states, link = copier()
    assert report(c) == {}  # no end seen yet: nothing is settled
    c._on_consume_error(Msg(0, 10, KafkaError._PARTITION_EOF), states)
    assert report(c) == {"s|0": 10}
    assert report(c) == {}  # only changes are sent

    # Markers past the last record: the position moves over them in a transaction; settled once committed.
    c._on_consume_error(Msg(1, 14, KafkaError._PARTITION_EOF), states)
    assert report(c) == {}
    c._account([states[("s", 1)]], 0.0)
    assert report(c) == {"s|1": 14}

    # A record arrives: no longer settled, until it is committed and the end is seen again.
    c._produce_batch(Producer(), [Msg(0, 10)], states)
    assert report(c) == {"s|0": -1}
    c._account([states[("s", 0)]], 0.0)
    assert report(c) == {}
    c._on_consume_error(Msg(0, 11, KafkaError._PARTITION_EOF), states)
    assert report(c) == {"s|0": 11}


def test_a_source_error_or_a_failed_attempt_withdraws_what_was_settled():
    c, states, link = copier()
    for p in (0, 1):
        c._on_consume_error(Msg(p, 10, KafkaError._PARTITION_EOF), states)
    assert report(c) == {"s|0": 10, "s|1": 10}
    c._on_consume_error(Msg(1, 10, KafkaError.NOT_LEADER_FOR_PARTITION), states)
    assert report(c) == {"s|1": -1}
    c._on_consume_error(Msg(-1, -1, KafkaError._TRANSPORT), states)  # not a partition's: all of them
    assert report(c) == {"s|0": -1}

    c._on_consume_error(Msg(0, 10, KafkaError._PARTITION_EOF), states)
    link.up = False
    assert report(c) == {}  # not delivered: sent again once the line is back
    link.up = True
    assert report(c) == {"s|0": 10}
    c._states = {}  # what _attempts does when a transaction fails
    assert report(c) == {"s|0": -1}
