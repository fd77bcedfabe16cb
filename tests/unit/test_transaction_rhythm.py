"""When the copy loop ends a transaction: the interval, the load-aware commit-cost stretch and the
backlog bounds (the rhythm alone, no clients), and how the copier counts the records waiting."""

from __future__ import annotations

import time

import pytest

from replicator.config import ReplicatorConfig
from replicator.engine.transaction_rhythm import TransactionRhythm, commit_stretch
from tests.unit.copier_fakes import Clients, copier, partition_state

# A shard copying 100k rec/s at 5 us a record needs half its time for producing: with the headroom,
# the load is at its bound, and commits are stretched to three commit durations.
BUSY = {"rate": 100_000.0, "record_cost": 5e-6}
INF = float("inf")  # a backlog with no copy rate measured yet: a task's start, as in a catch-up


def rhythm(commit_cost: float = 0.0, age: float | None = None, records: int = 1, rate: float = 0.0,
           record_cost: float = 0.0, committed: bool = True, **cfg) -> TransactionRhythm:
    # `committed`: a transaction committed since the task started (or last failed)
    r = TransactionRhythm(ReplicatorConfig(**cfg))
    r._commit_cost, r._rate, r._record_cost, r._committed = commit_cost, rate, record_cost, committed
    r.started = None if age is None else time.monotonic() - age
    r.records = records
    return r


def waiting(records: int):
    """A source holding `records` past the copy positions; what it was asked is kept."""
    asked = []

    def count(enough: float) -> int:
        asked.append(enough)
        return records
    count.asked = asked
    return count


def full_read(r: TransactionRhythm, records_waiting: int) -> float:
    return r.after_read(True, False, waiting(records_waiting))


def test_nothing_open_is_never_due():
    assert not rhythm().due(0.0)


@pytest.mark.parametrize(("age", "due"), [(0.02, False), (0.06, True)])
def test_a_drained_source_commits_at_the_interval(age, due):
    assert rhythm(age=age, commit_interval_ms=50).due(0.0) is due


@pytest.mark.parametrize(("age", "due"), [(0.06, False), (0.11, False), (0.13, True)])
def test_a_slow_commit_on_a_busy_shard_stretches_the_interval_to_three_commits(age, due):
    assert rhythm(commit_cost=0.04, age=age, **BUSY).due(0.0) is due


def test_a_slow_commit_on_a_lightly_loaded_shard_keeps_the_interval():
    # 5k rec/s at 5 us a record: 2.5 % of the loop's time producing, commits take nothing it needs.
    r = rhythm(commit_cost=0.04, age=0.06, rate=5_000.0, record_cost=5e-6, commit_interval_ms=50)
    assert r._interval() == pytest.approx(0.05)
    assert r.due(0.0)


def test_the_stretch_grows_with_the_load():
    light = rhythm(commit_cost=0.02, rate=10_000.0, record_cost=5e-6, commit_interval_ms=1)._interval()
    medium = rhythm(commit_cost=0.02, rate=30_000.0, record_cost=5e-6, commit_interval_ms=1)._interval()
    heavy = rhythm(commit_cost=0.02, **BUSY, commit_interval_ms=1)._interval()
    assert light < medium < heavy == pytest.approx(0.06)


@pytest.mark.parametrize(("load", "share"), [(0.0, 0.0), (0.5, 0.5), (0.75, 0.75)])
def test_the_stretch_leaves_the_load_its_share_of_the_loop(load, share):
    cost = 0.02
    t = commit_stretch(cost, load)
    assert t / (t + cost) == pytest.approx(share)


def test_a_fast_commit_keeps_the_configured_interval():
    r = rhythm(commit_cost=0.005, age=0.03, commit_interval_ms=25, **BUSY)
    assert r._interval() == pytest.approx(0.025)
    assert r.due(0.0)


@pytest.mark.parametrize(("age", "due"), [(0.5, False), (1.01, True)])
def test_a_backlog_grows_the_transaction_up_to_its_time_bound(age, due):
    assert rhythm(age=age).due(INF) is due


