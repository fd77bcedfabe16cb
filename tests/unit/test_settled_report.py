"""What a shard task tells the driver is settled: the driver takes those partitions' lag as 0
without asking the clusters (docs/design.md, "The driver"), so a partition must leave the set as
soon as anything of it is copied or unsure, and join it only once the group holds the source's end."""

from __future__ import annotations

from confluent_kafka import KafkaError

from replicator.config import ReplicatorConfig
from replicator.engine.shard_copy import ShardCopier
from tests.unit.copier_fakes import Link, Record, Target, copier, partition_state


def setup() -> tuple[ShardCopier, dict, Link]:
    states = {("s", p): partition_state("s", p, 10, target_topic="t") for p in (0, 1)}
    c = copier(ReplicatorConfig(guarantee="at-least-once"), target=Target())
    c._report.link = Link()
    c._partitions.states = states
    return c, states, c._report.link


def report(c: ShardCopier) -> dict:
    link = c._report.link
    before = len(link.sent)
    c._report.send(force=True)  # the settled partitions are looked at now
    return link.sent[-1] if len(link.sent) > before else {}


def test_a_partition_is_settled_once_the_group_holds_the_end_its_last_fetch_saw():
    c, states, link = setup()
    assert report(c) == {}  # no end seen yet: nothing is settled
    c._source.event(Record("s", 0, 10, KafkaError._PARTITION_EOF), states)
    assert report(c) == {"s|0": 10}
    assert report(c) == {}  # only changes are sent

    # Markers past the last record: the position moves over them in a transaction; settled once committed.
    c._source.event(Record("s", 1, 14, KafkaError._PARTITION_EOF), states)
    assert report(c) == {}
    c._account([states[("s", 1)]], 0.0)
    assert report(c) == {"s|1": 14}

    # A record arrives: no longer settled, until it is committed and the end is seen again.
    c._produce_batch([Record("s", 0, 10)], states)
    assert report(c) == {"s|0": -1}
    c._account([states[("s", 0)]], 0.0)
    assert report(c) == {}
    c._source.event(Record("s", 0, 11, KafkaError._PARTITION_EOF), states)
    assert report(c) == {"s|0": 11}


def test_a_source_error_or_a_failed_attempt_withdraws_what_was_settled():
    c, states, link = setup()
    for p in (0, 1):
        c._source.event(Record("s", p, 10, KafkaError._PARTITION_EOF), states)
    assert report(c) == {"s|0": 10, "s|1": 10}
    c._source.event(Record("s", 1, 10, KafkaError.NOT_LEADER_FOR_PARTITION), states)
    assert report(c) == {"s|1": -1}
    c._source.event(Record("s", -1, -1, KafkaError._TRANSPORT), states)  # not a partition's: all of them
    assert report(c) == {"s|0": -1}

    c._source.event(Record("s", 0, 10, KafkaError._PARTITION_EOF), states)
    link.up = False
    assert report(c) == {}  # not delivered: sent again once the line is back
    link.up = True
    assert report(c) == {"s|0": 10}
    c._partitions.states = {}  # what a failed attempt leaves
    assert report(c) == {"s|0": -1}


def test_settled_partitions_are_looked_at_every_few_seconds_not_on_every_report():
    c, states, link = setup()
    c._report.send(force=True)
    c._source.event(Record("s", 0, 10, KafkaError._PARTITION_EOF), states)
    c._report.send()  # just looked: not yet
    assert link.sent == []
