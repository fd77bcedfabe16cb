"""A shard's target producer: the one owner of init (which fences), begin, offsets, commit and abort.

Exactly-once and at-least-once have the same interface, so the copy loop never asks which one it
runs: `TransactionalProducer` commits the copied source offsets into the fake group inside the
transaction (KIP-447's `send_offsets_to_transaction`), `PlainProducer` commits them to the group
after its records were flushed.

A commit call that failed once EndTxn may have reached the coordinator leaves the transaction in
doubt; the next attempt settles it from the target's data before reading its resume points
(`commit_outcome`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from replicator.clients import kafka_clients
from replicator.clients.bounded_call import BoundedCaller
from replicator.config import ReplicatorConfig
from replicator.engine import commit_outcome, transactional_ids
from replicator.engine.partition_copy import PartitionCopy

log = logging.getLogger("replicator.shard_copy")  # the events' log, as when this lived in shard_copy

_IN_DOUBT_GRACE_S = 30.0  # past the transaction timeout, for the coordinator to write its abort
# An EndTxn round trip this long, the quickest of the last few, crosses a link (see `_ended`): on
# loopback the quickest take 1-5 ms beside one broker, and up to 12 ms beside three on a box loaded
# by make chaos's faults; across a 50 ms round trip, 50 ms and more.
_LINK_END_S = 0.020
_ENDS_SEEN = 5


@dataclass
class InDoubt:
    states: list[PartitionCopy]  # the transaction's partitions, as they stood when its commit began
    started: float


class ShardProducer(Protocol):
    client: Producer | None  # the running attempt's; the copy loop produces to it directly
    in_doubt: InDoubt | None  # a transaction whose commit call failed, until settled
    crosses_a_link: bool  # the target is a link away: its round trips are what a commit costs

    def open_client(self) -> Producer:
        """A new, initialised client (fencing the id's earlier holder)."""
        ...

    def start(self, client: Producer) -> None: ...
    def stop(self) -> None: ...

    def needs_begin(self) -> bool:
        """Whether the next record needs `begin()` first."""
        ...

    def begin(self) -> None: ...

    def commit(self, offsets: list[TopicPartition], group: Consumer, advanced: list[PartitionCopy],
               started: float, before_end: Callable[[], None]) -> None:
        """Commits the produced records and `offsets` (the advanced partitions' next source offsets).
        `before_end` (which flushes what is produced) runs once the offsets are sent and before
        anything commits; it raises to abort."""
        ...

    def abort(self) -> bool:
        """Aborts the open transaction; whether it did (else the next init resolves it)."""
        ...

    def settle_in_doubt(self) -> InDoubt | None:
        """Settles `in_doubt` (if any); the transaction when it committed, for the caller to count."""
        ...


def for_guarantee(cfg: ReplicatorConfig, shard: int, txn_id: str) -> ShardProducer:
    return TransactionalProducer(cfg, shard, txn_id) if cfg.exactly_once else PlainProducer(cfg)


class TransactionalProducer:
    def __init__(self, cfg: ReplicatorConfig, shard: int, txn_id: str) -> None:
        self.cfg, self.shard, self.txn_id = cfg, shard, txn_id
        self.client: Producer | None = None
        self.in_doubt: InDoubt | None = None
        self._begun = False  # Kafka's transaction began (at its first record, or at its offsets)
        self._bounded = BoundedCaller(f"shard-{shard}")  # the transaction calls librdkafka may not end
        # The last commits' EndTxn round trips (everything was flushed before, see `commit`).
        self._ends: deque[float] = deque(maxlen=_ENDS_SEEN)
        self.crosses_a_link = False

    def _ended(self, seconds: float) -> None:
        """Counts an EndTxn round trip. The target is a link away when even the quickest of the last
        few was as long as a link makes it (`_LINK_END_S`). Only EndTxn is timed: a refused
        registration's retry slows the flush before it, and a coordinator failing over slows one."""
        self._ends.append(seconds)
        crosses = len(self._ends) == _ENDS_SEEN and min(self._ends) >= _LINK_END_S
        if crosses != self.crosses_a_link:
            self.crosses_a_link = crosses
            log.info("the target's transaction coordinator answered EndTxn in %.1f ms at the quickest of the "
                     "last %d commits: %s", min(self._ends) * 1000, len(self._ends),
                     "a link away, so index entries and offsets join a transaction while its records are in flight"
                     if crosses else "near, so records are acknowledged before index entries and offsets join",
                     extra={"shard": self.shard, "event": "target_link", "crosses_a_link": crosses})

    def open_client(self) -> Producer:
        return transactional_ids.init_producer(self.cfg, self.txn_id, 120)

    def start(self, client: Producer) -> None:
        self.client, self._begun = client, False

    def stop(self) -> None:
        self.client, self._begun = None, False

    def needs_begin(self) -> bool:
        return not self._begun

    def begin(self) -> None:
        self.client.begin_transaction()
        self._begun = True

    def commit(self, offsets: list[TopicPartition], group: Consumer, advanced: list[PartitionCopy],
               started: float, before_end: Callable[[], None]) -> None:
        client = self.client
        if offsets:
            if not self._begun:
                self.begin()
            metadata = group.consumer_group_metadata()
            self._bounded.call(client, "send_offsets_to_transaction",
                               lambda: client.send_offsets_to_transaction(offsets, metadata, 60), 60)
        before_end()
        if self._begun:
            # From here a failure no longer means the transaction aborted (see commit_outcome).
            if any(s.first_pair is not None for s in advanced):
                self.in_doubt = InDoubt(advanced, started)
            ending = time.monotonic()
            self._bounded.call(client, "commit_transaction", lambda: client.commit_transaction(60), 60)
            self._ended(time.monotonic() - ending)
            self.in_doubt = None
        self._begun = False

    def abort(self) -> bool:
        if self.client is None:
            return False
        try:
            self.client.abort_transaction(30)
            return True
        except KafkaException as e:
            log.warning("abort failed (%s); the next init_transactions() resolves it", e.args[0].str())
            return False

    def settle_in_doubt(self) -> InDoubt | None:
        """Learns from the target's data whether the transaction whose commit call failed committed.
        Asked until decided: the coordinator aborts an open transaction at its timeout at the latest,
        and copying on without knowing could copy it twice."""
        doubt = self.in_doubt
        if doubt is None:
            return None
        probe = next(s for s in doubt.states if s.first_pair is not None)
        where = (probe.r.target_topic, probe.r.partition, probe.first_pair[1])
        give_up = time.monotonic() + self.cfg.transaction_timeout_ms / 1000 + _IN_DOUBT_GRACE_S
        waited = 0.5
        while (committed := commit_outcome.committed(self.cfg, *where)) is None:
            if time.monotonic() >= give_up:
                raise RuntimeError(f"shard {self.shard}: cannot tell whether the transaction that wrote "
                                   f"{where[0]}[{where[1]}]@{where[2]} committed: its commit call failed and the "
                                   f"target has not shown the outcome within the transaction timeout")
            log.warning("commit in doubt: %s[%d]@%d is not decided on the target yet; asking again", *where,
                        extra={"shard": self.shard, "event": "commit_in_doubt"})
            time.sleep(waited)
            waited = min(waited * 2, 5.0)
        self.in_doubt = None
        records = sum(s.records for s in doubt.states)
        log.warning("commit in doubt: the failed commit call's transaction %s (%d records)",
                    "committed: its positions are kept" if committed else "aborted: it is copied again", records,
                    extra={"shard": self.shard, "event": "commit_in_doubt_settled", "committed": committed})
        return doubt if committed else None


class PlainProducer:
    """At least once: no transaction; the offsets go to the group once the records are acknowledged
    (a failure in between copies them again), so no commit is ever in doubt."""

    in_doubt = None
    crosses_a_link = False  # nothing to gain: it sends no offsets before the records are acknowledged

    def __init__(self, cfg: ReplicatorConfig) -> None:
        self.cfg = cfg
        self.client: Producer | None = None

    def open_client(self) -> Producer:
        return kafka_clients.target_producer(self.cfg, None)

    def start(self, client: Producer) -> None:
        self.client = client

    def stop(self) -> None:
        self.client = None

    def needs_begin(self) -> bool:
        return False

    def begin(self) -> None:
        pass

    def commit(self, offsets: list[TopicPartition], group: Consumer, advanced: list[PartitionCopy],
               started: float, before_end: Callable[[], None]) -> None:
        before_end()
        if offsets:
            group.commit(offsets=offsets, asynchronous=False)

    def abort(self) -> bool:
        return False

    def settle_in_doubt(self) -> InDoubt | None:
        return None
