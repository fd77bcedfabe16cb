"""Exactly-once under faults, checked by an independent audit and a concurrent reader.

`make test` runs the reduced runs: every single-broker fault kind once on a small workload
(transaction.version 2), the network kinds once, and four three-broker kinds once.
`make chaos` runs the full matrix (>= 1M records, >= 20 replicator kills, >= 4 broker bounces,
>= 4 pauses, one zombie) and the multi-broker matrix (>= 1M records on two three-broker clusters,
every multi-broker and slow-network kind 3 times), each for transaction.version 2 and 0;
docs/reliability.md records the current results.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from replicator.sandbox import Sandbox
from tests.chaos.scenario import (
    FAULT_KINDS,
    MULTI_BROKER_FAULT_KINDS,
    NETWORK_FAULT_KINDS,
    SLOW_NETWORK_FAULT_KINDS,
    ChaosResult,
    ChaosRun,
)

# The full matrix; both knobs exist only to record a scaled-down run honestly in docs/reliability.md.
FULL_RECORDS = int(os.environ.get("REPLICATOR_CHAOS_RECORDS", "1000000"))
KILL_ROUNDS = int(os.environ.get("REPLICATOR_CHAOS_KILL_ROUNDS", "10"))
FULL_FAULTS = (["kill", "term"] * KILL_ROUNDS + ["pause", "zombie", "pause", "source-kill", "source-bounce",
                                                  "target-kill", "target-bounce", "target-pause", "target-pause"])
# The multi-broker matrix: every kind MULTI_ROUNDS times. Target kinds first, so most of them strike
# while the 1M records are still being copied: a source kind waits for the source's transactional
# copiers to finish (they are the ground truth's writers and must not die under the test).
MULTI_ROUNDS = int(os.environ.get("REPLICATOR_CHAOS_MULTI_ROUNDS", "3"))
_MULTI_KINDS = MULTI_BROKER_FAULT_KINDS + SLOW_NETWORK_FAULT_KINDS
MULTI_FAULTS = ([k for k in _MULTI_KINDS if k.startswith("target")] * MULTI_ROUNDS
                + [k for k in _MULTI_KINDS if k.startswith("source")] * MULTI_ROUNDS)


def assert_exactly_once(result: ChaosResult) -> None:
    report = result.verify
    assert result.verify_exit == 0 and report.get("ok") is True, report.get("violations", report)
    totals = report["totals"]
    # The audit: target == source record for record, up to a fake group equal to the source end.
    for kind in ("duplicates", "missing", "extra", "reordered", "aborted_visible", "foreign", "lag"):
        assert totals[kind] == 0, (kind, totals)
    assert totals["source_records"] == totals["target_records"] > 0
    assert report["lost_acked"] == 0, "values VerifiableProducer saw acknowledged are missing"
    assert all(p["lso_equals_hw"] for p in report["partitions"]), "LSO < HW on a target partition"
    assert report["hanging_transactions"] == [] and report["open_transactions"] == []
    assert result.group_equals_source_end
    # The concurrent read_committed reader, during the faults.
    assert result.reader_out_of_order == [], result.reader_out_of_order
    assert result.reader_errors == []
    assert result.reader_records == totals["target_records"]
    assert result.vp_values_seen == result.vp_acked == result.records
    assert result.trickle_aborted_seen == 0, "values of aborted source transactions were read on the target"
    assert result.trickle_committed <= result.trickle_seen <= result.trickle_committed + result.trickle_uncertain


def test_every_fault_kind_once_keeps_exactly_once(sandbox, unique, tmp_path):
    result = ChaosRun(sandbox, tmp_path, unique, records=20_000, faults=FAULT_KINDS).run()
    assert result.faults == list(FAULT_KINDS)
    assert_exactly_once(result)


def test_network_faults_keep_exactly_once(sandbox, unique, tmp_path):
    """iptables cuts between the clients and one cluster, shorter and longer than the transaction
    timeout, while brokers and replicator keep running; then the slow link. One run for both (one
    workload set-up less in `make test`): the replicator reaches the target through the delay
    proxies throughout (100 ms one way and 1 MiB/s during the slow kinds, no delay otherwise), and
    a target partition cuts the proxies' leg to the broker too."""
    kinds = NETWORK_FAULT_KINDS + SLOW_NETWORK_FAULT_KINDS
    result = ChaosRun(sandbox, tmp_path, unique, records=5_000, faults=kinds).run()
    assert result.faults == list(kinds)
    assert_exactly_once(result)


