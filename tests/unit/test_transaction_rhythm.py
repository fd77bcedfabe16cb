"""When the copy loop ends a transaction: the interval, the commit-cost stretch and the backlog bounds."""

from __future__ import annotations

import time

import pytest

from replicator.config import ReplicatorConfig
from replicator.shard_copy import ShardCopier, is_backlog


def copier(commit_cost: float = 0.0, age: float | None = None, records: int = 1, **cfg) -> ShardCopier:
    c = object.__new__(ShardCopier)  # no clients: only the rhythm's state
    c.cfg = ReplicatorConfig(**cfg)
    c._commit_cost = commit_cost
    c._txn_started = None if age is None else time.monotonic() - age
    c._txn_records = records
    return c


def test_nothing_open_is_never_due():
    assert not copier()._due(backlog=False)


@pytest.mark.parametrize(("age", "due"), [(0.02, False), (0.06, True)])
def test_a_drained_source_commits_at_the_interval(age, due):
    assert copier(age=age)._due(backlog=False) is due


@pytest.mark.parametrize(("age", "due"), [(0.06, False), (0.11, False), (0.13, True)])
def test_a_slow_commit_stretches_the_interval_to_three_commits(age, due):
    assert copier(commit_cost=0.04, age=age)._due(backlog=False) is due


def test_a_fast_commit_keeps_the_configured_interval():
    c = copier(commit_cost=0.005, age=0.03, commit_interval_ms=25)
    assert c._interval() == pytest.approx(0.025)
    assert c._due(backlog=False)


@pytest.mark.parametrize(("age", "due"), [(0.5, False), (1.01, True)])
def test_a_backlog_grows_the_transaction_up_to_its_time_bound(age, due):
    assert copier(age=age)._due(backlog=True) is due


def test_a_backlog_transaction_ends_at_its_record_bound():
    assert copier(age=0.1, records=200_000)._due(backlog=True)


def test_the_wait_for_more_records_ends_when_the_transaction_is_due():
    c = copier(commit_cost=0.04, age=0.1)
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
