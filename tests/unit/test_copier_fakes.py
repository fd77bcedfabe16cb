"""The clientless copier the loop's unit tests share holds exactly the attributes a real one does, so
a state field added to `ShardCopier.__init__` cannot be missing (or linger, removed) in those tests."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from replicator.config import ReplicatorConfig
from replicator.engine import shard_copy
from tests.unit.copier_fakes import bare_copier


class Client:
    def list_topics(self, topic=None, timeout=None):
        return SimpleNamespace(cluster_id="c", topics={})


def test_the_bare_copier_has_the_state_a_real_one_has(monkeypatch):
    for cache in ("_consumers", "_group_readers", "_cluster_ids"):
        monkeypatch.setattr(shard_copy, cache, {})
    monkeypatch.setattr(shard_copy.kafka_clients, "source_consumer", lambda cfg: Client())
    monkeypatch.setattr(shard_copy.kafka_clients, "group_reader", lambda cfg: Client())
    real = shard_copy.ShardCopier(ReplicatorConfig(translation_index=False), 0)
    assert sorted(vars(bare_copier())) == sorted(vars(real))


def test_a_misspelt_attribute_is_refused():
    with pytest.raises(AttributeError, match="_floor"):
        bare_copier(_floor={})
