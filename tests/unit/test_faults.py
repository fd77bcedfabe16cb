"""The test faults (REPLICATOR_TEST_FAULT) wrap a shard producer: each fires where its name says, once
per attempt (commit-response-lost once per copier), and the copy loop never checks for them."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from replicator.config import ReplicatorConfig
from replicator.engine.faults import FaultyProducer, InjectedFault
from replicator.engine.partition_copy import CopyRange, PartitionCopy
from replicator.engine.shard_producer import TransactionalProducer
from replicator.offsets import CommitMetadata


class Client:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, offsets, group, timeout) -> None:
        self.calls.append("offsets")

    def commit_transaction(self, timeout) -> None:
        self.calls.append("commit")


class Group:
    def consumer_group_metadata(self) -> str:
        return "g"


class Source:
    def __init__(self) -> None:
        self.paused: list = []

    def assignment(self) -> list:
        return ["s-0"]

    def pause(self, tps) -> None:
        self.paused += tps


def producer(fault: str) -> tuple[FaultyProducer, Source]:
    source = Source()
    return FaultyProducer(TransactionalProducer(ReplicatorConfig(), 0, "job-shard-0"), fault, lambda: source), source


ADVANCED = [PartitionCopy(CopyRange("s", "t", 0, -1), 10, True, CommitMetadata("c", "s", 1, 0), first_pair=(5, 0))]


def commit(p: FaultyProducer) -> None:
    p.commit(["offsets"], Group(), ADVANCED, 0.0, lambda: None)


def test_fail_before_commit_fails_the_attempts_first_commit_before_anything_commits():
    p, _ = producer("fail-before-commit")
    client = Client()
    p.start(client)
    with pytest.raises(InjectedFault):
        commit(p)
    assert client.calls == []
    commit(p)  # the attempt's later commits go through
    assert client.calls == ["begin", "offsets", "commit"]


def test_fail_after_commit_fails_once_the_first_commit_landed():
    p, _ = producer("fail-after-commit")
    client = Client()
    p.start(client)
    with pytest.raises(InjectedFault):
        commit(p)
    assert client.calls == ["begin", "offsets", "commit"] and p.in_doubt is None


def test_stall_fetch_pauses_the_source_after_each_attempts_first_commit():
    p, source = producer("stall-fetch")
    for _ in range(2):  # two attempts
        p.start(Client())
        commit(p)
        commit(p)
    assert source.paused == ["s-0", "s-0"]


def test_a_lost_commit_response_leaves_the_landed_commit_in_doubt_once_per_copier():
    p, _ = producer("commit-response-lost")
    client = Client()
    p.start(client)
    with pytest.raises(KafkaException) as raised:
        commit(p)
    assert raised.value.args[0].code() == KafkaError._FENCED
    assert client.calls == ["begin", "offsets", "commit"] and p.in_doubt is not None
    p.start(Client())  # the next attempt
    commit(p)
    assert p.in_doubt is None


def test_an_unknown_fault_is_refused_by_name():
    with pytest.raises(ValueError, match="REPLICATOR_TEST_FAULT='fail-sometimes'"):
        producer("fail-sometimes")
