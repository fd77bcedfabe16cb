"""Application ACLs fail over too (secure sandbox: mTLS source, SCRAM target, deny by default).

An application's consumer principal with READ on its source topic and group, and its producer with
WRITE there, are granted nothing on the target by hand. The job (`reader`/`writer`, exactly the set
`replicator acls` prints) copies the consumer's rules while it runs, never a WRITE; a source rule
removed is removed from the target, a rule someone else created there is kept; after `failover` the
consumer reads on the target from its translated offsets and the producer writes, while a principal
with no ACL on the source is refused. `failback` (dry run first) copies the new primary's consumer
rules back onto the old source and stages its producer rules, which the reverse job's promotion
applies; nothing anyone else made is deleted on either cluster. Without any one of ACL sync's own
ACLs the feature is off, said once, naming the principal, the operation and the resource.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
import urllib.request

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from replicator import config as config_mod
from replicator import names
from replicator.access import acl_sync, acls
from replicator.clients.kafka_clients import with_logging
from tests import secure_helpers as secure
from tests.integration.test_security import READER, WRITER, acl_set, run_cli
from tests.kafka_helpers import commit_member_less
from tests.replicator_process import ReplicatorProcess, wait_until

PARTITIONS, RECORDS = 2, 100
APP_OFFSETS = {0: 30, 1: 20}  # the application consumed this far on the source (record i: partition i % 2)


@pytest.fixture
def box(secure_sandbox):
    yield secure_sandbox
    secure.revoke_all(secure_sandbox, READER)
    secure.revoke_all(secure_sandbox, WRITER)


def _principal(box, name: str) -> dict[str, dict]:
    """Client properties, per cluster, of a principal the sandbox did not provision: a client
    certificate from the source's CA, a SCRAM user on the target."""
    material = box.source.security
    cert, key = material.dir / f"{name}.crt", material.dir / f"{name}.key"
    material.ca.issue(name, cert, key)
    source = {**box.client_properties("source", "admin"), "ssl.certificate.location": str(cert),
              "ssl.key.location": str(key), "bootstrap.servers": box.source.bootstrap}
    password = secrets.token_urlsafe(12)
    admin = secure.admin(box, "target")
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode())])[name].result()
    target = {**box.client_properties("target", "admin"), "sasl.username": name, "sasl.password": password,
              "bootstrap.servers": box.target.bootstrap}
    deadline = time.monotonic() + 60
    while True:  # the new user reaches every broker through the metadata log
        try:
            AdminClient(with_logging(target)).list_topics(timeout=10)
            break
        except KafkaException:
            assert time.monotonic() < deadline, f"SCRAM user {name} not usable on the target after 60 s"
            time.sleep(1)
    return {"source": with_logging(source), "target": with_logging(target)}


def _rule(kind, name, principal, op, pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


def _add(box, cluster: str, rules: list[AclBinding]) -> None:
    admin = secure.admin(box, cluster)  # kept referenced until the futures are answered
    for fut in admin.create_acls(rules, request_timeout=30).values():
        fut.result()


def _remove(box, cluster: str, rules: list[AclBinding]) -> None:
    filters = [AclBindingFilter(r.restype, r.name, r.resource_pattern_type, r.principal, r.host, r.operation,
                                r.permission_type) for r in rules]
    admin = secure.admin(box, cluster)
    for fut in admin.delete_acls(filters, request_timeout=30).values():
        fut.result()


def _rules(box, cluster: str, principal: str) -> set[tuple[str, str, str, str]]:
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    admin = secure.admin(box, cluster)
    return {(b.restype.name, b.name, b.resource_pattern_type.name, b.operation.name)
            for b in admin.describe_acls(flt, request_timeout=30).result()}


def _target_rules(box, principal: str) -> set[tuple[str, str, str, str]]:
    return _rules(box, "target", principal)


def _every_rule(box, cluster: str) -> set[acl_sync.Binding]:
    return acl_sync.describe_acls(secure.admin(box, cluster))


def _produce_as(props: dict, topic: str) -> KafkaError | None:
    """One record produced as that principal: None when written, else the refusal."""
    producer = Producer({**props, "acks": "all", "message.timeout.ms": 20000})
    errors: list[KafkaError] = []
    producer.produce(topic, b"after-promotion", partition=0, on_delivery=lambda err, _m: errors.append(err))
    producer.flush(30)
    return errors[0] if errors else KafkaError(KafkaError._TIMED_OUT)


def _produce_transactionally(props: dict, topic: str, transactional_id: str) -> KafkaException | None:
    """One record in one transaction as that principal: None when committed, else the refusal."""
    producer = Producer({**props, "transactional.id": transactional_id, "transaction.timeout.ms": 30000})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"in-a-transaction", partition=0)
        producer.commit_transaction(30)
    except KafkaException as e:
        return e
    return None


