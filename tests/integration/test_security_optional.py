"""Each optional ACL removed on its own (secure sandbox, principals `reader`/`writer`): the job
switches off only the feature that ACL serves, says so naming the permission, the resource and the
principal, and still copies exactly once; the target's cluster id is pinned on the source unless the
pin's own ACL is the one removed.

A start of the job costs a minute of Spark here, so each case runs what decides and what copies
in-process: the job's own pre-flight (`replicator.engine.preflight.preflight`), the group-sync check the job
makes when it starts group sync, and the shard copier the Spark tasks run. The real `replicator
run` with the least sets is in test_security.py (required + group sync, through SIGKILL/restart).
Every case is a second start: the target topic and the translation index exist (created by an
earlier run or an admin), the index with a shorter retention than the topic, so the job wants to
raise it.
"""

from __future__ import annotations

import logging

import pytest
from confluent_kafka.admin import NewTopic

from replicator import config as config_mod
from replicator import names
from replicator.access import acls, permissions
from replicator.clients import kafka_clients
from replicator.engine import cluster_identity
from replicator.engine.preflight import preflight
from replicator.engine.shard_copy import CopyRange, ShardCopier
from replicator.groups.index import INDEX_PARTITIONS
from replicator.names import index_topic
from tests import secure_helpers as secure
from tests.integration.test_security import PARTITIONS, READER, WRITER, acl_set

RECORDS = 20
# The start-up message of each degraded feature.
CONFIG_SYNC = "topic config sync skipped"
CREATION = "topic creation skipped"
INDEX_SIZING = "translation index retention sizing skipped"
GROUP_SYNC = "group sync skipped"
PIN = cluster_identity.PIN_SKIPPED
MESSAGES = (CONFIG_SYNC, CREATION, INDEX_SIZING, GROUP_SYNC, PIN)


@pytest.fixture
def box(secure_sandbox):
    yield secure_sandbox
    secure.revoke_all(secure_sandbox, READER)
    secure.revoke_all(secure_sandbox, WRITER)


def _kind(a: acls.Acl) -> str:
    for suffix, kind in ((".xlate", "TranslationIndex"), (".checkpoints", "CheckpointsTopic"),
                         (".translator", "TranslatorGroup")):
        if a.resource_name.endswith(suffix):
            return kind
    return a.resource_type


def _key(a: acls.Acl) -> tuple[str, str, str, str]:
    return a.cluster, _kind(a), a.operation, a.feature


def _case_id(a: acls.Acl) -> str:
    return "-".join(_key(a)).replace(" ", "_")


_EXAMPLE = acls.acl_set(config_mod.load({"name": "n", "topics": "t", "groups": "app",
                                         "source_bootstrap_servers": "a:1", "target_bootstrap_servers": "b:1"},
                                        environ={}), READER, WRITER)
# The promotion ACLs serve `switchover`/`failover`/`divergence`, not the job: their removal cases are
# in test_security.py (test_each_missing_promotion_acl_stops_the_command_naming_it). ACL sync starts
# with the query, not in the pre-flight: its removal cases are in test_acl_sync.py.
OPTIONAL = [a for a in _EXAMPLE if a.feature not in (acls.REQUIRED, acls.PROMOTION, acls.ACL_SYNC)]


def _expected(a: acls.Acl) -> str | None:
    """The message saying what is skipped without `a`; None: nothing is skipped (the index exists,
    so Create on it is not needed)."""
    if a.feature == acls.GROUP_SYNC:
        return GROUP_SYNC
    if a.feature == acls.CLUSTER_PIN:
        return PIN
    if _kind(a) == "TranslationIndex":
        return INDEX_SIZING if a.feature == acls.CONFIG_SYNC else None
    return CONFIG_SYNC if a.feature == acls.CONFIG_SYNC else CREATION


def test_every_optional_acl_has_a_case():
    assert len({_key(a) for a in OPTIONAL}) == len(OPTIONAL) == 15
    assert {a.feature for a in OPTIONAL} == {acls.CLUSTER_PIN, acls.CREATE, acls.CONFIG_SYNC, acls.GROUP_SYNC}


@pytest.mark.parametrize("removed", OPTIONAL, ids=_case_id)
def test_each_optional_acl_removed_skips_only_its_feature_naming_it(box, unique, tmp_path, caplog, removed):
    topic = name = f"sec-opt-{unique}"
    app_group = f"app-{unique}"
    secure.create_topic(box, "source", topic, PARTITIONS)
    secure.produce(box, topic, PARTITIONS, RECORDS)
    secure.create_topic(box, "target", topic, PARTITIONS)
    index = index_topic(name)
    target_admin = secure.admin(box, "target")  # kept referenced until the creation is answered
    target_admin.create_topics([NewTopic(index, INDEX_PARTITIONS, 1, config={"retention.ms": "3600000"})],
                               request_timeout=30)[index].result()
    config = secure.write_config(box, tmp_path / "replicator.yaml", name, topic, shards=1, groups=app_group)
    full = acl_set(config)
    gone = next(a for a in full if _key(a) == _key(removed))
    secure.grant(box, [a for a in full if a != gone])

    caplog.set_level(logging.INFO)
    found: list[tuple[cluster_identity.Clusters, bool]] = []
    cfg, mappings = preflight(config_mod.load({}, config, environ={}),
                              on_clusters=lambda clusters, pinned: found.append((clusters, pinned)))
    syncing = permissions.check_group_sync(cfg, kafka_clients.source_admin(cfg), kafka_clients.target_admin(cfg))

    # Only the feature the ACL serves is off, and it is said once, naming operation, resource, principal.
    expected = _expected(gone)
    said = {m: [r.getMessage() for r in caplog.records if r.getMessage().startswith(m)] for m in MESSAGES}
    assert {m for m, lines in said.items() if lines} == ({expected} if expected else set()), said
    assert cfg.sync_topic_configs == (expected != CONFIG_SYNC)
    assert syncing == (expected != GROUP_SYNC)
    if expected:
        [line] = said[expected]
        principal = "reader" if gone.cluster == "source" else "writer"
        assert principal in line, line
        assert f"{gone.operation} on {gone.cluster} {gone.resource_type} '{gone.resource_name}'" in line, line
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # The target is pinned on the source unless the removed ACL is the pin's.
    [(clusters, _)] = found
    assert clusters.pinnable == (expected != PIN)
    pins = secure.group_offsets(box, "source", names.target_pin_group(cfg.name), topic, PARTITIONS)
    assert pins == ({} if expected == PIN else {0: 0}), pins

    # The copy still runs exactly once: every source record once, in order, and the offsets group at the end.
    ends = {p: len(v) for p, v in secure.keys_by_partition(box, "source", topic, PARTITIONS).items()}
    ShardCopier(cfg, 0).copy([CopyRange(m.source, m.target, p, 0, ends[p]) for m in mappings
                              for p in range(PARTITIONS)])
    source = secure.keys_by_partition(box, "source", topic, PARTITIONS)
    target = secure.keys_by_partition(box, "target", topic, PARTITIONS)
    assert {p: [k for _, k in v] for p, v in target.items()} == {p: [k for _, k in v] for p, v in source.items()}
    assert sum(len(v) for v in target.values()) == RECORDS
    assert secure.group_offsets(box, "target", f"__replicator.{name}", topic, PARTITIONS) == ends
