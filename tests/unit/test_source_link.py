"""A source a link away gets a copy consumer with larger fetches; a near one keeps the defaults."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from replicator.clients import kafka_clients, source_link
from replicator.config import ReplicatorConfig
from replicator.engine import client_cache
from replicator.engine.shard_partitions import ShardPartitions
from replicator.engine.source_reader import SourceReader
from replicator.engine.task_report import TaskReport
from replicator.engine.transaction_rhythm import TransactionRhythm
from tests.unit.copier_fakes import Clients, partition_state


class Clock:
    """`source_link`'s clock: it moves only when a metadata request takes its time."""

    now = 0.0

    @classmethod
    def monotonic(cls) -> float:
        return cls.now


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    monkeypatch.setattr(Clock, "now", 0.0)
    monkeypatch.setattr(source_link, "time", Clock)


class Source:
    """A consumer whose metadata requests take `delays` seconds in turn (None: the source is down)."""

    def __init__(self, *delays: float | None, across_a_link: bool = False) -> None:
        self.delays, self.across_a_link, self.topics_asked = list(delays), across_a_link, []
        self.assigned, self.closed = None, False

    def list_topics(self, topic=None, timeout=-1):
        self.topics_asked.append(topic)
        delay = self.delays.pop(0) if self.delays else 0.0
        if delay is None:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        Clock.now += delay

    def assign(self, tps) -> None:
        self.assigned = tps

    def close(self) -> None:
        self.closed = True


def test_the_quicker_of_two_round_trips_decides():
    slow_once = Source(0.05, 0.0)
    assert source_link.round_trip_s(slow_once, "t") < source_link.LINK_S  # one slow answer is not a link
    assert slow_once.topics_asked == ["t", "t"]
    assert source_link.crosses_a_link(source_link.round_trip_s(Source(0.03, 0.025), "t"))
    assert source_link.round_trip_s(Source(None), "t") is None
    assert not source_link.crosses_a_link(None)


def test_a_link_doubles_the_response_and_queue_and_unbounds_partitions_and_the_user_still_decides():
    sizes = ("fetch.max.bytes", "max.partition.fetch.bytes", "queued.max.messages.kbytes")
    near = kafka_clients._source_reader(ReplicatorConfig())
    far = kafka_clients._source_reader(ReplicatorConfig(), across_a_link=True)
    assert [near[k] for k in sizes] == [16 * 1024 * 1024, 4 * 1024 * 1024, 16 * 1024]
    assert [far[k] for k in sizes] == [32 * 1024 * 1024, 32 * 1024 * 1024, 32 * 1024]
    assert {k: v for k, v in far.items() if k not in sizes} == {k: v for k, v in near.items() if k not in sizes}
    tuned = ReplicatorConfig(source={"fetch.max.bytes": "1000000"})
    assert kafka_clients._source_reader(tuned, across_a_link=True)["fetch.max.bytes"] == "1000000"


@pytest.fixture
def made(monkeypatch):
    """The consumers CachedClients builds, each a Source whose round trips are set by the test."""
    out: list[Source] = []
    delays: list[float | None] = []
    monkeypatch.setattr(client_cache, "_consumers", {})
    monkeypatch.setattr(client_cache, "_across_a_link", {})

    def build(cfg, across_a_link=False):
        out.append(Source(*delays, across_a_link=across_a_link))
        return out[-1]

    monkeypatch.setattr(client_cache.kafka_clients, "source_consumer", build)
    return out, delays


def test_a_source_a_link_away_is_judged_once_per_process(made):
    out, delays = made
    delays += [0.03, 0.03]
    clients = client_cache.CachedClients(ReplicatorConfig())
    first = clients.source_consumer()
    sized = clients.sized_for_source_link("orders")
    assert sized is out[1] and sized.across_a_link and not first.across_a_link
    assert clients.source_consumer() is sized
    assert clients.sized_for_source_link("orders") is None  # judged: no more round trips
    assert sized.topics_asked == []
    assert clients.new_source_consumer().across_a_link  # a consumer replaced later keeps the sizes


def test_a_near_source_keeps_its_consumer_and_an_unanswered_one_is_judged_again(made):
    out, delays = made
    delays += [None]
    clients = client_cache.CachedClients(ReplicatorConfig())
    assert clients.sized_for_source_link("orders") is None
    delays[:] = [0.0, 0.0]
    assert clients.sized_for_source_link("orders") is None
    assert out[0].topics_asked == ["orders", "orders", "orders"]
    assert clients.sized_for_source_link("orders") is None and len(out[0].topics_asked) == 3
    assert len(out) == 1 and not out[0].across_a_link


def test_the_reader_assigns_on_the_sized_consumer_and_closes_the_first(monkeypatch):
    first, sized = Source(), Source(across_a_link=True)

    class LinkClients(Clients):
        def sized_for_source_link(self, topic):
            self.consumer = sized
            return sized

    partitions = ShardPartitions()
    partitions.states[("orders", 0)] = partition_state("orders", 0, 5)
    cfg = ReplicatorConfig()
    reader = SourceReader(cfg, 0, LinkClients(first), partitions, TransactionRhythm(cfg),
                          TaskReport(partitions.settled))
    reader.start()
    assert reader.consumer is sized and [(tp.topic, tp.partition, tp.offset) for tp in sized.assigned] == [
        ("orders", 0, 5)]
    deadline = time.monotonic() + 5
    while not first.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert first.closed and first.assigned is None
