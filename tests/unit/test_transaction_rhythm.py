"""When the copy loop ends a transaction: the interval, the load-aware commit-cost stretch and the
backlog bounds."""

from __future__ import annotations

import time

import pytest

from replicator.config import ReplicatorConfig
from replicator.engine.shard_copy import ShardCopier, commit_stretch, is_backlog

# A shard copying 100k rec/s at 5 us a record needs half its time for producing: with the headroom,
# the load is at its bound, and commits are stretched to three commit durations.
BUSY = {"rate": 100_000.0, "record_cost": 5e-6}


def copier(commit_cost: float = 0.0, age: float | None = None, records: int = 1, rate: float = 0.0,
           record_cost: float = 0.0, committed: bool = True, **cfg) -> ShardCopier:
    c = object.__new__(ShardCopier)  # no clients: only the rhythm's state
    c.cfg = ReplicatorConfig(**cfg)
    c._commit_cost = commit_cost
    c._rate, c._record_cost = rate, record_cost
    c._txn_started = None if age is None else time.monotonic() - age
    c._txn_records = records
    c._committed = committed  # a transaction committed since the task started (or last failed)
    return c


def test_nothing_open_is_never_due():
    assert not copier()._due(backlog=False)


@pytest.mark.parametrize(("age", "due"), [(0.02, False), (0.06, True)])
def test_a_drained_source_commits_at_the_interval(age, due):
    assert copier(age=age, commit_interval_ms=50)._due(backlog=False) is due


@pytest.mark.parametrize(("age", "due"), [(0.06, False), (0.11, False), (0.13, True)])
def test_a_slow_commit_on_a_busy_shard_stretches_the_interval_to_three_commits(age, due):
    assert copier(commit_cost=0.04, age=age, **BUSY)._due(backlog=False) is due


def test_a_slow_commit_on_a_lightly_loaded_shard_keeps_the_interval():
    # 5k rec/s at 5 us a record: 2.5 % of the loop's time producing, commits take nothing it needs.
    c = copier(commit_cost=0.04, age=0.06, rate=5_000.0, record_cost=5e-6, commit_interval_ms=50)
    assert c._interval() == pytest.approx(0.05)
    assert c._due(backlog=False)


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
    assert c._due(backlog=False)


@pytest.mark.parametrize(("age", "due"), [(0.5, False), (1.01, True)])
def test_a_backlog_grows_the_transaction_up_to_its_time_bound(age, due):
    assert copier(age=age)._due(backlog=True) is due


@pytest.mark.parametrize(("age", "due"), [(0.005, False), (0.02, True)])
def test_a_tasks_first_transaction_ends_at_the_interval_even_in_a_backlog(age, due):
    # After a restart the backlog of the downtime waits: its first records show on the target at
    # the interval, not max_transaction_seconds later (the restart line of the bench).
    assert copier(age=age, committed=False, commit_interval_ms=10)._due(backlog=True) is due


def test_a_backlog_transaction_ends_at_its_record_bound():
    assert copier(age=0.1, records=200_000)._due(backlog=True)


def test_the_wait_for_more_records_ends_when_the_transaction_is_due():
    c = copier(commit_cost=0.04, age=0.1, **BUSY)
    assert c._wait() == pytest.approx(0.02, abs=0.01)
    assert copier()._wait() > 0  # nothing open: wait for a first record


@pytest.mark.parametrize(("waiting", "rate", "backlog"), [
    (10_000, 0.0, True),  # a task's start: no rate yet, a full read is a backlog (catch-up)
    (20_000, 52_000.0, False),  # a pause at a steady 52k rec/s: 0.4 s queued, keep small transactions
    (60_000, 52_000.0, True),  # more than a second behind: grow the transaction
    (0, 10.0, False),
])
def test_a_full_read_is_a_backlog_only_a_second_behind(waiting, rate, backlog):
    assert is_backlog(waiting, rate) is backlog
