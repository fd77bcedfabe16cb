"""ACL sync's pure rules: which source ACLs a replica gets, under which names, and what promotion adds."""

from __future__ import annotations

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from replicator import config as config_mod
from replicator import names
from replicator.access import acls
from replicator.access.acl_translate import Binding, copies, needs_groups, promotion_writes
from replicator.replication_policy import IdentityPolicy, PrefixPolicy

IDENTITY = IdentityPolicy().target_topic
PREFIX = PrefixPolicy("west", "east").target_topic


def rule(name: str, op: str, pattern: str = "LITERAL", kind: str = "TOPIC", principal: str = "User:app",
         permission: str = "ALLOW", host: str = "*") -> Binding:
    return Binding(kind, name, pattern, principal, host, op, permission)


def test_consumers_rules_are_copied_all_becomes_read_and_write_alter_deny_never():
    source = [rule("orders", "READ"), rule("orders", "DESCRIBE"), rule("orders", "ALL", principal="User:ops"),
              rule("orders", "WRITE"), rule("orders", "ALTER"), rule("orders", "CREATE"),
              rule("orders", "DESCRIBE_CONFIGS"), rule("orders", "READ", principal="User:bad", permission="DENY")]
    got = copies(source, {"orders": "orders"}, IDENTITY)
    assert got == {rule("orders", "READ"), rule("orders", "DESCRIBE"), rule("orders", "READ", principal="User:ops")}
    assert all(b.operation in ("READ", "DESCRIBE") and b.permission == "ALLOW" for b in got)


def test_only_replicated_topics_and_their_target_names():
    source = [rule("orders", "READ"), rule("payments", "READ"), rule("ord", "READ", "PREFIXED"),
              rule("pay", "READ", "PREFIXED"), rule("zzz", "READ", "PREFIXED")]
    assert copies(source, {"orders": "west.orders"}, PREFIX) == {
        rule("west.orders", "READ"), rule("west.ord", "READ", "PREFIXED")}
    assert copies(source, {"orders": "orders"}, IDENTITY) == {rule("orders", "READ"), rule("ord", "READ", "PREFIXED")}


def test_wildcard_becomes_one_literal_rule_per_replicated_topic():
    source = [rule("*", "READ"), rule("*", "READ", kind="GROUP")]
    got = copies(source, {"a": "west.a", "b": "west.b"}, PREFIX, ["app", "internal"], lambda g: g == "app")
    assert got == {rule("west.a", "READ"), rule("west.b", "READ"), rule("app", "READ", kind="GROUP")}
    assert needs_groups(source) and not needs_groups([rule("app", "READ", kind="GROUP")])


def test_groups_keep_their_names_and_only_selected_ones_get_read():
    source = [rule("app", "READ", kind="GROUP"), rule("app", "ALL", kind="GROUP", principal="User:ops"),
              rule("app", "DESCRIBE", kind="GROUP"), rule("other", "READ", kind="GROUP"),
              rule("ap", "READ", "PREFIXED", kind="GROUP"), rule("zz", "READ", "PREFIXED", kind="GROUP"),
              rule("app", "READ", kind="GROUP", principal="User:bad", permission="DENY")]
    got = copies(source, {}, PREFIX, ["app"], lambda g: g.startswith("app"))
    assert got == {rule("app", "READ", kind="GROUP"), rule("app", "READ", kind="GROUP", principal="User:ops"),
                   rule("ap", "READ", "PREFIXED", kind="GROUP")}


def test_other_resources_are_never_copied():
    source = [rule("kafka-cluster", "ALL", kind="BROKER"), rule("tx-", "WRITE", "PREFIXED", kind="TRANSACTIONAL_ID")]
    assert copies(source, {"orders": "orders"}, IDENTITY, ["g"], lambda g: True) == set()
    assert promotion_writes(source, {"orders": "orders"}, IDENTITY) == set()


def test_promotion_adds_producers_write_only_on_replicated_topics():
    source = [rule("orders", "WRITE", principal="User:prod"), rule("orders", "ALL", principal="User:ops"),
              rule("orders", "DESCRIBE", principal="User:prod"), rule("orders", "READ"),
              rule("ord", "WRITE", "PREFIXED", principal="User:prod"), rule("payments", "WRITE", principal="User:prod"),
              rule("orders", "WRITE", principal="User:bad", permission="DENY")]
    got = promotion_writes(source, {"orders": "west.orders"}, PREFIX)
    # DESCRIBE is copied already; ALL gives WRITE (which implies DESCRIBE), its READ came with the copies.
    assert got == {rule("west.orders", "WRITE", principal="User:prod"),
                   rule("west.orders", "WRITE", principal="User:ops"),
                   rule("west.ord", "WRITE", "PREFIXED", principal="User:prod")}
    assert not {b for b in copies(source, {"orders": "west.orders"}, PREFIX) if b.operation == "WRITE"}


