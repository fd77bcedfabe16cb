"""A resume point below what this run is known to have committed is wrong: a broker cut off from its
cluster still answers from what it had, and after a coordinator failover during a commit the group
was seen never to show a committed transaction's offsets. The task asks a new client once; what is
still behind resumes at its floor and is committed again, so that a restart reads it back."""

from __future__ import annotations

import time

from replicator.config import ReplicatorConfig
from replicator.engine import client_cache, shard_copy
from replicator.engine.partition_copy import CopyRange
from replicator.engine.shard_copy import ShardCopier
from replicator.offsets import CommitMetadata, Committed
from tests.unit.copier_fakes import Clients, Reader, copier


def answering(monkeypatch) -> None:
    """Every read answers its reader's offset, committed just now (so no refresh is due)."""
    meta = CommitMetadata("c", "s", 1, 0, committed_at=int(time.time()))
    monkeypatch.setattr(shard_copy, "read_committed",
                        lambda reader, tps: {tp: Committed(reader.answer, meta) for tp in tps})
    monkeypatch.setattr(shard_copy.time, "sleep", lambda s: None)


def with_floors(floors: dict, clients: Clients) -> ShardCopier:
    c = copier(clients=clients)
    c._partitions.floors = floors
    return c


def test_a_stale_answer_is_asked_again_on_a_new_client(monkeypatch):
    answering(monkeypatch)
    stale, fresh = Reader(300), Reader(500)
    c = with_floors({("s", 0): 500}, Clients(group=stale, fresh_group=fresh))
    states = c._resume_points([CopyRange("s", "t", 0, -1)])
    assert states[("s", 0)].next == 500 and not states[("s", 0)].dirty  # the fresh answer holds it
    assert stale.closed and c.group is fresh


def test_a_partition_still_behind_resumes_at_its_floor_and_commits_it_again(monkeypatch):
    answering(monkeypatch)
    c = with_floors({("s", 0): 500, ("s", 1): 200}, Clients(group=Reader(300), fresh_group=Reader(300)))
    states = c._resume_points([CopyRange("s", "t", 0, -1), CopyRange("s", "t", 1, -1)])
    behind, ahead = states[("s", 0)], states[("s", 1)]
    assert behind.next == 500 and behind.txn_begin == 500 and behind.dirty and behind.refresh
    assert ahead.next == 300 and not ahead.dirty  # above its floor: the group's answer


def test_a_partition_behind_with_its_floor_past_its_end_copies_nothing_but_commits_the_floor(monkeypatch):
    answering(monkeypatch)
    c = with_floors({("s", 0): 500}, Clients(group=Reader(300), fresh_group=Reader(300)))
    st = c._resume_points([CopyRange("s", "t", 0, -1, 450)])[("s", 0)]
    assert st.done and st.dirty and st.next == 500


def test_a_partition_copied_past_its_end_and_not_behind_is_left_out(monkeypatch):
    answering(monkeypatch)
    c = with_floors({("s", 0): 500}, Clients(group=Reader(500)))
    assert c._resume_points([CopyRange("s", "t", 0, -1, 450)]) == {}


def test_an_answer_at_or_above_the_floor_or_without_one_is_taken(monkeypatch):
    answering(monkeypatch)
    stale = Reader(520)
    c = with_floors({("s", 0): 500}, Clients(group=stale))
    ranges = [CopyRange("s", "t", 0, -1), CopyRange("s", "t", 1, -1)]  # partition 1: nothing known
    states = c._resume_points(ranges)
    assert states[("s", 0)].next == 520 and states[("s", 1)].next == 520
    assert not stale.closed  # nothing was behind: no second question


def test_a_new_group_reader_is_the_next_copiers_too(monkeypatch):
    monkeypatch.setattr(client_cache, "_group_readers", {})
    made = iter([Reader(1), Reader(2)])
    monkeypatch.setattr(client_cache.kafka_clients, "group_reader", lambda cfg: next(made))
    cfg = ReplicatorConfig()
    first = client_cache.CachedClients(cfg)
    assert first.group_reader().answer == 1
    fresh = first.new_group_reader()
    assert fresh.answer == 2 and client_cache.CachedClients(cfg).group_reader() is fresh