def _consume_as(props: dict, topic: str, group: str, wanted: int, timeout: float = 90) -> tuple[list, list]:
    """What a subscribed consumer of `group` reads, and the errors it meets."""
    consumer = Consumer({**props, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    records, errors = [], []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(records) < wanted and time.monotonic() < deadline and not errors:
            for m in consumer.consume(100, 1.0):
                (errors if m.error() is not None else records).append(m.error() or (m.partition(), m.key()))
    finally:
        consumer.close()
    return records, errors


def test_application_acls_follow_the_replication_and_fail_over(box, unique, tmp_path):
    topic = name = f"acl-{unique}"
    group = f"app-{unique}"
    app, prod = f"app-{unique}", f"prod-{unique}"
    app_props, prod_props = _principal(box, app), _principal(box, prod)
    leaver, human = f"User:leaver-{unique}", f"User:human-{unique}"
    secure.create_topic(box, "source", topic, PARTITIONS)
    secure.produce(box, topic, PARTITIONS, RECORDS)
    read = AclOperation.READ
    consumer_rules = [_rule(ResourceType.TOPIC, topic, f"User:{app}", read),
                      _rule(ResourceType.GROUP, group, f"User:{app}", read)]
    transactional_id = f"prod-tx-{unique}"
    producer_rules = [_rule(ResourceType.TOPIC, topic, f"User:{prod}", AclOperation.WRITE),
                      _rule(ResourceType.TRANSACTIONAL_ID, transactional_id, f"User:{prod}", AclOperation.WRITE)]
    leaving = [_rule(ResourceType.TOPIC, "acl-", leaver, read, ResourcePatternType.PREFIXED)]
    theirs = [_rule(ResourceType.TOPIC, topic, human, read)]
    _add(box, "source", consumer_rules + producer_rules + leaving + theirs)
    _add(box, "target", theirs)  # someone granted it on the target by hand: the sync must never delete it
    # The application consumes on the source with its own principal.
    consumer = Consumer({**app_props["source"], "group.id": group, "enable.auto.commit": False})
    commit_member_less(consumer, [TopicPartition(topic, p, o) for p, o in APP_OFFSETS.items()])
    consumer.close()
    config = secure.write_config(box, tmp_path / "replicator.yaml", name, topic, shards=1, groups=group,
                                 batch_duration_seconds=5, refresh_topics_interval_seconds=2)
    secure.grant(box, acl_set(config))
    refused = _produce_as(prod_props["target"], topic)  # no WRITE on the replica
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused

    copied = {("TOPIC", topic, "LITERAL", "READ"), ("GROUP", group, "LITERAL", "READ")}
    with ReplicatorProcess(box, topic, name, tmp_path / "run.log", "--config", str(config)) as job:
        wait_until(lambda: _target_rules(box, f"User:{app}") == copied
                   and _target_rules(box, leaver) == {("TOPIC", "acl-", "PREFIXED", "READ")}, 300,
                   "the consumer's ACLs copied to the target", job, interval=2)
        wait_until(lambda: set(secure.group_offsets(box, "target", group, topic, PARTITIONS)) == {0, 1}, 300,
                   f"group {group} synced to the target", job, interval=2)
        assert _target_rules(box, f"User:{prod}") == set(), "a WRITE reached the replica before promotion"
        port = int(re.search(r"metrics listening on [\d.]+:(\d+)", job.log()).group(1))
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "replicator_acl_sync_enabled 1.0" in metrics
        # The application's two rules and the leaver's (the human's is not ours; the job's own Read on
        # the topic is the replicator's grant, not an application's).
        assert 'replicator_acl_sync_acls{kind="copy"} 3.0' in metrics, metrics
        assert _target_rules(box, READER) == set(), "the job's own source rule was copied"
        assert 'replicator_acl_sync_acls{kind="staged"} 2.0' in metrics, metrics
        # Source rules removed: the copy the sync made goes, the rule someone else made stays.
        _remove(box, "source", leaving + theirs)
        wait_until(lambda: _target_rules(box, leaver) == set(), 120, "the removed rule gone from the target",
                   job, interval=2)
        assert _target_rules(box, human) == {("TOPIC", topic, "LITERAL", "READ")}
        assert _target_rules(box, f"User:{prod}") == set(), "a WRITE reached the replica before promotion"
        assert job.sigterm() == 0
    log = job.log()
    assert "ACL sync skipped" not in log and "ACL sync failed" not in log, log[-3000:]
    assert f"ACL copied to the target: ALLOW User:{app} READ Topic '{topic}'" in log

    # The dry run shows the producer's rule and writes nothing.
    dry = run_cli("failover", "--dry-run", "--config", str(config), "--format", "json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    wanted = [f"ALLOW User:{prod} WRITE Topic '{topic}' (literal) from host *",
              f"ALLOW User:{prod} WRITE TransactionalId '{transactional_id}' (literal) from host *"]
    assert json.loads(dry.stdout)["acls"]["promotion"] == wanted, dry.stdout
    assert _target_rules(box, f"User:{prod}") == set()

    over = run_cli("failover", "--config", str(config))
    assert over.returncode == 0, over.stdout + over.stderr
    for rule in wanted:
        assert f"ACL applied at promotion: {rule}" in over.stdout, over.stdout
    assert _target_rules(box, f"User:{prod}") == {("TOPIC", topic, "LITERAL", "WRITE"),
                                                  ("TRANSACTIONAL_ID", transactional_id, "LITERAL", "WRITE")}
    time.sleep(1)  # ACLs reach the authorizer through the metadata log

    # The consumer resumes on the target where it was on the source; the producer writes there.
    keys = secure.keys_by_partition(box, "target", topic, PARTITIONS)
    expected = {(p, k) for p, entries in keys.items() for o, k in entries
                if o >= secure.group_offsets(box, "target", group, topic, PARTITIONS)[p]}
    assert expected == {(i % 2, str(i).encode()) for i in range(RECORDS) if i // 2 >= APP_OFFSETS[i % 2]}
    records, errors = _consume_as(app_props["target"], topic, group, len(expected))
    assert not errors and set(records) == expected and len(records) == len(expected), errors
    assert _produce_as(prod_props["target"], topic) is None
    # A transactional producer moves too: its transactional id's rule came with the promotion.
    assert _produce_transactionally(prod_props["target"], topic, transactional_id) is None
    # A principal with no ACL on the source gets nothing on the target.
    records, errors = _consume_as(secure.props(box, "target", "other"), topic, f"other-{unique}", 1, timeout=30)
    assert not records and errors and all(e.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                                      KafkaError.GROUP_AUTHORIZATION_FAILED) for e in errors), errors

    # Failback: the reverse job (source: the new primary as `writer`, target: the old source as its
    # administrator) copies the new primary's consumer rules onto the old source and stages its
    # producer rules, which only the reverse promotion applies. An application that arrived after the
    # failover was granted on the new primary only: a consumer and a producer.
    late_app, late_prod = f"late-app-{unique}", f"late-prod-{unique}"
    late_prod_props = _principal(box, late_prod)
    _add(box, "target", [_rule(ResourceType.TOPIC, topic, f"User:{late_app}", read),
                         _rule(ResourceType.TOPIC, topic, f"User:{late_prod}", AclOperation.WRITE)])
    untouched = {cluster: _every_rule(box, cluster) for cluster in ("source", "target")}
    back = f"{name}-back"
    reverse = tmp_path / "reverse.yaml"
    reverse.write_text(yaml.safe_dump({
        # No group: the reverse job has copied nothing when it is promoted here, so the application's
        # group would be untranslatable (exit 3); groups through failback are test_security's.
        "name": back, "topics": topic, "groups": f"none-{unique}", "source_bootstrap_servers": box.target.bootstrap,
        "target_bootstrap_servers": box.source.bootstrap,
        "source": box.client_properties("target", "writer", by_reference=True),
        "target": box.client_properties("source", "admin", by_reference=True)}))
    failback = ["failback", "--forward-name", name, "--config", str(reverse), "--format", "json"]
    copied_back = f"ALLOW User:{late_app} READ Topic '{topic}' (literal) from host *"
    staged_back = f"ALLOW User:{late_prod} WRITE Topic '{topic}' (literal) from host *"
    dry = run_cli(*failback, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    doc = json.loads(dry.stdout)
    assert doc["dry_run"] and copied_back in doc["acls"]["create"] and staged_back in doc["acls"]["stage"], doc
    assert not doc["acls"]["delete"], doc
    assert {cluster: _every_rule(box, cluster) for cluster in ("source", "target")} == untouched
    assert secure.group_offsets(box, "source", f"__replicator.{back}", topic, PARTITIONS) == {}
    assert names.acl_state_topic(back) not in secure.admin(box, "source").list_topics(timeout=30).topics

    done = run_cli(*failback)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert copied_back in doc["acls"]["create"] and staged_back in doc["acls"]["stage"], doc
    assert _rules(box, "source", f"User:{late_app}") == {("TOPIC", topic, "LITERAL", "READ")}
    assert _rules(box, "source", f"User:{late_prod}") == set(), "a WRITE reached the old source before promotion"
    time.sleep(1)  # ACLs reach the authorizer through the metadata log
    refused = _produce_as(late_prod_props["source"], topic)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused

    # Promoting the old source back (the reverse job's failover, from the staged set: its dry run
    # first) applies the producer's rule there; the original producer's rule was never removed.
    promote = ["failover", "--config", str(reverse), "--format", "json"]
    dry = run_cli(*promote, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert json.loads(dry.stdout)["acls"]["promotion"] == [staged_back], dry.stdout
    assert _rules(box, "source", f"User:{late_prod}") == set()
    over = run_cli(*promote)
    assert over.returncode == 0, over.stdout + over.stderr
    assert json.loads(over.stdout)["acls"]["promotion"] == [staged_back], over.stdout
    assert _rules(box, "source", f"User:{late_prod}") == {("TOPIC", topic, "LITERAL", "WRITE")}
    assert _rules(box, "source", f"User:{prod}") == {("TOPIC", topic, "LITERAL", "WRITE"),
                                                     ("TRANSACTIONAL_ID", transactional_id, "LITERAL", "WRITE")}
    time.sleep(1)
    assert _produce_as(late_prod_props["source"], topic) is None
    # Nothing anyone else made was deleted on either cluster, through failback and the promotion back.
    for cluster, rules in untouched.items():
        assert rules <= _every_rule(box, cluster), f"a rule was deleted on the {cluster}"
    for principal in (f"User:{app}", f"User:{prod}", leaver, human, f"User:{late_app}", f"User:{late_prod}"):
        secure.revoke_all(box, principal)


_EXAMPLE = acls.acl_set(config_mod.load({"name": "n", "topics": "t", "source_bootstrap_servers": "a:1",
                                         "target_bootstrap_servers": "b:1"}, environ={}), READER, WRITER)
OWN = [a for a in _EXAMPLE if a.feature == acls.ACL_SYNC]


def test_every_acl_sync_acl_has_a_case():
    assert len(OWN) == 5 and {a.cluster for a in OWN} == {"source", "target"}


@pytest.mark.parametrize("removed", OWN, ids=lambda a: f"{a.cluster}-{a.resource_type}-{a.operation}")
def test_each_acl_sync_acl_removed_switches_it_off_in_one_line(box, unique, tmp_path, caplog, removed):
    name = f"acl-off-{unique}"
    config = secure.write_config(box, tmp_path / "replicator.yaml", name, name)
    full = acl_set(config)
    gone = next(a for a in full if (a.cluster, a.resource_type, a.operation) == (removed.cluster,
                                                                                removed.resource_type,
                                                                                removed.operation)
                and a.feature == acls.ACL_SYNC)
    secure.grant(box, [a for a in full if a != gone])
    caplog.set_level(logging.INFO)
    observer = acl_sync.AclSyncObserver(config_mod.load({}, config, environ={}))
    observer.on_start(None)
    lines = [r.getMessage() for r in caplog.records if "ACL sync" in r.getMessage()]
    assert observer.sync is None
    [line] = lines
    principal = "reader" if gone.cluster == "source" else "writer"
    assert line.startswith("ACL sync skipped: ") and principal in line, line
    assert f"{gone.operation} on {gone.cluster} {gone.resource_type} '{gone.resource_name}'" in line, line


def test_switchover_applies_the_live_sources_producer_rules(box, unique, tmp_path):
    """`switchover`'s ACL step (the source answers): a last round of copies, then the producers' rules
    from the source as it is now, each once."""
    topic = name = f"acl-sw-{unique}"
    secure.create_topic(box, "source", topic, PARTITIONS)
    secure.create_topic(box, "target", topic, PARTITIONS)
    consumer, producer = f"User:c-{unique}", f"User:p-{unique}"
    _add(box, "source", [_rule(ResourceType.TOPIC, topic, consumer, AclOperation.ALL),
                         _rule(ResourceType.TOPIC, topic, producer, AclOperation.WRITE)])
    config = secure.write_config(box, tmp_path / "replicator.yaml", name, topic)
    secure.grant(box, acl_set(config))
    cfg = config_mod.load({}, config, environ={})
    doc, lines = acl_sync.promotion_step(cfg, {topic: topic}, live_source=True)
    wanted = f"ALLOW {consumer} READ Topic '{topic}' (literal) from host *"
    assert [c for c in doc["copied"] if consumer in c] == [wanted], doc
    assert doc["promotion"] == [f"ALLOW {consumer} WRITE Topic '{topic}' (literal) from host *",
                                f"ALLOW {producer} WRITE Topic '{topic}' (literal) from host *"], doc
    assert _target_rules(box, consumer) == {("TOPIC", topic, "LITERAL", "READ"), ("TOPIC", topic, "LITERAL", "WRITE")}
    assert _target_rules(box, producer) == {("TOPIC", topic, "LITERAL", "WRITE")}
    again, _ = acl_sync.promotion_step(cfg, {topic: topic}, live_source=True)
    assert again == {"copied": [], "promotion": []}, again
    assert lines == [f"ACL applied at promotion: {w}" for w in doc["promotion"]]
    assert names.acl_state_topic(name) in secure.admin(box, "target").list_topics(timeout=30).topics
    for principal in (consumer, producer):
        secure.revoke_all(box, principal)