def test_promotion_adds_the_transactional_rights_of_principals_that_write():
    source = [rule("orders", "WRITE", principal="User:prod"), rule("orders", "ALL", principal="User:ops"),
              rule("prod-tx", "WRITE", kind="TRANSACTIONAL_ID", principal="User:prod"),
              rule("ops-", "ALL", "PREFIXED", kind="TRANSACTIONAL_ID", principal="User:ops"),
              rule("prod-tx", "DESCRIBE", kind="TRANSACTIONAL_ID", principal="User:prod"),
              rule("kafka-cluster", "IDEMPOTENT_WRITE", kind="BROKER", principal="User:prod"),
              rule("kafka-cluster", "ALL", kind="BROKER", principal="User:ops"),
              rule("prod-tx", "WRITE", kind="TRANSACTIONAL_ID", principal="User:prod", permission="DENY"),
              rule("other-tx", "WRITE", kind="TRANSACTIONAL_ID", principal="User:reader"),
              rule("orders", "READ", principal="User:reader"),
              rule("pay-tx", "WRITE", kind="TRANSACTIONAL_ID", principal="User:payments"),
              rule("payments", "WRITE", principal="User:payments")]
    got = promotion_writes(source, {"orders": "west.orders"}, PREFIX)
    transactional = {b for b in got if b.resource_type != "TOPIC"}
    # Names kept (a transactional id names no topic); ALL becomes WRITE; the cluster's ALL is not
    # narrowed into anything; a principal writing no promoted topic gets nothing.
    assert transactional == {rule("prod-tx", "WRITE", kind="TRANSACTIONAL_ID", principal="User:prod"),
                             rule("prod-tx", "DESCRIBE", kind="TRANSACTIONAL_ID", principal="User:prod"),
                             rule("ops-", "WRITE", "PREFIXED", kind="TRANSACTIONAL_ID", principal="User:ops"),
                             rule("kafka-cluster", "IDEMPOTENT_WRITE", kind="BROKER", principal="User:prod")}
    assert not copies(source, {"orders": "west.orders"}, PREFIX) & transactional
    assert rule("prod-tx", "WRITE", kind="TRANSACTIONAL_ID", principal="User:prod").describe() == \
        "ALLOW User:prod WRITE TransactionalId 'prod-tx' (literal) from host *"


def test_binding_round_trips_through_confluent_kafka_and_the_state_key():
    kafka = AclBinding(ResourceType.TOPIC, "west.ord", ResourcePatternType.PREFIXED, "User:app", "10.0.0.1",
                       AclOperation.READ, AclPermissionType.ALLOW)
    b = Binding.of(kafka)
    assert b == rule("west.ord", "READ", "PREFIXED", host="10.0.0.1")
    assert b.to_kafka() == kafka
    assert Binding.from_key(b.key()) == b
    assert b.describe() == "ALLOW User:app READ Topic 'west.ord' (prefixed) from host 10.0.0.1"


def _cfg(**kw):
    return config_mod.load({"name": "dr", "topics": "orders", "source_bootstrap_servers": "a:1",
                            "target_bootstrap_servers": "b:1", **kw}, environ={})


def test_least_privilege_table_lists_what_acl_sync_needs():
    entries = [a for a in acls.acl_set(_cfg(), "User:r", "User:w") if a.feature == acls.ACL_SYNC]
    got = {(a.cluster, a.principal, a.resource_type, a.pattern_type, a.resource_name, a.operation) for a in entries}
    assert got == {("source", "User:r", "Cluster", "LITERAL", "kafka-cluster", "Describe"),
                   ("target", "User:w", "Cluster", "LITERAL", "kafka-cluster", "Alter"),
                   *{("target", "User:w", "Topic", "LITERAL", names.acl_state_topic("dr"), op)
                     for op in ("Create", "Write", "Read")}}
    assert not [a for a in acls.acl_set(_cfg(sync_acls=False)) if a.feature == acls.ACL_SYNC]


def test_the_jobs_own_source_principal_is_known_in_each_form(tmp_path):
    from replicator.access.acl_sync import own_principals
    from replicator.sandbox.security import CertificateAuthority

    assert own_principals(_cfg(source={"sasl.username": "repl"})) == {"User:repl"}
    assert own_principals(_cfg()) == set()
    ca = CertificateAuthority(tmp_path / "ca")
    ca.issue("repl", tmp_path / "repl.crt", tmp_path / "repl.key")
    own = own_principals(_cfg(source={"ssl.certificate.location": str(tmp_path / "repl.crt")}))
    # The subject as Kafka's default mapping spells it, and its CN as mapping rules usually shorten it.
    assert "User:repl" in own and len(own) == 2 and all(p.startswith("User:") for p in own), own


def test_sync_acls_is_a_validated_boolean():
    assert _cfg().sync_acls is True and _cfg(sync_acls="false").sync_acls is False
    try:
        _cfg(sync_acls="maybe")
    except config_mod.ConfigError as e:
        assert "sync_acls" in str(e) and "true or false" in str(e)
    else:
        raise AssertionError("sync_acls=maybe was accepted")
