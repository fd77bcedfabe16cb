"""Test-only faults (REPLICATOR_TEST_FAULT), injected by wrapping a copier's shard producer: the copy
loop itself never asks whether a fault is set.

- fail-before-commit: the attempt's first commit fails after its records were produced;
- fail-after-commit: the attempt fails after its first commit;
- stall-fetch: after the attempt's first commit the source consumer stops fetching without a word
  (librdkafka #5153, simulated);
- commit-response-lost: the copier's first commit lands and its caller is told "fenced" (a coordinator
  that moved while EndTxn was in flight), which leaves the transaction in doubt.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from replicator.engine.partition_copy import PartitionCopy
from replicator.engine.shard_producer import ShardProducer

FAULTS = ("fail-before-commit", "fail-after-commit", "stall-fetch", "commit-response-lost")


class InjectedFault(RuntimeError):
    """Test-only failure (REPLICATOR_TEST_FAULT) to prove task retries stay exact."""


def fault_for_attempt(attempt: int) -> str | None:
    """Test-only fault injection, active on a task's first attempt so Spark's retry must repair it."""
    fault = os.environ.get("REPLICATOR_TEST_FAULT")
    return fault if fault and attempt == 0 else None


class FaultyProducer:
    """`inner`, failing as `fault` says; `source()` is the copier's current source consumer."""

    def __init__(self, inner: ShardProducer, fault: str, source: Callable[[], Consumer]) -> None:
        if fault not in FAULTS:
            raise ValueError(f"REPLICATOR_TEST_FAULT={fault!r}: expected one of {', '.join(FAULTS)}")
        self._inner, self._fault, self._source = inner, fault, source
        self._armed = False  # the attempt's first commit is still ahead
        self._response_lost = fault != "commit-response-lost"  # once per copier

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def start(self, client: Producer) -> None:
        if not self._response_lost:
            client = _ResponseLost(client, self)
        self._inner.start(client)
        self._armed = True

    def commit(self, offsets: list[TopicPartition], group: Consumer, advanced: list[PartitionCopy],
               started: float, before_end: Callable[[], None]) -> None:
        armed, self._armed = self._armed, False
        if armed and self._fault == "fail-before-commit":
            raise InjectedFault("test fault: failing after producing, before commit")
        self._inner.commit(offsets, group, advanced, started, before_end)
        if armed and self._fault == "fail-after-commit":
            raise InjectedFault("test fault: failing after the first committed transaction")
        if armed and self._fault == "stall-fetch":
            source = self._source()
            source.pause(source.assignment())


class _ResponseLost:
    """A client whose first commit_transaction() commits and then reports the retried EndTxn fenced."""

    def __init__(self, client: Producer, owner: FaultyProducer) -> None:
        self._client, self._owner = client, owner

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def commit_transaction(self, *args) -> None:
        self._client.commit_transaction(*args)
        if not self._owner._response_lost:
            self._owner._response_lost = True
            raise KafkaException(KafkaError(KafkaError._FENCED, "test fault: the commit landed, its "
                                            "response was lost and the retry came back fenced"))