@pytest.mark.parametrize(("age", "backlog_s", "due"), [
    (0.1, 0.3, False),  # 0.3 s behind: the transaction stays open while it copies them
    (0.31, 0.3, True),  # as old as the backlog: commit
    (0.01, 0.005, True),  # a few ms behind: the interval, as when drained
])
def test_a_small_backlog_grows_the_transaction_only_as_long_as_the_backlog(age, backlog_s, due):
    assert rhythm(age=age, commit_interval_ms=2).due(backlog_s) is due


@pytest.mark.parametrize(("age", "due"), [(0.005, False), (0.02, True)])
def test_a_tasks_first_transaction_ends_at_the_interval_even_in_a_backlog(age, due):
    # After a restart the backlog of the downtime waits: its first records show on the target at
    # the interval, not max_transaction_seconds later (the restart line of the bench).
    assert rhythm(age=age, committed=False, commit_interval_ms=10).due(INF) is due


def test_a_backlog_transaction_ends_at_its_record_bound():
    assert rhythm(age=0.1, records=ReplicatorConfig().max_records_per_transaction).due(INF)


@pytest.mark.parametrize(("age", "due"), [(1.5, False), (2.01, True)])
def test_a_catch_up_grows_the_transaction_to_the_catch_up_bound(age, due):
    r = rhythm(age=age, catch_up_transaction_seconds=2.0)
    r._catching_up = True
    assert r.due(INF) is due


def test_a_catch_up_bound_below_the_time_bound_changes_nothing():
    r = rhythm(age=1.01, max_transaction_seconds=1.0, catch_up_transaction_seconds=0.5)
    r._catching_up = True
    assert r.due(INF)


def test_a_tasks_first_transaction_is_no_catch_up():
    r = rhythm(age=0.5, committed=False)
    r._catching_up = True
    assert r._bound() == ReplicatorConfig().max_transaction_seconds


def test_the_wait_for_more_records_ends_when_the_transaction_is_due():
    r = rhythm(commit_cost=0.04, age=0.1, **BUSY)
    assert r.wait() == pytest.approx(0.02, abs=0.01)
    assert rhythm().wait() > 0  # nothing open: wait for a first record


def test_the_backlog_is_the_records_waiting_in_seconds_of_the_recent_copy_rate():
    assert full_read(rhythm(rate=50_000.0), 20_000) == pytest.approx(0.4)


def test_a_tasks_start_is_a_backlog():
    # No rate yet: a full read counts as a catch-up's (the first transaction still ends at the interval).
    count = waiting(0)
    assert rhythm(rate=0.0).after_read(True, False, count) == INF
    assert count.asked == []  # nothing to count in


def test_the_backlog_count_may_stop_at_what_the_longest_transaction_copies():
    count = waiting(10_000)
    rhythm(rate=10_000.0).after_read(True, False, count)
    assert count.asked == [10_000.0 * ReplicatorConfig().longest_transaction_seconds]  # no transaction grows longer


def test_a_full_read_counts_the_backlog_and_a_short_one_after_it_keeps_that_count():
    r = rhythm(rate=10_000.0)
    assert full_read(r, 30_000) == pytest.approx(3.0)  # 3 s of this shard's rate wait
    assert r._catching_up
    # The local fetch queue ran dry for a moment: the source still holds what was counted.
    assert r.after_read(False, False, waiting(0)) == pytest.approx(3.0, abs=0.05)


def test_a_read_that_waited_and_got_nothing_ends_the_count():
    r = rhythm(rate=10_000.0)
    full_read(r, 30_000)
    assert r.after_read(False, True, waiting(0)) == 0.0
    assert not r._catching_up


def test_a_small_backlog_is_no_catch_up():
    r = rhythm(rate=10_000.0, catch_up_transaction_seconds=2.0)
    assert full_read(r, 15_000) == pytest.approx(1.5)
    assert not r._catching_up


def test_before_a_rate_is_measured_a_full_read_counts_no_time_for_later_reads():
    r = rhythm(rate=0.0)
    assert full_read(r, 0) == INF
    assert r.after_read(False, False, waiting(0)) == 0.0


