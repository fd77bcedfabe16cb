"""Naming policies, the prefix policy's cycle guard and the identity policy's provenance header."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message

from replicator.config import ConfigError, load
from replicator.replication_policy import PROVENANCE_HEADER, IdentityPolicy, PrefixPolicy, Provenance, policy_for


def _cfg(**extra):
    return load({"source_bootstrap_servers": "127.0.0.1:1", "target_bootstrap_servers": "127.0.0.1:2",
                 "topics": ".*", **extra}, environ={})


def test_identity_keeps_names_and_never_calls_a_topic_remote():
    policy = policy_for(_cfg())
    assert isinstance(policy, IdentityPolicy)
    assert policy.target_topic("orders") == "orders"
    assert not policy.is_remote("west.orders")


def test_prefix_names_topics_after_the_source_alias():
    policy = policy_for(_cfg(replication_policy="prefix", source_alias="east", target_alias="west"))
    assert isinstance(policy, PrefixPolicy)
    assert policy.target_topic("orders") == "east.orders"
    assert policy.target_topic("orders.v2") == "east.orders.v2"


@pytest.mark.parametrize(("topic", "remote"), [
    ("west.orders", True),  # a replica of west's own topic: sending it back would loop
    ("central.west.orders", True),  # west's topic that came here through another cluster
    ("east.orders", False),  # ours, replicated back from west earlier? no: west would name it west.east...
    ("orders", False),
    ("orders.west", False),  # the last segment is the topic itself, never an alias
    ("western.orders", False),
])
def test_prefix_cycle_guard_for_active_active(topic, remote):
    # east -> west replicator: topics on east that came from west must not go back.
    assert PrefixPolicy("east", "west").is_remote(topic) is remote


def test_aliases_cannot_contain_the_separator():
    with pytest.raises(ConfigError, match="'source_alias'"):
        _cfg(source_alias="us.east")
    with pytest.raises(ConfigError, match="'target_alias'"):
        _cfg(target_alias="")


def _msg(offset, headers=None, error=None):
    return Message(topic="t", partition=0, offset=offset, value=b"v", headers=headers, error=error)


def test_provenance_stamps_copies_and_drops_planned_records_from_the_target():
    prov = Provenance("SRC", "TGT")
    eof = _msg(9, error=KafkaError(KafkaError._PARTITION_EOF))
    batch = [_msg(0), _msg(1, [("h", b"1")]), _msg(2, [(PROVENANCE_HEADER, b"TGT")]),
             _msg(3, [(PROVENANCE_HEADER, b"OTHER"), (PROVENANCE_HEADER, b"TGT")]),
             _msg(4, [(PROVENANCE_HEADER, b"OTHER")]), _msg(8, [(PROVENANCE_HEADER, b"TGT")]), eof]
    kept = prov.apply(batch, planned=lambda m: m.offset() < 5)
    assert [m.offset() for m in kept] == [0, 1, 4, 8, 9], "beyond the plan and errors are kept"
    assert kept[0].headers() == [(PROVENANCE_HEADER, b"SRC")]
    assert kept[1].headers() == [("h", b"1"), (PROVENANCE_HEADER, b"SRC")]
    assert kept[2].headers() == [(PROVENANCE_HEADER, b"OTHER"), (PROVENANCE_HEADER, b"SRC")]
    assert kept[4] is eof


def test_provenance_header_is_off_by_default_and_a_boolean():
    assert _cfg().provenance_header is False
    assert _cfg(provenance_header="true").provenance_header is True
    assert load({"source_bootstrap_servers": "127.0.0.1:1", "target_bootstrap_servers": "127.0.0.1:2",
                 "topics": ".*"}, environ={"REPLICATOR_PROVENANCE_HEADER": "yes"}).provenance_header is True
    with pytest.raises(ConfigError, match="'provenance_header'"):
        _cfg(provenance_header="maybe")