@pytest.fixture(params=[2, 0], ids=["tv2", "tv0"])
def multi_broker_sandbox(request, tmp_path_factory):
    """Three brokers per cluster (RF 3, min.insync.replicas 2), the target on transaction.version 2
    or 0, on their own ports: + 80 on the shift for tv2, + 100 for tv0 (+ 50 is the single-broker
    tv0 pair's, + 60 the version matrix's, + 70 the secure pair's). A three-broker cluster spans
    port .. port + 11 (nodes 2 ports apart, each with a controller port and, on the target, the
    proxied listener at + 6 and its delay proxy at + 7), so + 90 would share port numbers with
    + 80's, which the partition rules match on whatever the address."""
    tv = request.param
    shift = int(os.environ.get("REPLICATOR_SANDBOX_PORT_SHIFT", "0")) + (80 if tv == 2 else 100)
    box = Sandbox(root=tmp_path_factory.mktemp(f"sandbox-3-tv{tv}"), brokers=3, proxied_target=True,
                  target_tv=None if tv == 2 else 0, port_shift=shift)
    box.tv = tv
    box.up(fresh=True)
    yield box
    box.down()


# `make test`'s reduced three-broker run: one fault of each role a production cluster moves (the
# partition leader, both coordinators, the leader and the group coordinator each cut off from their
# peers) on a small workload, the target on transaction.version 2. The rolling restarts and the
# source kinds are left to `make chaos`: they cost minutes each here and strike the same code paths.
REDUCED_MULTI_FAULTS = ("target-leader-kill", "target-txn-coordinator-kill", "target-group-coordinator-kill",
                        "target-leader-isolate", "target-group-coordinator-isolate")


def test_three_broker_failovers_once_keep_exactly_once(tmp_path_factory, unique, tmp_path):
    shift = int(os.environ.get("REPLICATOR_SANDBOX_PORT_SHIFT", "0")) + 80  # the tv2 matrix's ports
    box = Sandbox(root=tmp_path_factory.mktemp("sandbox-3"), brokers=3, port_shift=shift)
    box.up(fresh=True)
    try:
        result = ChaosRun(box, tmp_path, unique, records=5_000, partitions=4, faults=REDUCED_MULTI_FAULTS,
                          shards=2).run()
    finally:
        box.down()
    assert result.faults == list(REDUCED_MULTI_FAULTS)
    assert_exactly_once(result)


@pytest.mark.chaos
def test_multi_broker_fault_matrix(multi_broker_sandbox, unique, tmp_path):
    """Leader and coordinator failover, rolling restarts, a leader cut off from its peers and the
    slow link to every target broker, each MULTI_ROUNDS times, on 1M records: a broker fault is an
    election here.

    In `make chaos`, not `make test`: the once-each run alone took 10 to 14 minutes, and on a crowded
    machine (load average ~25) two of three early runs ended with the job's streaming query failing
    on Spark's hard-coded 10 s Python worker connect-back timeout (docs/reliability.md, "Known limits")."""
    box = multi_broker_sandbox
    out = os.environ.get("REPLICATOR_CHAOS_OUT")
    workdir = Path(out) / f"multi-tv{box.tv}-{unique}" if out else tmp_path
    workdir.mkdir(parents=True, exist_ok=True)
    result = ChaosRun(box, workdir, unique, records=FULL_RECORDS, partitions=4, faults=MULTI_FAULTS,
                      shards=2).run()
    assert result.faults == MULTI_FAULTS
    assert_exactly_once(result)


@pytest.fixture
def tv0_sandbox(tmp_path_factory):
    """A second pair of clusters whose target runs transaction.version 0 (pre-KIP-890)."""
    shift = int(os.environ.get("REPLICATOR_SANDBOX_PORT_SHIFT", "0")) + 50
    old = os.environ.get("REPLICATOR_SANDBOX_PORT_SHIFT")
    os.environ["REPLICATOR_SANDBOX_PORT_SHIFT"] = str(shift)
    try:
        box = Sandbox(root=tmp_path_factory.mktemp("sandbox-tv0"), target_tv=0)
    finally:
        if old is None:
            del os.environ["REPLICATOR_SANDBOX_PORT_SHIFT"]
        else:
            os.environ["REPLICATOR_SANDBOX_PORT_SHIFT"] = old
    box.up(fresh=True)
    yield box
    box.down()


@pytest.mark.chaos
@pytest.mark.parametrize("tv", [2, 0])
def test_full_fault_matrix(request, tv, unique, tmp_path):
    box = request.getfixturevalue("sandbox" if tv == 2 else "tv0_sandbox")
    # REPLICATOR_CHAOS_OUT keeps the logs, ground truth and verify report of a run (docs/reliability.md).
    out = os.environ.get("REPLICATOR_CHAOS_OUT")
    workdir = Path(out) / f"tv{tv}-{unique}" if out else tmp_path
    workdir.mkdir(parents=True, exist_ok=True)
    result = ChaosRun(box, workdir, unique, records=FULL_RECORDS, partitions=4, faults=FULL_FAULTS, shards=2).run()
    assert result.faults == FULL_FAULTS
    assert_exactly_once(result)
