"""The lag reader's failures: a cluster that does not answer is named (LagUnavailable), and a
one-off lookup waits out "not now" answers but not refusals."""

from __future__ import annotations

import socket

import pytest

from replicator.config import ReplicatorConfig
from replicator.ops import lag
from replicator.ops.lag import LagReader, LagUnavailable
from replicator.topics.sync import TopicMapping


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_an_unreachable_source_is_named():
    cfg = ReplicatorConfig(source_bootstrap_servers=f"127.0.0.1:{_closed_port()}",
                           target_bootstrap_servers=f"127.0.0.1:{_closed_port()}", topics="t")
    with pytest.raises(LagUnavailable, match="source cluster"):
        LagReader(cfg, timeout_s=2)


class _Flaky:
    """Answers "not now" `times` times, then an empty lookup (the retry logic only, no client)."""

    def __init__(self, times: int, retriable: bool) -> None:
        self.times, self.retriable, self.calls, self.closed = times, retriable, 0, False

    def lags(self, mappings):
        self.calls += 1
        if self.calls <= self.times:
            raise LagUnavailable("CoordinatorNotAvailableError", retriable=self.retriable)
        return []

    def close(self) -> None:
        self.closed = True


def test_a_one_off_lookup_waits_for_a_new_clusters_coordinator(monkeypatch):
    flaky = _Flaky(2, retriable=True)
    monkeypatch.setattr(lag, "LagReader", lambda cfg: flaky)
    monkeypatch.setattr(lag.time, "sleep", lambda s: None)
    assert lag.partition_lags(ReplicatorConfig(topics="t"), [TopicMapping("t", "t", 1)]) == []
    assert flaky.calls == 3 and flaky.closed


def test_a_refusal_is_not_retried(monkeypatch):
    flaky = _Flaky(1, retriable=False)
    monkeypatch.setattr(lag, "LagReader", lambda cfg: flaky)
    with pytest.raises(LagUnavailable):
        lag.partition_lags(ReplicatorConfig(topics="t"), [TopicMapping("t", "t", 1)])
    assert flaky.calls == 1 and flaky.closed


class _Source:
    def __init__(self, ends: dict) -> None:
        self.ends = ends

    def end_offsets(self, tps):
        return {tp: self.ends[(tp.topic, tp.partition)] for tp in tps}

    def beginning_offsets(self, tps):
        return {tp: 0 for tp in tps}


class _Group:
    """The fake group's committed offsets; remembers which partitions each read asked for."""

    def __init__(self, offsets: dict) -> None:
        self.offsets, self.asked = offsets, []

    def list_group_offsets(self, request):
        from kafka.structs import OffsetAndMetadata

        ((group, tps),) = request.items()
        self.asked.append(sorted((tp.topic, tp.partition) for tp in tps))
        return {group: {tp: OffsetAndMetadata(self.offsets.get((tp.topic, tp.partition), -1), "", -1)
                        for tp in tps}}


def _reader(source: _Source, group: _Group) -> LagReader:
    reader = object.__new__(LagReader)
    reader.group, reader._source, reader._target = "g", source, group
    reader._shape, reader._settled, reader._next_full_read, reader._known = {("t", 3)}, {}, 0.0, {}
    return reader


def test_an_idle_lookup_reads_only_the_partitions_that_are_not_settled(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(lag.time, "monotonic", lambda: clock[0])
    source = _Source({("t", 0): 10, ("t", 1): 20, ("t", 2): 5})
    group = _Group({("t", 0): 10, ("t", 1): 15})  # 0 settled, 1 behind, 2 never committed
    reader, mappings = _reader(source, group), [TopicMapping("t", "t", 3)]

    first = reader.lags(mappings)
    assert [x.records for x in first] == [0, 5, 5]
    assert group.asked[-1] == [("t", 0), ("t", 1), ("t", 2)]  # the first read is a full one

    clock[0] += 5
    group.offsets[("t", 1)] = 20
    assert [x.records for x in reader.lags(mappings)] == [0, 0, 5]
    assert group.asked[-1] == [("t", 1), ("t", 2)]  # partition 0 was settled and its end did not move

    clock[0] += 5
    source.ends[("t", 0)] = 12  # new source records: asked again, and lagging until copied
    assert [x.records for x in reader.lags(mappings)] == [2, 0, 5]
    assert group.asked[-1] == [("t", 0), ("t", 2)]

    clock[0] += LagReader.FULL_GROUP_READ_S
    del group.offsets[("t", 1)]  # the group reset behind the job's back: a full read sees it
    assert [x.records for x in reader.lags(mappings)] == [2, 20, 5]
    assert group.asked[-1] == [("t", 0), ("t", 1), ("t", 2)]


class _Counting(_Source):
    def __init__(self, ends: dict) -> None:
        super().__init__(ends)
        self.asked: list[list[tuple[str, int]]] = []

    def end_offsets(self, tps):
        self.asked.append(sorted((tp.topic, tp.partition) for tp in tps))
        return super().end_offsets(tps)


def test_partitions_the_tasks_report_settled_are_not_asked_between_full_reads(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(lag.time, "monotonic", lambda: clock[0])
    source = _Counting({("t", 0): 10, ("t", 1): 20, ("t", 2): 5})
    group = _Group({("t", 0): 10, ("t", 1): 15, ("t", 2): 5})
    reader, mappings = _reader(source, group), [TopicMapping("t", "t", 3)]
    settled = {("t", 0): 10, ("t", 2): 5}  # what the shard tasks said

    first = reader.lags(mappings, settled)  # a full read: every partition asked, the tasks' word unused
    assert [x.records for x in first] == [0, 5, 0] and source.asked[-1] == [("t", 0), ("t", 1), ("t", 2)]

    clock[0] += 5
    source.ends[("t", 0)] = 12  # a task has not fetched these yet: the lag says 0 until it does
    again = reader.lags(mappings, settled)
    assert [x.records for x in again] == [0, 5, 0]
    assert source.asked[-1] == [("t", 1)] and group.asked[-1] == [("t", 1)]  # only the one not settled
    assert [(x.source_end, x.committed, x.oldest_timestamp_ms) for x in again] == [(10, 10, -1), (20, 15, None),
                                                                                   (5, 5, -1)]

    clock[0] += 5
    del settled[("t", 0)]  # the task fetched the new records: no longer settled, asked again
    assert [x.records for x in reader.lags(mappings, settled)] == [2, 5, 0]
    assert source.asked[-1] == [("t", 0), ("t", 1)]

    clock[0] += 5
    settled[("t", 1)] = 20  # caught up: nothing is asked at all
    calls = len(source.asked)
    assert [x.records for x in reader.lags(mappings, {**settled, ("t", 0): 12})] == [0, 0, 0]
    assert len(source.asked) == calls

    clock[0] += LagReader.FULL_GROUP_READ_S  # a full read does not take the tasks' word
    group.offsets[("t", 2)] = 3  # (reset behind the job's back)
    assert [x.records for x in reader.lags(mappings, settled)] == [2, 5, 2]
