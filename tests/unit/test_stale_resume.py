"""A resume point below what this run is known to have committed was read from a coordinator that
missed the commit (a broker cut off from its cluster still answers): the task asks again on a new
client instead of copying those records a second time."""

from __future__ import annotations

from replicator.config import ReplicatorConfig
from replicator.engine import client_cache, shard_copy
from replicator.engine.partition_copy import CopyRange
from replicator.engine.shard_copy import ShardCopier
from replicator.offsets import Committed
from tests.unit.copier_fakes import Clients, Reader, copier


def answering(monkeypatch) -> None:
    monkeypatch.setattr(shard_copy, "read_committed",
                        lambda reader, tps: {tp: Committed(reader.answer, None) for tp in tps})
    monkeypatch.setattr(shard_copy.time, "sleep", lambda s: None)


def with_floors(floors: dict, clients: Clients) -> ShardCopier:
    c = copier(clients=clients)
    c._partitions.floors = floors
    return c


def test_a_stale_answer_is_asked_again_on_a_new_client(monkeypatch):
    answering(monkeypatch)
    stale, fresh = Reader(300), Reader(500)
    c = with_floors({("s", 0): 500}, Clients(group=stale, fresh_group=fresh))
    got = c._read_resume_points([CopyRange("s", "t", 0, -1)], lambda: False)
    assert got[("t", 0)].offset == 500
    assert stale.closed and c.group is fresh


def test_a_task_told_to_end_does_not_copy_from_a_stale_answer(monkeypatch):
    answering(monkeypatch)
    c = with_floors({("s", 0): 500}, Clients(group=Reader(300)))
    assert c._read_resume_points([CopyRange("s", "t", 0, -1)], lambda: True) is None


def test_an_answer_at_or_above_the_floor_or_without_one_is_taken(monkeypatch):
    answering(monkeypatch)
    c = with_floors({("s", 0): 500}, Clients(group=Reader(520)))
    ranges = [CopyRange("s", "t", 0, -1), CopyRange("s", "t", 1, -1)]  # partition 1: nothing known
    got = c._read_resume_points(ranges, lambda: True)
    assert got[("t", 0)].offset == 520 and got[("t", 1)].offset == 520


def test_a_new_group_reader_is_the_next_copiers_too(monkeypatch):
    monkeypatch.setattr(client_cache, "_group_readers", {})
    made = iter([Reader(1), Reader(2)])
    monkeypatch.setattr(client_cache.kafka_clients, "group_reader", lambda cfg: next(made))
    cfg = ReplicatorConfig()
    first = client_cache.CachedClients(cfg)
    assert first.group_reader().answer == 1
    fresh = first.new_group_reader()
    assert fresh.answer == 2 and client_cache.CachedClients(cfg).group_reader() is fresh
