"""A resume point below what this run is known to have committed was read from a coordinator that
missed the commit (a broker cut off from its cluster still answers): the task asks again on a new
client instead of copying those records a second time."""

from __future__ import annotations

from types import SimpleNamespace

from replicator.engine import shard_copy
from replicator.engine.shard_copy import CopyRange, ShardCopier
from replicator.offsets import Committed
from tests.unit.copier_fakes import Reader, bare_copier


def copier(floors: dict, reader: Reader) -> ShardCopier:
    return bare_copier(SimpleNamespace(group="g"), _floors=floors, group=reader)


def test_a_stale_answer_is_asked_again_on_a_new_client(monkeypatch):
    fresh = Reader(500)
    monkeypatch.setattr(shard_copy, "read_committed",
                        lambda reader, tps: {tp: Committed(reader.answer, None) for tp in tps})
    monkeypatch.setattr(shard_copy.kafka_clients, "group_reader", lambda cfg: fresh)
    monkeypatch.setattr(shard_copy.time, "sleep", lambda s: None)
    stale = Reader(300)
    c = copier({("s", 0): 500}, stale)
    got = c._read_resume_points([CopyRange("s", "t", 0, -1)], lambda: False)
    assert got[("t", 0)].offset == 500
    assert stale.closed and c.group is fresh and shard_copy._group_readers["k"] is fresh


def test_a_task_told_to_end_does_not_copy_from_a_stale_answer(monkeypatch):
    monkeypatch.setattr(shard_copy, "read_committed",
                        lambda reader, tps: {tp: Committed(reader.answer, None) for tp in tps})
    c = copier({("s", 0): 500}, Reader(300))
    assert c._read_resume_points([CopyRange("s", "t", 0, -1)], lambda: True) is None


def test_an_answer_at_or_above_the_floor_or_without_one_is_taken(monkeypatch):
    monkeypatch.setattr(shard_copy, "read_committed",
                        lambda reader, tps: {tp: Committed(reader.answer, None) for tp in tps})
    c = copier({("s", 0): 500}, Reader(520))
    ranges = [CopyRange("s", "t", 0, -1), CopyRange("s", "t", 1, -1)]  # partition 1: nothing known
    got = c._read_resume_points(ranges, lambda: True)
    assert got[("t", 0)].offset == 520 and got[("t", 1)].offset == 520
