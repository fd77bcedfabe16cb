"""When the copy loop ends a transaction: the interval, the load-aware commit-cost stretch and the
backlog bounds."""

from __future__ import annotations

import time

import pytest

from replicator.config import ReplicatorConfig
from replicator.engine.shard_copy import ShardCopier, commit_stretch
from tests.unit.copier_fakes import bare_copier, partition_state

# A shard copying 100k rec/s at 5 us a record needs half its time for producing: with the headroom,
# the load is at its bound, and commits are stretched to three commit durations.
BUSY = {"rate": 100_000.0, "record_cost": 5e-6}
INF = float("inf")  # a backlog with no copy rate measured yet: a task's start, as in a catch-up


def copier(commit_cost: float = 0.0, age: float | None = None, records: int = 1, rate: float = 0.0,
           record_cost: float = 0.0, committed: bool = True, **cfg) -> ShardCopier:
    # `committed`: a transaction committed since the task started (or last failed)
    return bare_copier(ReplicatorConfig(**cfg), _commit_cost=commit_cost, _rate=rate, _record_cost=record_cost,
                       _txn_started=None if age is None else time.monotonic() - age, _txn_records=records,
                       _committed=committed)


def test_nothing_open_is_never_due():
    assert not copier()._due(0.0)


@pytest.mark.parametrize(("age", "due"), [(0.02, False), (0.06, True)])
def test_a_drained_source_commits_at_the_interval(age, due):
    assert copier(age=age, commit_interval_ms=50)._due(0.0) is due


@pytest.mark.parametrize(("age", "due"), [(0.06, False), (0.11, False), (0.13, True)])
def test_a_slow_commit_on_a_busy_shard_stretches_the_interval_to_three_commits(age, due):
    assert copier(commit_cost=0.04, age=age, **BUSY)._due(0.0) is due


def test_a_slow_commit_on_a_lightly_loaded_shard_keeps_the_interval():
    # 5k rec/s at 5 us a record: 2.5 % of the loop's time producing, commits take nothing it needs.
    c = copier(commit_cost=0.04, age=0.06, rate=5_000.0, record_cost=5e-6, commit_interval_ms=50)
    assert c._interval() == pytest.approx(0.05)
    assert c._due(0.0)


def test_the_stretch_grows_with_the_load():
    light = copier(commit_cost=0.02, rate=10_000.0, record_cost=5e-6, commit_interval_ms=1)._interval()
    medium = copier(commit_cost=0.02, rate=30_000.0, record_cost=5e-6, commit_interval_ms=1)._interval()
    heavy = copier(commit_cost=0.02, **BUSY, commit_interval_ms=1)._interval()
    assert light < medium < heavy == pytest.approx(0.06)


@pytest.mark.parametrize(("load", "share"), [(0.0, 0.0), (0.5, 0.5), (0.75, 0.75)])
def test_the_stretch_leaves_the_load_its_share_of_the_loop(load, share):
    cost = 0.02
    t = commit_stretch(cost, load)
    assert t / (t + cost) == pytest.approx(share)


def test_a_fast_commit_keeps_the_configured_interval():
    c = copier(commit_cost=0.005, age=0.03, commit_interval_ms=25, **BUSY)
    assert c._interval() == pytest.approx(0.025)
    assert c._due(0.0)


@pytest.mark.parametrize(("age", "due"), [(0.5, False), (1.01, True)])
def test_a_backlog_grows_the_transaction_up_to_its_time_bound(age, due):
    assert copier(age=age)._due(INF) is due


@pytest.mark.parametrize(("age", "backlog_s", "due"), [
    (0.1, 0.3, False),  # 0.3 s behind: the transaction stays open while it copies them
    (0.31, 0.3, True),  # as old as the backlog: commit
    (0.01, 0.005, True),  # a few ms behind: the interval, as when drained
])
def test_a_small_backlog_grows_the_transaction_only_as_long_as_the_backlog(age, backlog_s, due):
    assert copier(age=age, commit_interval_ms=2)._due(backlog_s) is due


@pytest.mark.parametrize(("age", "due"), [(0.005, False), (0.02, True)])
def test_a_tasks_first_transaction_ends_at_the_interval_even_in_a_backlog(age, due):
    # After a restart the backlog of the downtime waits: its first records show on the target at
    # the interval, not max_transaction_seconds later (the restart line of the bench).
    assert copier(age=age, committed=False, commit_interval_ms=10)._due(INF) is due


def test_a_backlog_transaction_ends_at_its_record_bound():
    assert copier(age=0.1, records=ReplicatorConfig().max_records_per_transaction)._due(INF)


