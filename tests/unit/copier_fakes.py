"""Stand-ins for what a ShardCopier talks to, and a copier built without clients: the unit tests of the
copy loop's pure parts (delivery reports and offset pairs, rewinds, settled partitions, stale resume
points, commits in doubt, the transaction rhythm) share one picture of its state, which
`test_copier_fakes` keeps equal to what `ShardCopier.__init__` sets."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError

from replicator.engine.shard_copy import CopyRange, CopyStats, ShardCopier, _PartitionState
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

    def begin_transaction(self) -> None:
        pass

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
                    target_topic: str | None = None, promised: bool = True, **fields: Any) -> _PartitionState:
    """A partition of the running attempt at `next_offset`, copied to the same partition number of
    `target_topic` (default: the same name) up to `end` (None: whatever arrives)."""
    r = CopyRange(topic, target_topic or topic, partition, -1, end)
    return _PartitionState(r, next_offset, promised, CommitMetadata("c", topic, 1, 0), **fields)


def bare_copier(cfg: Any = None, **state: Any) -> ShardCopier:
    """A ShardCopier in the state `__init__` leaves it in, without clients; `state` replaces
    attributes by name (`_floors=...`)."""
    c = object.__new__(ShardCopier)
    attrs: dict[str, Any] = {
        "cfg": cfg if cfg is not None else SimpleNamespace(exactly_once=True),
        "shard": 0, "txn_id": "job-0", "fault": None, "_key": "k", "source_cluster": "c",
        "consumer": SourceConsumer(), "group": None, "provenance": None, "index_partitions": 0,
        "stats": CopyStats(), "_bounded": None, "_fetches": None, "_link": None, "_reported": 0.0,
        "_txn_started": None, "_txn_records": 0, "_txn_begun": False, "_committed": False,
        "_commit_cost": 0.0, "_rate": 0.0, "_record_cost": 0.0, "_txn_busy": 0.0, "_work_began": 0.0,
        "_cycle_began": None, "_consume_error_logged": -100.0, "_paused": [], "_floors": {},
        "_in_doubt": None, "_states": {}, "_sent_settled": {}, "_settled_checked": 0.0,
        "_settled_resent": 0.0, "_behind_until": 0.0, "_catching_up": False, "_waited": False,
    }
    unknown = state.keys() - attrs.keys()
    if unknown:
        raise AttributeError(f"ShardCopier has no {sorted(unknown)}")
    attrs.update(state)
    for name, value in attrs.items():
        setattr(c, name, value)
    return c
