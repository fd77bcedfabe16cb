"""Every name the replicator puts on a cluster comes from `replicator.names`: the ACL set grants
exactly those, the group filter skips the job's own reader groups, and ids parse back exactly."""

from __future__ import annotations

import ast
from pathlib import Path

from replicator import config as config_mod
from replicator import names
from replicator.access import acls
from replicator.groups.sync import GroupFilter

BASE = {"source_bootstrap_servers": "src:9092", "target_bootstrap_servers": "dst:9092", "topics": "orders"}


def test_a_jobs_names_on_the_clusters():
    assert names.offsets_group("dr") == "__replicator.dr"
    assert names.shard_transactional_id("dr", 3) == "dr-shard-3"
    assert names.transactional_id_prefix("dr") == "dr-shard-"
    assert (names.index_topic("dr"), names.checkpoints_topic("dr"), names.marker_topic("dr")) == (
        "__replicator.dr.xlate", "__replicator.dr.checkpoints", "__replicator.dr.promoted")
    assert names.mm2_checkpoints_topic("east") == "east.checkpoints.internal"
    assert (names.source_reader_group("dr"), names.translator_group("dr")) == ("dr.source-reader", "dr.translator")


def test_the_default_offsets_group_is_the_one_config_uses():
    assert config_mod.load({**BASE, "name": "dr"}, environ={}).group == names.offsets_group("dr")


def test_transactional_ids_parse_back_exactly():
    assert names.parse_shard_transactional_id("dr", names.shard_transactional_id("dr", 12)) == 12
    assert names.parse_shard_transactional_id("a", "a-shard-x-shard-0") is None
    assert sorted(["j-shard-10", "j-shard-9", "i-shard-2"], key=names.transactional_id_sort_key) == [
        "i-shard-2", "j-shard-9", "j-shard-10"]


def test_the_acl_set_grants_the_names_the_job_uses():
    cfg = config_mod.load({**BASE, "name": "dr", "source_alias": "east", "mm2_compatible_checkpoints": True},
                          environ={})
    granted = {(a.cluster, a.resource_type, a.resource_name) for a in acls.acl_set(cfg)}
    assert {("target", "Topic", names.index_topic("dr")), ("target", "Topic", names.checkpoints_topic("dr")),
            ("target", "Topic", names.marker_topic("dr")), ("target", "Topic", names.mm2_checkpoints_topic("east")),
            ("target", "Group", names.offsets_group("dr")), ("target", "Group", names.translator_group("dr")),
            ("source", "Group", names.translator_group("dr")), ("source", "Group", names.source_reader_group("dr")),
            ("target", "TransactionalId", names.transactional_id_prefix("dr"))} <= granted


def test_group_sync_never_takes_a_jobs_own_groups_for_an_applications():
    f = GroupFilter(".*")
    assert not any(f.accepts(g) for g in (names.offsets_group("dr"), names.source_reader_group("dr"),
                                          names.translator_group("dr")))
    assert f.accepts("dr-translator") and f.accepts("orders-app")


def test_names_depends_on_nothing_of_the_replicator():
    # `config` (below everything) may ask it for the default offsets group.
    tree = ast.parse(Path(names.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and m.startswith("replicator")}
