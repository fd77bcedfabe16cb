"""Which records of a consumed batch carry a delivery report, and so which source->target offset pair
the commit metadata and the translation index record: always the partition's last copied record (and
its first in the transaction), whatever errors, rewinds, gaps and range ends the batch holds."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import KafkaError

from replicator.engine.shard_copy import CopyRange, CopyStats, ShardCopier, _PartitionState
from replicator.offsets import CommitMetadata


class Msg:  # what the copy loop reads of a consumed record
    def __init__(self, t: str, p: int, o: int, err: int | None = None) -> None:
        self.t, self.p, self.o, self.err = t, p, o, err

    def error(self):
        return KafkaError(self.err) if self.err is not None else None

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def value(self) -> bytes:
        return str(self.o).encode()

    def key(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return 1, 1_000

    def headers(self) -> None:
        return None


class Delivered:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class Target:
    """A producer that appends to per-partition logs and delivers on poll(), as librdkafka does."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[int]] = {}  # target partition -> source offsets written
        self.pending: list = []
        self.reports = 0

    def begin_transaction(self) -> None:
        pass

    def produce(self, topic, value, key, partition, callback=None, on_delivery=None, timestamp=0,
                headers=None) -> None:
        log = self.logs.setdefault((topic, partition), [])
        log.append(int(value))
        if callback is not None:
            self.reports += 1
            self.pending.append((callback, len(log) - 1))

    def poll(self, timeout) -> int:
        for callback, target_offset in self.pending:
            callback(None, Delivered(target_offset))
        self.pending.clear()
        return 0


class Consumer:
    def pause(self, tps) -> None:
        pass


def copier() -> ShardCopier:
    c = object.__new__(ShardCopier)
    c.cfg = SimpleNamespace(exactly_once=True)
    c.shard, c.provenance, c.stats, c.consumer, c._paused = 0, None, CopyStats(), Consumer(), []
    c._consume_error_logged = -100.0
    c._txn_begun, c._txn_records, c._txn_busy, c._txn_started, c._work_began = False, 0, 0.0, None, 0.0
    return c


def states(**ends: int | None) -> dict:
    out = {}
    for key, end in ends.items():
        topic, partition = key.rsplit("_", 1)
        out[(topic, int(partition))] = _PartitionState(CopyRange(topic, "t-" + topic, int(partition), 0, end), 0,
                                                       False, CommitMetadata("c", topic, 1, 0))
    return out


def copy(*batches: list[Msg], **ends: int | None) -> tuple[dict, Target]:
    c, target, sts = copier(), Target(), states(**ends)
    for batch in batches:
        c._produce_batch(target, batch, sts)
    return sts, target


def run(t: str, p: int, offsets) -> list[Msg]:
    return [Msg(t, p, o) for o in offsets]


def test_the_pair_comes_from_the_last_record_produced_not_the_last_consumed():
    # The source grew after planning: the batch holds records past the range end (10), which the
    # shard does not produce. The pair must name offset 9, the last one it does produce.
    sts, _ = copy(run("a", 0, range(7, 13)), a_0=10)
    st = sts[("a", 0)]
    assert st.done and st.pair == (9, 2) and st.first_pair == (7, 0)


def test_interleaved_runs_of_partitions_each_end_with_their_last_record():
    msgs = [Msg("a", 0, 4), Msg("a", 1, 8), Msg("a", 0, 5), Msg("a", 1, 9), Msg("a", 0, 6)]
    sts, _ = copy(msgs, a_0=100, a_1=100)
    assert sts[("a", 0)].pair == (6, 2) and sts[("a", 1)].pair == (9, 1)
    sts, _ = copy(msgs, a_0=100, a_1=9)
    assert sts[("a", 0)].pair == (6, 2) and sts[("a", 1)].pair == (8, 0)


def test_a_trailing_error_of_the_same_partition_does_not_hide_its_last_record():
    msgs = [*run("a", 0, (4, 5)), Msg("a", 0, 6, KafkaError._PARTITION_EOF)]
    sts, _ = copy(msgs, a_0=None)
    assert sts[("a", 0)].pair == (5, 1) and sts[("a", 0)].end_seen == 6


def test_an_error_inside_a_run_and_a_rewind_at_its_end():
    msgs = [*run("a", 0, (0, 1)), Msg("a", 0, 2, KafkaError._PARTITION_EOF), *run("a", 0, (2, 3, 1, 2))]
    sts, target = copy(msgs, a_0=None)
    st = sts[("a", 0)]
    assert st.pair == (3, 3) and target.logs[("t-a", 0)] == [0, 1, 2, 3] and st.next == 4


def test_gaps_inside_a_run_keep_the_pair_exact():
    sts, target = copy(run("a", 0, (0, 1, 5, 6, 9)), a_0=None)
    st = sts[("a", 0)]
    assert st.pair == (9, 4) and st.gaps == [2, 5, 7, 9] and target.logs[("t-a", 0)] == [0, 1, 5, 6, 9]


def test_the_pair_moves_on_across_batches_of_one_transaction():
    sts, _ = copy(run("a", 0, range(0, 5)), run("a", 0, range(5, 8)), a_0=None)
    assert sts[("a", 0)].pair == (7, 7) and sts[("a", 0)].first_pair == (0, 0)


def test_a_long_run_costs_two_reports_not_one_per_record():
    _, target = copy(run("a", 0, range(1_000)), a_0=None)
    assert target.reports == 2
