"""The job's transactional ids: one format, exact recognition, and a fence that never fails silently."""

from __future__ import annotations

import time

import pytest

from replicator.clients.client_errors import while_retriable
from replicator.config import ReplicatorConfig
from replicator.engine.transactional_ids import FenceError, fence, parse, shard_id, to_fence


def test_format_and_exact_parse():
    assert shard_id("orders-dr", 3) == "orders-dr-shard-3"
    assert parse("orders-dr", "orders-dr-shard-3") == 3
    assert parse("orders-dr", "orders-dr-shard-03") is None
    assert parse("orders-dr", "orders-dr-shard-") is None
    assert parse("orders-dr", "other-shard-3") is None
    # A job whose name extends ours is not ours: a prefix test would fence its writers.
    assert parse("a", "a-shard-x-shard-0") is None
    assert parse("a-shard-x", "a-shard-x-shard-0") == 0
    # Regex characters in a name are literal.
    assert parse("a.b", "axb-shard-1") is None


def test_to_fence_covers_current_recorded_and_listed_layouts():
    cfg = ReplicatorConfig(name="new", shards=2)
    ids = to_fence(cfg, layouts={("new", 4), ("old", 1)}, listed_ids=["new-shard-7", "old-shard-2"])
    assert ids == ["new-shard-0", "new-shard-1", "new-shard-2", "new-shard-3", "new-shard-7",
                   "old-shard-0", "old-shard-2"]


def test_a_fence_that_cannot_complete_raises_naming_every_id():
    """The old fencing ran in bare threads whose exceptions never reached join(): an unfenced id
    passed as fenced. Nothing listens on port 9: init_transactions() cannot complete."""
    cfg = ReplicatorConfig(name="job", target_bootstrap_servers="127.0.0.1:9", shards=2,
                           target={"socket.connection.setup.timeout.ms": "1000"})
    started = time.monotonic()
    with pytest.raises(FenceError) as e:
        fence(cfg, ["job-shard-0", "job-shard-1"], timeout=2)
    assert "job-shard-0" in str(e.value) and "job-shard-1" in str(e.value)
    assert "2 of 2" in str(e.value)
    assert time.monotonic() - started < 30


def test_a_listing_the_coordinator_is_still_loading_is_asked_again_and_other_errors_are_not():
    from kafka.errors import CoordinatorLoadInProgressError, TopicAuthorizationFailedError

    answers = [CoordinatorLoadInProgressError("loading"), CoordinatorLoadInProgressError("loading"), {"b1": []}]

    def call():
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    assert while_retriable(call, 5, "listing", first_wait=0.01) == {"b1": []}
    with pytest.raises(TopicAuthorizationFailedError):  # not retriable: at once
        while_retriable(lambda: (_ for _ in ()).throw(TopicAuthorizationFailedError("no")), 5, "listing",
                        first_wait=0.01)
    started = time.monotonic()
    with pytest.raises(CoordinatorLoadInProgressError):  # retriable, but only until the timeout
        while_retriable(lambda: (_ for _ in ()).throw(CoordinatorLoadInProgressError("loading")), 0.2, "listing",
                        first_wait=0.01)
    assert time.monotonic() - started < 2
