"""The least-ACL set: one source for `replicator acls`, the docs table and the integration tests."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from replicator import config as config_mod
from replicator import names
from replicator.access import acls
from replicator.cli import main

ROOT = Path(__file__).resolve().parents[2]
BASE = {"source_bootstrap_servers": "src:9092", "target_bootstrap_servers": "dst:9092"}


def _cfg(**kw):
    return config_mod.load({**BASE, **kw}, environ={})


def test_docs_table_is_the_generated_one():
    text = (ROOT / "deploy" / "README.md").read_text()
    begin, end = text.index(acls.DOC_BEGIN) + len(acls.DOC_BEGIN), text.index(acls.DOC_END)
    assert text[begin:end].strip() == acls.doc_table().strip(), \
        "deploy/README.md's ACL table is stale: regenerate it from replicator.access.acls.doc_table()"


def test_topic_patterns_follow_the_selection():
    assert acls.topic_patterns("orders") == [("LITERAL", "orders")]
    assert acls.topic_patterns(r"orders\..*") == [("PREFIXED", "orders.")]
    assert acls.topic_patterns(r"(?:a-b)|(?:c\..*)") == [("LITERAL", "a-b"), ("PREFIXED", "c.")]
    assert acls.topic_patterns("ord(ers|ure)") == [("LITERAL", "*")]
    assert acls.topic_patterns(".*") == [("LITERAL", "*")]


def test_source_is_only_read_and_required_set_is_minimal():
    entries = acls.acl_set(_cfg(topics="orders", name="dr"), "User:r", "User:w")
    source = {(a.operation, a.feature) for a in entries if a.cluster == "source"}
    assert source == {("Read", acls.REQUIRED), ("Describe", acls.REQUIRED), ("DescribeConfigs", acls.CONFIG_SYNC),
                      ("Describe", acls.GROUP_SYNC), ("Describe", acls.ACL_SYNC), ("Read", acls.CLUSTER_PIN)}
    assert {a.operation for a in entries if a.cluster == "source"} <= {"Read", "Describe", "DescribeConfigs"}
    required = {(a.resource_type, a.pattern_type, a.resource_name, a.operation) for a in entries
                if a.cluster == "target" and a.feature == acls.REQUIRED}
    assert required == {("Topic", "LITERAL", "orders", "Write"), ("Topic", "LITERAL", "orders", "Read"),
                        ("Group", "LITERAL", "__replicator.dr", "Read"),
                        ("Topic", "LITERAL", "__replicator.dr.xlate", "Write"),
                        ("Topic", "LITERAL", "__replicator.dr.promoted", "Describe"),
                        ("TransactionalId", "PREFIXED", "dr-shard-", "Write")}
    assert all(a.principal == ("User:r" if a.cluster == "source" else "User:w") for a in entries)


def test_prefix_policy_and_at_least_once_change_the_target_resources():
    entries = acls.acl_set(_cfg(topics="orders", name="dr", replication_policy="prefix", source_alias="west",
                                guarantee="at-least-once"))
    assert {a.resource_name for a in entries if a.cluster == "target" and a.resource_type == "Topic"
            and a.feature != acls.ACL_SYNC} == {"west.orders"}
    assert not [a for a in entries if a.resource_type == "TransactionalId"]


def test_command_prints_kafka_acls_lines_and_json(tmp_path):
    cfg = tmp_path / "r.yaml"
    cfg.write_text("name: dr\ntopics: orders\nsource_bootstrap_servers: src:9092\ntarget_bootstrap_servers: dst:9092\n"
                   "target: {security.protocol: SASL_SSL, sasl.mechanism: SCRAM-SHA-512, sasl.username: w,"
                   " sasl.password: hunter2}\n")
    out = CliRunner().invoke(main, ["acls", "--config", str(cfg), "--source-principal", "User:r"])
    assert out.exit_code == 0, out.output
    assert ("kafka-acls.sh --bootstrap-server dst:9092 --command-config target-admin.properties --add "
            "--allow-principal User:w --operation Write --transactional-id 'dr-shard-' --resource-pattern-type "
            "prefixed") in out.output
    assert "--allow-principal User:r --operation Read --topic 'orders' --resource-pattern-type literal" in out.output
    assert "hunter2" not in out.output
    rows = json.loads(CliRunner().invoke(main, ["acls", "--config", str(cfg), "--format", "json",
                                                "--without", "topic-creation", "--without", "config-sync",
                                                "--without", "group-sync", "--without", "promotion",
                                                "--without", "acl-sync", "--without", "cluster-pin"]).output)
    assert {r["feature"] for r in rows} == {acls.REQUIRED} and len(rows) == 8


def test_the_cluster_pin_is_read_on_its_literal_group_on_the_source(tmp_path):
    """The one offset cluster_identity commits on the source (issue 50): without this row a job
    granted exactly `replicator acls` would run unpinned."""
    [pin] = [a for a in acls.acl_set(_cfg(topics="orders", name="dr"), "User:r", "User:w")
             if a.feature == acls.CLUSTER_PIN]
    assert (pin.cluster, pin.principal, pin.resource_type, pin.pattern_type, pin.resource_name, pin.operation) == \
        ("source", "User:r", "Group", "LITERAL", names.target_pin_group(_cfg(name="dr", topics="orders").name), "Read")
    assert pin.resource_name == "__replicator.dr.target-cluster"
    cfg = tmp_path / "r.yaml"
    cfg.write_text("name: dr\ntopics: orders\nsource_bootstrap_servers: src:9092\ntarget_bootstrap_servers: dst:9092\n")
    lines = CliRunner().invoke(main, ["acls", "--config", str(cfg), "--source-principal", "User:r"]).output
    assert ("kafka-acls.sh --bootstrap-server src:9092 --command-config source-admin.properties --add "
            "--allow-principal User:r --operation Read --group '__replicator.dr.target-cluster' "
            "--resource-pattern-type literal") in lines
    as_json = ["acls", "--config", str(cfg), "--format", "json", "--source-principal", "User:r",
               "--target-principal", "User:w"]
    rows = json.loads(CliRunner().invoke(main, as_json).output)
    assert [r for r in rows if r["resource_name"] == "__replicator.dr.target-cluster"] == [pin.to_dict()]
    without = json.loads(CliRunner().invoke(main, [*as_json, "--without", "cluster-pin"]).output)
    assert [r for r in without if r["feature"] == acls.CLUSTER_PIN] == []
    assert len(without) == len(rows) - 1


def test_promotion_acls_are_the_marker_topic_on_the_target_only():
    entries = [a for a in acls.acl_set(_cfg(topics="orders", name="dr"), "User:r", "User:w")
               if a.feature == acls.PROMOTION]
    got = {(a.cluster, a.principal, a.resource_type, a.pattern_type, a.resource_name, a.operation) for a in entries}
    assert got == {
        ("target", "User:w", "Topic", "LITERAL", "__replicator.dr.promoted", op) for op in ("Create", "Write", "Read")}
