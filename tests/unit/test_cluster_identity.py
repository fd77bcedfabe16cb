"""Which clusters the job replicated between, decided from what the clusters keep: the offsets
group's entries on the target and the pin on the source (no Kafka: the readings are given)."""

from __future__ import annotations

import json

import pytest

from replicator.config import load
from replicator.engine import cluster_identity
from replicator.engine.cluster_identity import ClusterChanged, Clusters, Pin
from replicator.offsets import CommitMetadata, Committed

CFG = load({"source_bootstrap_servers": "127.0.0.1:19092", "target_bootstrap_servers": "127.0.0.1:29092",
            "topics": "t", "name": "dr"}, environ={})
FOUND = Clusters("SRC", "TGT")


def _entry(source: str, target: str) -> Committed:
    return Committed(10, CommitMetadata(source, "t", 1, 0, 9, 9, "dr", 1, target))


def _check(monkeypatch, entries, pin, cfg=CFG):
    monkeypatch.setattr(cluster_identity, "_group_entries", lambda cfg: entries)
    monkeypatch.setattr(cluster_identity, "_read_pin", lambda cfg, topics: pin)
    cluster_identity.check_at_start(cfg, FOUND, ["t"])


def test_a_first_start_and_a_restart_on_the_same_clusters_pass(monkeypatch):
    _check(monkeypatch, [], None)  # nothing recorded anywhere: a first start
    _check(monkeypatch, [_entry("SRC", "TGT")], Pin("TGT", "SRC", 1))
    _check(monkeypatch, [_entry("SRC", "")], None)  # entries of version 3 carry no target id


def test_a_new_empty_target_is_refused_naming_both_ids_and_the_option(monkeypatch):
    with pytest.raises(ClusterChanged) as e:
        _check(monkeypatch, [], Pin("OLD", "SRC", 1))
    assert e.value.role == "target"
    text = str(e.value)
    assert "is cluster TGT" in text and "copies into cluster OLD" in text and "--accept-target-cluster-id TGT" in text


def test_the_move_is_accepted_for_that_cluster_only(monkeypatch):
    accepting = load({"source_bootstrap_servers": "127.0.0.1:19092", "target_bootstrap_servers": "127.0.0.1:29092",
                      "topics": "t", "name": "dr", "accept_target_cluster_id": "TGT"}, environ={})
    _check(monkeypatch, [], Pin("OLD", "SRC", 1), accepting)
    other = load({"source_bootstrap_servers": "127.0.0.1:19092", "target_bootstrap_servers": "127.0.0.1:29092",
                  "topics": "t", "name": "dr", "accept_target_cluster_id": "SOMETHING-ELSE"}, environ={})
    with pytest.raises(ClusterChanged):
        _check(monkeypatch, [], Pin("OLD", "SRC", 1), other)


def test_the_targets_own_entries_outweigh_a_pin_another_job_of_the_name_wrote(monkeypatch):
    _check(monkeypatch, [_entry("SRC", "TGT")], Pin("ELSEWHERE", "SRC", 1))


def test_a_new_source_is_refused_from_the_groups_entries(monkeypatch):
    with pytest.raises(ClusterChanged) as e:
        _check(monkeypatch, [_entry("OLD-SRC", "TGT")], None)
    assert e.value.role == "source" and "is cluster SRC" in str(e.value) and "OLD-SRC" in str(e.value)


def test_a_group_written_on_another_cluster_is_refused(monkeypatch):
    with pytest.raises(ClusterChanged) as e:
        _check(monkeypatch, [_entry("SRC", "COPIED-FROM")], None)
    assert e.value.role == "target" and "COPIED-FROM" in str(e.value)


def test_without_the_pin_the_groups_entries_still_decide(monkeypatch):
    monkeypatch.setattr(cluster_identity, "_group_entries", lambda cfg: [])
    monkeypatch.setattr(cluster_identity, "_read_pin", lambda cfg, topics: pytest.fail("read without permission"))
    cluster_identity.check_at_start(CFG, Clusters("SRC", "TGT", pinnable=False), ["t"])


def test_the_pin_round_trips_and_foreign_metadata_is_no_pin():
    pin = Pin("TGT", "SRC", 1_700_000_000)
    assert Pin.decode(pin.encode()) == pin
    for foreign in (None, "", "x", "{}", json.dumps({"sc": "a"})):
        assert Pin.decode(foreign) is None


def test_commit_metadata_records_the_target_and_reads_version_3():
    meta = CommitMetadata("SRC", "t", 2, 1, 5, 6, "dr", 7, "TGT")
    assert CommitMetadata.decode(meta.encode()) == meta
    v3 = json.dumps({"v": 3, "sc": "SRC", "st": "t", "n": 2, "s": 1, "so": 5, "to": 6, "j": "dr", "t": 7})
    assert CommitMetadata.decode(v3) == CommitMetadata("SRC", "t", 2, 1, 5, 6, "dr", 7, "")
