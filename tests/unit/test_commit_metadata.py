"""The fake group's commit metadata: what later starts and failover read back."""

from __future__ import annotations

import json

from replicator.offsets import CommitMetadata


def test_round_trip_keeps_every_field():
    meta = CommitMetadata("cluster-A", "orders", 4, 2, 1_234, 987, "orders-dr")
    assert CommitMetadata.decode(meta.encode()) == meta
    assert len(meta.encode()) < 4096  # the broker's default offset.metadata.max.bytes


def test_version_1_entries_still_decode_with_no_job_name():
    v1 = json.dumps({"v": 1, "sc": "c", "st": "t", "n": 3, "s": 1, "so": 10, "to": 20})
    assert CommitMetadata.decode(v1) == CommitMetadata("c", "t", 3, 1, 10, 20, "")
    assert not CommitMetadata.is_damaged(v1)


def test_empty_is_not_damaged_but_unreadable_is():
    for empty in (None, "", "\x00"):
        assert CommitMetadata.decode(empty) is None
        assert not CommitMetadata.is_damaged(empty)
    for bad in ('{"v":2,"sc":"c"', "not json", '{"v":2}', "[1,2]", '{"v":2,"sc":"c","st":"t","n":"x","s":0}'):
        assert CommitMetadata.decode(bad) is None
        assert CommitMetadata.is_damaged(bad), bad
