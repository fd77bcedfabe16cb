"""A commit call that fails after the transaction may have committed (the coordinator moved, the
retried EndTxn came back fenced) leaves it in doubt. The target's data settles it; a transaction
that did commit is counted once and its end positions become floors, so a stale group answer from
before it is refused instead of copying its records a second time (docs/reliability.md, "What the faults found")."""

from __future__ import annotations

import pytest

from replicator.config import ReplicatorConfig
from replicator.engine import commit_outcome, shard_copy, shard_producer
from replicator.engine.partition_copy import CopyRange, PartitionCopy
from replicator.engine.shard_copy import ShardCopier
from replicator.engine.shard_producer import InDoubt, TransactionalProducer
from replicator.offsets import CommitMetadata, Committed
from tests.unit.copier_fakes import Clients, Reader, copier


def test_a_read_from_the_probe_offset_tells_commit_abort_or_open():
    assert commit_outcome.outcome(100, seen=100, end=None) is True  # the record itself: committed
    assert commit_outcome.outcome(100, seen=104, end=None) is False  # skipped as aborted
    assert commit_outcome.outcome(100, seen=None, end=106) is False  # stable end past it, nothing returned
    assert commit_outcome.outcome(100, seen=None, end=100) is None  # still open: the stable end stops at it
    assert commit_outcome.outcome(100, seen=None, end=None) is None  # nothing heard: ask again


def in_doubt(monkeypatch, group_answer: int, fresh_answer: int, outcomes: list, **cfg) -> ShardCopier:
    """A shard whose last transaction copied source offsets 40..49 of s[0] (target 200..209) and whose
    commit call failed; the group first answers `group_answer`, a new reader `fresh_answer`."""
    st = PartitionCopy(CopyRange("s", "t", 0, -1), 50, True, CommitMetadata("src", "s", 1, 0, job="job"),
                       dirty=True, records=10, bytes=1_000, txn_begin=40, first_pair=(40, 200), pair=(49, 209))
    c = copier(ReplicatorConfig(name="job", translation_index=False, **cfg),
               clients=Clients(group=Reader(group_answer), fresh_group=Reader(fresh_answer)))
    c._partitions.floors = {("s", 0): 40}
    c._producer.in_doubt = InDoubt([st], 0.0)
    answers = iter(outcomes)
    asked = []
    monkeypatch.setattr(commit_outcome, "committed",
                        lambda cfg, topic, partition, offset: asked.append((topic, partition, offset)) or next(answers))
    monkeypatch.setattr(shard_copy, "read_committed",
                        lambda reader, tps: {tp: Committed(reader.answer, None) for tp in tps})
    monkeypatch.setattr(shard_copy.time, "sleep", lambda s: None)
    c.asked = asked
    return c


def test_a_commit_that_landed_is_kept_though_the_group_answers_from_before_it(monkeypatch):
    c = in_doubt(monkeypatch, group_answer=40, fresh_answer=50, outcomes=[True])
    states = c._resume_points([CopyRange("s", "t", 0, -1)])
    assert states[("s", 0)].next == 50  # not 40: records 40..49 are on the target already
    assert c.asked == [("t", 0, 200)]
    assert c._producer.in_doubt is None and c._partitions.floors[("s", 0)] == 50
    assert c.stats.records == 10 and c.stats.transactions == 1 and c.stats.partitions["s|0"][:3] == [10, 1_000, 50]


def test_a_commit_that_aborted_is_copied_again(monkeypatch):
    c = in_doubt(monkeypatch, group_answer=40, fresh_answer=40, outcomes=[False])
    states = c._resume_points([CopyRange("s", "t", 0, -1)])
    assert states[("s", 0)].next == 40
    assert c._producer.in_doubt is None and c._partitions.floors[("s", 0)] == 40 and c.stats.records == 0


def test_an_open_transaction_is_asked_about_again_until_decided(monkeypatch):
    c = in_doubt(monkeypatch, group_answer=50, fresh_answer=50, outcomes=[None, None, True])
    assert c._resume_points([CopyRange("s", "t", 0, -1)])[("s", 0)].next == 50
    assert len(c.asked) == 3 and c.stats.records == 10


def test_a_transaction_never_decided_fails_the_task_rather_than_guess(monkeypatch):
    c = in_doubt(monkeypatch, group_answer=40, fresh_answer=40, outcomes=[None] * 1_000, transaction_timeout_ms=1)
    monkeypatch.setattr(shard_producer, "_IN_DOUBT_GRACE_S", 0.0)
    with pytest.raises(RuntimeError, match=r"cannot tell whether the transaction that wrote t\[0\]@200 committed"):
        c._resume_points([CopyRange("s", "t", 0, -1)])


class _Client:
    """A transactional client whose commit call fails as `commit_fails` says."""

    def __init__(self, commit_fails: bool) -> None:
        self.commit_fails, self.calls = commit_fails, []

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, offsets, group, timeout) -> None:
        self.calls.append("offsets")

    def commit_transaction(self, timeout) -> None:
        self.calls.append("commit")
        if self.commit_fails:
            raise RuntimeError("the coordinator moved")


class _Group:
    def consumer_group_metadata(self) -> str:
        return "g"


@pytest.mark.parametrize("fails", [False, True])
def test_a_commit_is_in_doubt_exactly_while_its_call_may_have_committed(fails):
    p = TransactionalProducer(ReplicatorConfig(), 0, "job-shard-0")
    client = _Client(fails)
    p.start(client)
    st = PartitionCopy(CopyRange("s", "t", 0, -1), 50, True, CommitMetadata("c", "s", 1, 0), first_pair=(40, 200))
    if fails:
        with pytest.raises(RuntimeError):
            p.commit(["offsets"], _Group(), [st], 1.0, lambda: None)
        assert p.in_doubt is not None and p.in_doubt.states == [st]
    else:
        p.commit(["offsets"], _Group(), [st], 1.0, lambda: None)
        assert p.in_doubt is None
    assert client.calls == ["begin", "offsets", "commit"]  # begun by the offsets when no record did


def test_the_target_is_a_link_away_when_even_the_quickest_of_the_last_end_txns_was_slow():
    producer = TransactionalProducer(ReplicatorConfig(name="job"), 0, "job-shard-0")
    for _ in range(4):
        producer._ended(0.05)
    assert not producer.crosses_a_link  # too few seen yet
    producer._ended(0.06)
    assert producer.crosses_a_link
    producer._ended(0.002)  # one quick EndTxn: the coordinator is near
    assert not producer.crosses_a_link