@pytest.mark.parametrize(("age", "due"), [(1.5, False), (2.01, True)])
def test_a_catch_up_grows_the_transaction_to_the_catch_up_bound(age, due):
    c = copier(age=age, catch_up_transaction_seconds=2.0)
    c._catching_up = True
    assert c._due(INF) is due


def test_a_catch_up_bound_below_the_time_bound_changes_nothing():
    c = copier(age=1.01, max_transaction_seconds=1.0, catch_up_transaction_seconds=0.5)
    c._catching_up = True
    assert c._due(INF)


def test_a_tasks_first_transaction_is_no_catch_up():
    c = copier(age=0.5, committed=False)
    c._catching_up = True
    assert c._bound() == ReplicatorConfig().max_transaction_seconds


def test_the_wait_for_more_records_ends_when_the_transaction_is_due():
    c = copier(commit_cost=0.04, age=0.1, **BUSY)
    assert c._wait() == pytest.approx(0.02, abs=0.01)
    assert copier()._wait() > 0  # nothing open: wait for a first record


class _Watermarks:
    """The consumer's cached high watermarks, all the backlog count reads."""

    def __init__(self, highs: dict[int, int]) -> None:
        self.highs, self.asked = highs, 0

    def get_watermark_offsets(self, tp, cached: bool):
        assert cached  # never a broker round trip from the copy loop
        self.asked += 1
        return 0, self.highs[tp.partition]


def _states(nexts: dict[int, int]) -> dict:
    return {("t", p): partition_state("t", p, n) for p, n in nexts.items()}


def test_the_backlog_is_the_records_waiting_in_seconds_of_the_recent_copy_rate():
    c = copier(rate=50_000.0)
    c.consumer = _Watermarks({0: 30_000, 1: 12_000})
    assert c._backlog_s(_states({0: 10_000, 1: 12_000})) == pytest.approx(0.4)


def test_a_tasks_start_is_a_backlog():
    # No rate yet: a full read counts as a catch-up's (the first transaction still ends at the interval).
    assert copier(rate=0.0)._backlog_s(_states({0: 0})) == INF


def test_the_backlog_count_stops_at_what_the_longest_transaction_copies():
    c = copier(rate=10_000.0)  # max_transaction_seconds 1: 10k records are enough to know
    c.consumer = _Watermarks({p: 100_000 for p in range(8)})
    assert c._backlog_s(_states({p: 0 for p in range(8)})) >= 1.0
    assert c.consumer.asked == 1


FULL = [object()] * 10_000  # a read that filled its batch (only its length counts here)


def test_a_full_read_counts_the_backlog_and_a_short_one_after_it_keeps_that_count():
    c = copier(rate=10_000.0)
    c.consumer = _Watermarks({0: 30_000, 1: 0})  # 3 s of this shard's rate wait
    assert c._backlog(_states({0: 0, 1: 0}), FULL) == pytest.approx(3.0)
    assert c._catching_up
    # The local fetch queue ran dry for a moment: the source still holds what was counted.
    assert c._backlog({}, [object()]) == pytest.approx(3.0, abs=0.05)
    c._waited = False
    assert c._backlog({}, []) == pytest.approx(3.0, abs=0.05)


def test_a_read_that_waited_and_got_nothing_ends_the_count():
    c = copier(rate=10_000.0)
    c.consumer = _Watermarks({0: 30_000})
    c._backlog(_states({0: 0}), FULL)
    c._waited = True
    assert c._backlog({}, []) == 0.0
    assert not c._catching_up


def test_a_small_backlog_is_no_catch_up():
    c = copier(rate=10_000.0, catch_up_transaction_seconds=2.0)
    c.consumer = _Watermarks({0: 15_000})
    assert c._backlog(_states({0: 0}), FULL) == pytest.approx(1.5)
    assert not c._catching_up


def test_before_a_rate_is_measured_a_full_read_counts_no_time_for_later_reads():
    c = copier(rate=0.0)
    assert c._backlog(_states({0: 0}), FULL) == INF
    assert c._backlog({}, [object()]) == 0.0


def test_records_known_to_wait_are_waited_for_up_to_the_transactions_bound():
    c = copier(age=0.9, rate=10_000.0)
    c._behind_until = time.monotonic() + 10
    assert c._wait() == pytest.approx(0.1, abs=0.05)  # max_transaction_seconds 1, 0.9 s in
    c._catching_up = True  # catch_up_transaction_seconds 2: as long as a wait for a first record
    assert c._wait() == pytest.approx(0.2, abs=0.05)
