"""Stand-ins for the clients a ShardCopier talks to (they implement `client_cache.ShardClients` and
what the copy loop calls on a consumer and a producer), and a real copier built on them: the unit
tests of the copy loop's pure parts (delivery reports and offset pairs, rewinds, settled partitions,
stale resume points, commits in doubt) run the copier's own code without a broker."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError

from replicator.config import ReplicatorConfig
from replicator.engine.partition_copy import CopyRange, PartitionCopy
from replicator.engine.shard_copy import ShardCopier
from replicator.offsets import CommitMetadata


class Record:
    """What the copy loop reads of a consumed record (or of a consumer event, with `err`). Its value
    is its source offset, so a Target's log says which source records were written."""

    def __init__(self, topic: str, partition: int, offset: int, err: int | None = None) -> None:
        self.t, self.p, self.o, self.err = topic, partition, offset, err

    def error(self) -> KafkaError | None:
        return KafkaError(self.err) if self.err is not None else None

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def value(self) -> bytes:
        return str(self.o).encode()

    def key(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return 1, 1_000 + self.o

    def headers(self) -> None:
        return None


def records(topic: str, partition: int, offsets) -> list[Record]:
    return [Record(topic, partition, o) for o in offsets]


class Delivered:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class Target:
    """A transactional producer that appends to per-partition logs and delivers on poll(), as
    librdkafka does."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[int]] = {}  # target partition -> source offsets written
        self.pending: list = []
        self.reports = 0
        self.begun = 0

    def begin_transaction(self) -> None:
        self.begun += 1

    # confluent-kafka's own positional order, which the copy loop relies on
    def produce(self, topic, value, key, partition, callback=None, on_delivery=None, timestamp=0,
                headers=None) -> None:
        log = self.logs.setdefault((topic, partition), [])
        log.append(int(value))
        if callback is not None:
            self.reports += 1
            self.pending.append((callback, len(log) - 1))

    def poll(self, timeout) -> int:
        for callback, target_offset in self.pending:
            callback(None, Delivered(target_offset))
        self.pending.clear()
        return 0


class SourceConsumer:
    def pause(self, tps) -> None:
        pass


class Reader:
    """A group reader whose every answer is `answer`."""

    def __init__(self, answer: int) -> None:
        self.answer, self.closed = answer, False

    def close(self) -> None:
        self.closed = True


class Clients:
    """`client_cache.ShardClients` without clusters: `consumer` and `group` as given; a new group
    reader is `fresh_group` (default: another Reader with the same answer)."""

    def __init__(self, consumer: Any = None, group: Any = None, fresh_group: Any = None) -> None:
        self.consumer = consumer if consumer is not None else SourceConsumer()
        self.group, self.fresh_group = group, fresh_group

    def source_consumer(self) -> Any:
        return self.consumer

    def new_source_consumer(self) -> Any:
        return self.consumer

    def sized_for_source_link(self, topic: str) -> Any:
        return None

    def group_reader(self) -> Any:
        return self.group

    def new_group_reader(self) -> Any:
        self.group = self.fresh_group if self.fresh_group is not None else Reader(self.group.answer)
        return self.group

    def source_cluster(self) -> str:
        return "c"

    def target_cluster(self) -> str:
        return "c"

    def index_partitions(self) -> int:
        return 1


class Link:
    """The driver's end of a task's link: what it was told is settled; `up` False drops reports."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.up = True

    def report(self, stats, settled=None) -> bool:
        if self.up:
            self.sent.append(settled or {})
        return self.up


def partition_state(topic: str, partition: int, next_offset: int, end: int | None = None,
                    target_topic: str | None = None, promised: bool = True, **fields: Any) -> PartitionCopy:
    """A partition of the running attempt at `next_offset`, copied to the same partition number of
    `target_topic` (default: the same name) up to `end` (None: whatever arrives)."""
    r = CopyRange(topic, target_topic or topic, partition, -1, end)
    return PartitionCopy(r, next_offset, promised, CommitMetadata("c", topic, 1, 0), **fields)


def copier(cfg: ReplicatorConfig | None = None, target: Any = None, clients: Clients | None = None,
           fault: str | None = None) -> ShardCopier:
    """A real ShardCopier on stand-in clients, in an attempt producing to `target` (if given)."""
    c = ShardCopier(cfg if cfg is not None else ReplicatorConfig(translation_index=False), 0, fault,
                    clients if clients is not None else Clients())
    if target is not None:
        c._producer.start(target)
    return c
