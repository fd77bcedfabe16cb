"""Which records of a consumed batch carry a delivery report, and so which source->target offset pair
the commit metadata and the translation index record: always the partition's last copied record (and
its first in the transaction), whatever errors, rewinds, gaps and range ends the batch holds."""

from __future__ import annotations

from confluent_kafka import KafkaError

from tests.unit.copier_fakes import Record, Target, copier, partition_state, records


def states(**ends: int | None) -> dict:
    out = {}
    for key, end in ends.items():
        topic, partition = key.rsplit("_", 1)
        out[(topic, int(partition))] = partition_state(topic, int(partition), 0, end, "t-" + topic, promised=False)
    return out


def copy(*batches: list[Record], **ends: int | None) -> tuple[dict, Target]:
    target, sts = Target(), states(**ends)
    c = copier(target=target)
    for batch in batches:
        c._produce_batch(batch, sts)
    return sts, target


def test_the_pair_comes_from_the_last_record_produced_not_the_last_consumed():
    # The source grew after planning: the batch holds records past the range end (10), which the
    # shard does not produce. The pair must name offset 9, the last one it does produce.
    sts, _ = copy(records("a", 0, range(7, 13)), a_0=10)
    st = sts[("a", 0)]
    assert st.done and st.pair == (9, 2) and st.first_pair == (7, 0)


def test_interleaved_runs_of_partitions_each_end_with_their_last_record():
    msgs = [Record("a", 0, 4), Record("a", 1, 8), Record("a", 0, 5), Record("a", 1, 9), Record("a", 0, 6)]
    sts, _ = copy(msgs, a_0=100, a_1=100)
    assert sts[("a", 0)].pair == (6, 2) and sts[("a", 1)].pair == (9, 1)
    sts, _ = copy(msgs, a_0=100, a_1=9)
    assert sts[("a", 0)].pair == (6, 2) and sts[("a", 1)].pair == (8, 0)


def test_a_trailing_error_of_the_same_partition_does_not_hide_its_last_record():
    msgs = [*records("a", 0, (4, 5)), Record("a", 0, 6, KafkaError._PARTITION_EOF)]
    sts, _ = copy(msgs, a_0=None)
    assert sts[("a", 0)].pair == (5, 1) and sts[("a", 0)].end_seen == 6


def test_an_error_inside_a_run_and_a_rewind_at_its_end():
    msgs = [*records("a", 0, (0, 1)), Record("a", 0, 2, KafkaError._PARTITION_EOF), *records("a", 0, (2, 3, 1, 2))]
    sts, target = copy(msgs, a_0=None)
    st = sts[("a", 0)]
    assert st.pair == (3, 3) and target.logs[("t-a", 0)] == [0, 1, 2, 3] and st.next == 4


def test_gaps_inside_a_run_keep_the_pair_exact():
    sts, target = copy(records("a", 0, (0, 1, 5, 6, 9)), a_0=None)
    st = sts[("a", 0)]
    assert st.pair == (9, 4) and st.gaps == [2, 5, 7, 9] and target.logs[("t-a", 0)] == [0, 1, 5, 6, 9]


def test_the_pair_moves_on_across_batches_of_one_transaction():
    sts, _ = copy(records("a", 0, range(0, 5)), records("a", 0, range(5, 8)), a_0=None)
    assert sts[("a", 0)].pair == (7, 7) and sts[("a", 0)].first_pair == (0, 0)


def test_a_long_run_costs_two_reports_not_one_per_record():
    _, target = copy(records("a", 0, range(1_000)), a_0=None)
    assert target.reports == 2


class FullTarget(Target):
    """A target whose local queue is full for the next `full` produce calls, until polled."""

    def __init__(self, full: int) -> None:
        super().__init__()
        self.full, self.refused = full, 0

    def produce(self, *args) -> None:
        if self.full:
            self.full -= 1
            self.refused += 1
            raise BufferError("Local: Queue full")
        super().produce(*args)


def test_a_full_local_queue_delays_a_record_never_drops_or_repeats_it():
    target, sts = FullTarget(3), states(a_0=None)
    copier(target=target)._produce_batch(records("a", 0, range(5)), sts)
    assert target.refused == 3 and target.logs[("t-a", 0)] == [0, 1, 2, 3, 4]
    assert sts[("a", 0)].pair == (4, 4) and sts[("a", 0)].first_pair == (0, 0)
