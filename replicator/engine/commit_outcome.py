"""Whether a transaction whose commit call failed committed after all, read from the target's data.

A commit_transaction() that fails once EndTxn may have reached the coordinator leaves the
transaction in doubt: when the coordinator moved while the commit was in flight, the commit landed
and the retried EndTxn came back "fenced" (transaction version 2 bumps the producer epoch with
every commit). Re-reading the fake group should then show the committed offsets, but in the
three-broker chaos run a group-coordinator failover answered the offsets from before that commit,
and the shard copied its last five records per partition a second time (docs/reliability.md,
"What the faults found"). The data cannot be stale that way: a read_committed read at a target offset the
transaction wrote (from its delivery reports) returns that record if the transaction committed,
skips it once the transaction is known aborted, and stops short of it while it is still open.
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, TopicPartition

from replicator.clients import kafka_clients
from replicator.config import ReplicatorConfig


def outcome(probe: int, seen: int | None, end: int | None) -> bool | None:
    """Committed (True), aborted (False) or not decided yet (None), from a read_committed read that
    started at target offset `probe`: the offset of the first record it returned (`seen`), or,
    when none, where the partition ended for it (`end`, the last stable offset)."""
    if seen is not None:
        return seen == probe  # a later record: the one at `probe` was aborted and skipped
    if end is not None and end > probe:
        return False  # the stable end is past it and nothing was returned: aborted
    return None  # the end is at or below it: the transaction is still open (or the read saw nothing)


def committed(cfg: ReplicatorConfig, topic: str, partition: int, offset: int, timeout: float = 10.0
              ) -> bool | None:
    """outcome() of the transaction that wrote `offset` of target `topic`[`partition`], read now."""
    consumer = kafka_clients.target_probe(cfg)
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            m = consumer.poll(min(left, 1.0))
            if m is None:
                continue
            if m.error() is None:
                return outcome(offset, m.offset(), None)
            if m.error().code() == KafkaError._PARTITION_EOF:
                return outcome(offset, None, m.offset())
            # any other error (a leader moving) is retried by the consumer itself
        return None
    finally:
        consumer.close()
