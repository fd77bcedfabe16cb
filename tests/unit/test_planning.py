"""The driver's planning, without Spark or brokers: admission, shard assignment, stats merging."""

from __future__ import annotations

import json

from replicator.config import ReplicatorConfig
from replicator.sharding import shard_of
from replicator.spark_source import ReplicationPlanner, _admit, _merge


def ends(offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): e for t, parts in offsets.items() for p, e in parts.items()}


def test_admission_takes_everything_within_budget():
    begin = {("a", 0): 10, ("a", 1): 0, ("b", 0): 5}
    latest = {("a", 0): 20, ("a", 1): 0, ("b", 0): 7}
    assert ends(_admit(begin, latest, budget=1_000)) == {("a", 0): 20, ("a", 1): 0, ("b", 0): 7}


def test_admission_shares_a_small_budget_fairly_and_never_exceeds_it():
    begin = {("big", 0): 0, ("big", 1): 0, ("small", 0): 0}
    latest = {("big", 0): 1_000_000, ("big", 1): 1_000_000, ("small", 0): 10}
    out = ends(_admit(begin, latest, budget=3_000))
    assert out[("small", 0)] == 10  # a small lagging partition is not starved by big ones
    assert sum(out[tp] - begin[tp] for tp in begin) == 3_000
    assert abs(out[("big", 0)] - out[("big", 1)]) <= 1


def test_admission_honours_sparks_row_limit_and_never_goes_backwards():
    begin = {("a", 0): 100}
    assert ends(_admit(begin, {("a", 0): 1_000}, budget=500, spark_limit=50)) == {("a", 0): 150}
    # A source end below the start (topic recreated, truncated) plans nothing, never a negative range.
    assert ends(_admit(begin, {("a", 0): 40}, budget=500)) == {("a", 0): 100}


def test_shard_assignment_is_stable_and_spreads_consecutive_partitions():
    shards = [shard_of("orders", p, 4) for p in range(8)]
    assert shards == [shard_of("orders", p, 4) for p in range(8)]  # same answer on every process
    assert sorted(shards[:4]) == [0, 1, 2, 3]


def test_partitions_give_each_shard_only_its_advancing_ranges():
    cfg = ReplicatorConfig(name="plan", shards=3)
    planner = ReplicationPlanner({"config": cfg.to_json()})
    planner._topics = {"orders": ("dr.orders", 6)}
    start = {"orders": {str(p): 10 for p in range(6)}}
    end = {"orders": {str(p): (10 if p == 2 else 20) for p in range(6)}}
    plans = planner.partitions(start, end)
    seen = {}
    for plan in plans:
        work = json.loads(plan.ranges)
        assert work["refresh"] == []
        for src, dst, p, s, e in work["copy"]:
            assert (src, dst) == ("orders", "dr.orders")
            assert shard_of(src, p, 3) == plan.shard
            seen[p] = (s, e)
    assert seen == {p: (10, 20) for p in range(6) if p != 2}
    assert [p.shard for p in plans] == sorted({p.shard for p in plans})


def test_idle_partitions_go_to_their_owning_shard_for_a_refresh_once_due():
    """Only the shard task that owns a partition re-commits its offset (a refresh from the driver
    would fence that shard's running writer); a batch with only refreshes is forced by an epoch."""
    cfg = ReplicatorConfig(name="plan", shards=2, offsets_refresh_interval_seconds=1.0)
    planner = ReplicationPlanner({"config": cfg.to_json()})
    planner._topics = {"t": ("t", 3)}
    start = {"t": {"0": 5, "1": 7, "2": 0}}
    begin = {("t", 0): 5, ("t", 1): 7, ("t", 2): 0}
    busy = {"t": {"0": 9, "1": 7, "2": 0}}  # partition 0 advances; 1 idle; 2 never had data
    planner._started -= 10  # the job has run longer than the refresh interval
    end = planner._with_refresh(start, busy, begin)
    assert end["#refresh"] == {"epoch": 1}
    plans = {p.shard: json.loads(p.ranges) for p in planner.partitions(start, end)}
    assert plans[shard_of("t", 1, 2)]["refresh"] == [["t", "t", 1]]
    assert all(["t", "t", 0] not in w["refresh"] and ["t", "t", 2] not in w["refresh"] for w in plans.values())
    planner.commit(end)  # the batch finished: partition 0 was copied just now
    # Nothing is due: partition 0 was just copied, 1 just refreshed; an idle source plans no batch.
    again = planner._with_refresh(end, {"t": {"0": 9, "1": 7, "2": 0}}, {("t", 0): 9, ("t", 1): 7, ("t", 2): 0})
    assert again == end


def test_stats_merge_adds_counts_and_keeps_the_furthest_offset():
    a = {"records": 3, "bytes": 30, "transactions": 1, "latency_seconds": [0.1],
         "partitions": {"t|0": [3, 30, 13, 100.0]}}
    b = {"records": 2, "bytes": 20, "transactions": 1, "latency_seconds": [0.2],
         "partitions": {"t|0": [2, 20, 11, 90.0], "t|1": [1, 5, 4, 95.0]}}
    merged = _merge(_merge({}, a), b)
    assert merged["records"] == 5 and merged["bytes"] == 50 and merged["transactions"] == 2
    assert merged["latency_seconds"] == [0.1, 0.2]
    assert merged["partitions"] == {"t|0": [5, 50, 13, 100.0], "t|1": [1, 5, 4, 95.0]}
    assert a["partitions"]["t|0"] == [3, 30, 13, 100.0]  # inputs untouched