def test_records_known_to_wait_are_waited_for_up_to_the_transactions_bound():
    r = rhythm(age=0.9, rate=10_000.0)
    r._behind_until = time.monotonic() + 10
    assert r.wait() == pytest.approx(0.1, abs=0.05)  # max_transaction_seconds 1, 0.9 s in
    r._catching_up = True  # catch_up_transaction_seconds 2: as long as a wait for a first record
    assert r.wait() == pytest.approx(0.2, abs=0.05)


def test_a_commit_measures_the_rate_and_the_costs_the_rhythm_runs_on():
    r = TransactionRhythm(ReplicatorConfig())
    assert not r.open
    r.changed()
    r.committed(time.monotonic(), 0)  # the first commit starts the first cycle
    r.working()
    r.produced(1_000)
    assert r.open and r.records == 1_000
    r.committed(time.monotonic(), 1_000)
    assert not r.open and r.records == 0
    assert r._rate > 0 and r._record_cost > 0 and r._commit_cost > 0
    assert r.failed() and not r.failed()  # committed since the last failure, once


class _Watermarks:
    """The consumer's cached high watermarks, all the backlog count reads."""

    def __init__(self, highs: dict[int, int]) -> None:
        self.highs, self.asked = highs, 0

    def get_watermark_offsets(self, tp, cached: bool):
        assert cached  # never a broker round trip from the copy loop
        self.asked += 1
        return 0, self.highs[tp.partition]


def copier_at(highs: dict[int, int], nexts: dict[int, int]):
    c = copier(clients=Clients(_Watermarks(highs)))
    c._partitions.states = {("t", p): partition_state("t", p, n) for p, n in nexts.items()}
    return c


def test_the_copier_counts_the_records_past_its_positions_from_cached_watermarks():
    c = copier_at({0: 30_000, 1: 12_000}, {0: 10_000, 1: 12_000})
    assert c._source.waiting(INF) == 20_000


def test_the_copier_stops_counting_once_it_has_enough():
    c = copier_at({p: 100_000 for p in range(8)}, {p: 0 for p in range(8)})
    assert c._source.waiting(10_000) >= 10_000
    assert c._source.consumer.asked == 1


@pytest.mark.parametrize(("commit_cost", "bound"), [(0.05, 2.0), (0.2, 2.0), (0.6, 5.4), (100.0, 30.0)])
def test_slow_commits_stretch_a_catch_ups_transaction_to_nine_commits_within_half_the_timeout(commit_cost, bound):
    # Across a WAN link a commit takes several round trips: a catch-up's 2 s transactions spent a
    # quarter of the copy's time committing.
    r = rhythm(commit_cost=commit_cost, catch_up_transaction_seconds=2.0, transaction_timeout_ms=60_000)
    r._commits.extend([commit_cost] * 5)
    r._catching_up = True
    assert r._bound() == pytest.approx(bound)


def test_one_slow_commit_does_not_stretch_a_catch_ups_transactions():
    # A coordinator failing over holds one commit for seconds; the link is as fast as before.
    r = rhythm(catch_up_transaction_seconds=2.0)
    for cost in (0.05, 0.05, 8.0, 0.05):
        r._commits.append(cost)
    r._catching_up = True
    assert r._bound() == 2.0


def test_slow_commits_do_not_stretch_transactions_that_keep_up():
    r = rhythm(commit_cost=0.6)
    r._commits.extend([0.6] * 5)
    assert r._bound() == ReplicatorConfig().max_transaction_seconds


def test_slow_commits_do_not_turn_catch_up_transactions_back_on():
    r = rhythm(commit_cost=0.6, max_transaction_seconds=1.0, catch_up_transaction_seconds=0.5)
    r._commits.extend([0.6] * 5)
    r._catching_up = True
    assert r._bound() == 1.0


def test_the_backlog_count_may_stop_at_what_a_stretched_transaction_copies():
    r = rhythm(commit_cost=0.6, rate=10_000.0, catch_up_transaction_seconds=2.0)
    r._commits.extend([0.6] * 5)
    full_read(r, 10**9)
    count = waiting(10**9)
    r.after_read(True, False, count)
    assert count.asked == [pytest.approx(10_000.0 * 5.4)]
