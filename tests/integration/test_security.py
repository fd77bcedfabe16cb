"""The replicator on clusters that authenticate (mTLS source, SCRAM-SHA-512 target) and authorize
(default deny), with exactly the ACLs `replicator acls` prints, granted to the non-super principals
`reader` (source) and `writer` (target):

- with the set, a run pins the target's cluster id on the source, is SIGKILLed and restarted and
  replicates exactly once (`replicator verify`) and,
  with exactly the required + group-sync ACLs, syncs an application's group to its exact translated
  offsets; `lag`/`topics`/`verify` work through the same config file;
- without any one required ACL the job exits 1 at start-up naming permission, resource and
  principal, having written nothing; without the optional ones it skips those features and says so
  (each optional ACL on its own: test_security_optional.py);
- bad credentials and certificates exit 1 promptly, naming the cluster and the cause;
- no secret appears in any output, in either log format.

Spark runs are few (two, in the exactly-once test); every other case fails or stops before Spark.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from replicator import config as config_mod
from replicator import names
from replicator.access import acls
from replicator.engine import cluster_identity
from replicator.groups import promotion
from replicator.sandbox.security import CertificateAuthority
from tests.replicator_process import BIN, ReplicatorProcess, wait_until
from tests.secure_helpers import (
    admin,
    commit_group,
    committed_records,
    create_topic,
    grant,
    group_offsets,
    keys_by_partition,
    produce,
    revoke_all,
    write_config,
)

PARTITIONS = 2
READER, WRITER = "User:reader", "User:writer"
# Start-up failures must come well within this, even on a loaded 2-core box (the pre-flight's own
# client timeouts are 20-30 s).
BOUNDED_S = 150


@pytest.fixture
def box(secure_sandbox):
    yield secure_sandbox
    revoke_all(secure_sandbox, READER)
    revoke_all(secure_sandbox, WRITER)


def run_cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "REPLICATOR_METRICS_HOST": "127.0.0.1", **(env or {})})


def start_failure(config: Path, log: Path) -> tuple[int, str, float]:
    """Runs the job expecting it to stop by itself; returns exit code, output and seconds taken."""
    started = time.monotonic()
    proc = run_cli("run", "--config", str(config), "--metrics-port", "0", timeout=BOUNDED_S)
    log.write_text(proc.stdout + proc.stderr)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def cfg_of(config: Path) -> config_mod.ReplicatorConfig:
    return config_mod.load({}, config, environ={})


def acl_set(config: Path) -> list[acls.Acl]:
    return acls.acl_set(cfg_of(config), READER, WRITER)


def assert_no_secrets(box, text: str, where: str) -> None:
    for cluster in box.clusters:
        for secret in cluster.security.secrets():
            assert secret not in text, f"a secret of the {cluster.name} sandbox appears in {where}"


def nothing_written(box, topic: str, group: str) -> None:
    target = admin(box, "target")
    md = target.list_topics(timeout=30).topics.get(topic)
    if md is not None and md.error is None:
        assert committed_records(box, "target", topic, len(md.partitions)) == 0
    # Asked through a member-less consumer, not AdminClient.list_consumer_group_offsets: librdkafka
    # 2.16 dereferences a missing group handle on a coordinator error in that response and kills the
    # whole pytest process (SIGSEGV in rd_kafka_cgrp_op; replicator/offsets.py avoids it the same way).
    assert group_offsets(box, "target", group, topic, PARTITIONS) == {}, "offsets were committed"


# -- exactly once with the least set ---------------------------------------------------------------
def test_least_acls_replicate_exactly_once_through_sigkill_and_restart(box, unique, tmp_path):
    topic, name = f"sec-eos-{unique}", f"sec-eos-{unique}"
    create_topic(box, "source", topic, PARTITIONS)
    produce(box, topic, PARTITIONS, 4000)
    app = f"app-{unique}"  # an application's consumer group on the source
    config = write_config(box, tmp_path / "replicator.yaml", name, topic, shards=2, groups=app,
                          batch_duration_seconds=5, max_records_per_transaction=250)
    grant(box, acl_set(config))
    outputs: list[str] = []
    group = f"__replicator.{name}"

    def target_count() -> int:
        return committed_records(box, "target", topic, PARTITIONS)

    # Run 1 (text logs): creates the target topic, copies some, is SIGKILLed mid-way.
    with ReplicatorProcess(box, topic, name, tmp_path / "run1.log", "--config", str(config)) as job:
        wait_until(lambda: target_count() > 0, 400, "first records on the target", job)
        port = int(re.search(r"metrics listening on [\d.]+:(\d+)", job.log()).group(1))
        outputs.append(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode())
        job.sigkill()
        log1 = job.log()
        outputs.append(log1)
    # Exactly `replicator acls` pins the target's cluster id on the source (issue 50): one offset in
    # the pin group, and no warning that the job runs unpinned.
    assert cluster_identity.PIN_SKIPPED not in log1 and "cluster_pin_unavailable" not in log1, log1[-3000:]
    assert group_offsets(box, "source", names.target_pin_group(cfg_of(config).name), topic, PARTITIONS) == {0: 0}
    produce(box, topic, PARTITIONS, 2000, start=4000)
    # The application has read part of each partition (record i sits in partition i % 2 at offset i // 2).
    app_offsets = {0: 1234, 1: 2500}
    commit_group(box, "source", app, topic, app_offsets)

    # Run 2 (JSON logs) with the least set for replication and group sync (required + group sync):
    # the target topic exists, creation, config sync and the cluster pin are skipped and said so
    # (the pin committed by run 1 stays; it is not re-committed); the copy resumes from
    # the target's offsets group; the application's group is synced to its exact translated offsets.
    revoke_all(box, WRITER)
    revoke_all(box, READER)
    grant(box, [a for a in acl_set(config) if a.feature in (acls.REQUIRED, acls.GROUP_SYNC)])
    with ReplicatorProcess(box, topic, name, tmp_path / "run2.log", "--config", str(config),
                           "--log-format", "json") as job:
        def caught_up() -> bool:
            done = run_cli("lag", "--config", str(config), "--max-lag", "0")
            outputs.append(done.stdout + done.stderr)
            return done.returncode == 0
        wait_until(caught_up, 400, "catch-up after the restart", job, interval=5)
        # Exact: the target offset of the very record the application would read next on the source.
        keys = keys_by_partition(box, "target", topic, PARTITIONS)
        wanted = {p: next(o for o, k in keys[p] if k == str(2 * x + p).encode()) for p, x in app_offsets.items()}
        wait_until(lambda: group_offsets(box, "target", app, topic, PARTITIONS) == wanted, 120,
                   f"group {app} synced to {wanted}", job, interval=2)
        assert job.sigterm() == 0
        log2 = job.log()
        outputs.append(log2)
    assert "topic creation skipped for target topic" in log2 and "topic config sync skipped" in log2
    assert "writer" in log2  # names the principal lacking the optional ACLs
    pin_group = names.target_pin_group(cfg_of(config).name)
    [unpinned] = [line for line in log2.splitlines() if cluster_identity.PIN_SKIPPED in line]
    assert "reader" in unpinned and f"lacks Read on source Group '{pin_group}'" in unpinned, unpinned
    assert "group sync skipped" not in log2 and "group sync not started" not in log2
    assert target_count() == 6000

    # verify, lag and topics through the same file (reader on the source, writer on the target).
    audit = run_cli("verify", "--config", str(config), "--quiesced", "--require-caught-up")
    outputs.append(audit.stdout + audit.stderr)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "OK: the target holds exactly the source's committed records" in audit.stdout
    lag = run_cli("lag", "--config", str(config), "--format", "json")
    outputs.append(lag.stdout + lag.stderr)
    assert lag.returncode == 0 and json.loads(lag.stdout)["lag_records"] == 0
    topics = run_cli("topics", "--config", str(config))
    outputs.append(topics.stdout + topics.stderr)
    assert topics.returncode == 0 and topic in topics.stdout
    outputs.append(run_cli("acls", "--config", str(config)).stdout)

    # The consumer-group commands (issue 12) through the same file and the same least set: `groups`
    # and `failover --dry-run` only read (reader on the source, writer on the target).
    listed = run_cli("groups", "--config", str(config), "--format", "json")
    outputs.append(listed.stdout + listed.stderr)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    doc = json.loads(listed.stdout)
    [status] = [g for g in doc["groups"] if g["group"] == app]
    assert doc["source_reachable"] and status["state"] == "synced", status
    assert {p["partition"]: p["target_offset"] for p in status["partitions"]} == wanted, status
    assert all(p["exact"] and p["ahead"] == 0 for p in status["partitions"]), status
    dry = run_cli("failover", "--dry-run", "--config", str(config), "--format", "json")
    outputs.append(dry.stdout + dry.stderr)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    doc = json.loads(dry.stdout)
    [status] = [g for g in doc["groups"] if g["group"] == app]
    assert doc["dry_run"] and doc["marker"] is None and status["rpo_offsets"] == 0, doc
    assert {p["partition"]: p["target_offset"] for p in status["partitions"]} == wanted, status
    assert names.marker_topic(name) not in admin(box, "target").list_topics(timeout=30).topics

    # A real failover needs the promotion ACLs too (marker topic Create/Write/Read), and no more:
    # it fences the shards, writes the cut and leaves the application's group where the sync put it.
    grant(box, [a for a in acl_set(config) if a.feature == acls.PROMOTION])
    over = run_cli("failover", "--config", str(config), "--format", "json")
    outputs.append(over.stdout + over.stderr)
    assert over.returncode == 0, over.stdout + over.stderr
    doc = json.loads(over.stdout)
    doc_cut = doc["marker"]["cut"]
    assert {(c["partition"], c["source_next"]) for c in doc_cut} == {(0, 3000), (1, 3000)}, doc
    assert group_offsets(box, "target", app, topic, PARTITIONS) == wanted
    # Records the source takes after the cut are what `divergence` reports (exit 3: to decide about).
    produce(box, topic, PARTITIONS, 10, start=6000)
    diverged = run_cli("divergence", "--config", str(config), "--format", "json")
    outputs.append(diverged.stdout + diverged.stderr)
    assert diverged.returncode == 3, diverged.stdout + diverged.stderr
    doc = json.loads(diverged.stdout)
    assert doc["promoted"] == "failover" and doc["diverged_records"] == 10, doc
    assert {(r["partition"], r["from"], r["to"], r["records"]) for r in doc["partitions"]} == \
        {(0, 3000, 3005, 5), (1, 3000, 3005, 5)}, doc
    cut = {c["partition"]: c["target_end"] for c in doc_cut}
    # `failback` with the reverse job's file (source: the new primary as `writer`, target: the old
    # source as its administrator, the reverse job's own principal): it reads the marker on the new
    # primary with that cluster's settings, and starts the reverse job at the cut.
    back = f"{name}-back"
    reverse = tmp_path / "reverse.yaml"
    reverse.write_text(yaml.safe_dump({
        "name": back, "topics": topic, "groups": app, "source_bootstrap_servers": box.target.bootstrap,
        "target_bootstrap_servers": box.source.bootstrap,
        "source": box.client_properties("target", "writer", by_reference=True),
        "target": box.client_properties("source", "admin", by_reference=True)}))
    failback = run_cli("failback", "--forward-name", name, "--config", str(reverse), "--format", "json")
    outputs.append(failback.stdout + failback.stderr)
    assert failback.returncode == 0, failback.stdout + failback.stderr
    doc = json.loads(failback.stdout)
    assert {(r["partition"], r["offset"]) for r in doc["start"]} == set(cut.items()) and doc["adopted_groups"] == [app]
    assert group_offsets(box, "source", f"__replicator.{back}", topic, PARTITIONS) == cut
    outputs.append(run_cli("run", "--help", env={"REPLICATOR_TARGET__SASL_PASSWORD": "${file:/nonexistent}"}).stdout)

    # The secret grep: every output of this secure run, both log formats, the metrics page.
    assert any(line.startswith("{") for line in log2.splitlines())
    for i, text in enumerate(outputs):
        assert_no_secrets(box, text, f"output #{i}")
    assert group  # the offsets group name is what `lag` reported on


# -- each ACL removed ------------------------------------------------------------------------------
def _kind(a: acls.Acl) -> str:
    return "TranslationIndex" if a.resource_name.endswith(".xlate") else a.resource_type


def _case_id(a: acls.Acl) -> str:
    return f"{a.cluster}-{_kind(a)}-{a.operation}-{a.feature.replace(' ', '_')}"


_EXAMPLE = acls.acl_set(config_mod.load({"name": "n", "topics": "t", "source_bootstrap_servers": "a:1",
                                         "target_bootstrap_servers": "b:1"}, environ={}), READER, WRITER)
FAILING = [a for a in _EXAMPLE if a.feature == acls.REQUIRED] + \
          [a for a in _EXAMPLE if a.feature == acls.CREATE]


@pytest.mark.parametrize("removed", FAILING, ids=_case_id)
def test_each_missing_acl_stops_the_job_naming_it_with_nothing_written(box, unique, tmp_path, removed):
    topic, name = f"sec-acl-{unique}", f"sec-acl-{unique}"
    create_topic(box, "source", topic, PARTITIONS)
    produce(box, topic, PARTITIONS, 10)
    if removed.operation == "Alter":  # only growing needs Alter: a target topic with fewer partitions
        create_topic(box, "target", topic, PARTITIONS - 1)
    config = write_config(box, tmp_path / "replicator.yaml", name, topic, shards=2)
    full = acl_set(config)
    gone = next(a for a in full if (a.cluster, _kind(a), a.operation) ==
                (removed.cluster, _kind(removed), removed.operation))
    # Without the group-sync set: its group patterns (`groups: .*` -> every group) would cover the
    # job's own groups and hide the removal; without the promotion set: its Read on the marker topic
    # implies the required Describe there.
    grant(box, [a for a in full if a != gone and a.feature not in (acls.GROUP_SYNC, acls.PROMOTION)])
    code, output, seconds = start_failure(config, tmp_path / "run.log")
    assert code == 1, output
    assert seconds < BOUNDED_S
    message = next((line for line in output.splitlines() if "does not allow" in line), "")
    assert message, output[-3000:]
    principal = "reader" if gone.cluster == "source" else "writer"
    assert f"the {gone.cluster} cluster" in message and principal in message, message
    assert f" {gone.operation} {gone.resource_type} '{gone.resource_name}" in message, message
    nothing_written(box, topic, f"__replicator.{name}")
    assert_no_secrets(box, output, "the job's output")


PROMOTING = [a for a in _EXAMPLE if a.feature == acls.PROMOTION]


@pytest.mark.parametrize("removed", PROMOTING, ids=_case_id)
def test_each_missing_promotion_acl_stops_the_command_naming_it(box, unique, tmp_path, removed):
    """`failover` without Create or Write on the marker topic, `divergence` without Read: exit 1
    naming permission, resource and principal; a refused failover leaves no promotion behind (so
    `run` would still start; the check comes before any shard is fenced)."""
    topic, name = f"sec-pro-{unique}", f"sec-pro-{unique}"
    create_topic(box, "source", topic, PARTITIONS)
    create_topic(box, "target", topic, PARTITIONS)
    # The job's fake group as a replication leaves it: failover refuses a job with no offsets there.
    commit_group(box, "target", f"__replicator.{name}", topic, {p: 0 for p in range(PARTITIONS)})
    config = write_config(box, tmp_path / "replicator.yaml", name, topic, shards=1, groups=f"app-{unique}")
    full = acl_set(config)
    gone = next(a for a in full if a.feature == acls.PROMOTION and a.operation == removed.operation)
    grant(box, [a for a in full if a != gone])
    command = "divergence" if gone.operation == "Read" else "failover"
    if command == "divergence":  # a failover by the same principal (allowed to write the marker) ran
        over = run_cli("failover", "--config", str(config), timeout=BOUNDED_S)
        assert over.returncode == 0, over.stdout + over.stderr
    started = time.monotonic()
    proc = run_cli(command, "--config", str(config), timeout=BOUNDED_S)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and time.monotonic() - started < BOUNDED_S, output
    message = next((line for line in output.splitlines() if "does not allow" in line), "")
    assert "the target cluster" in message and "writer" in message, output[-3000:]
    assert f" {gone.operation} Topic '{names.marker_topic(name)}'" in message, message
    if command == "failover":
        assert not promotion.promoted(admin(box, "target"), name)
    assert_no_secrets(box, output, f"{command}'s output")


# -- bad credentials and certificates ------------------------------------------------------------
def _bad(box, tmp_path: Path, case: str) -> tuple[Path, str, str]:
    """A config broken in one way; returns it, the cluster it breaks and words the cause must use."""
    config = write_config(box, tmp_path / "replicator.yaml", f"bad-{case}", "nothing-here")
    cfg = yaml.safe_load(config.read_text())
    mtls = box.source.security
    if case == "wrong-password":
        (tmp_path / "pw").write_text("not-the-password\n")
        cfg["target"]["sasl.password"] = f"${{file:{tmp_path / 'pw'}}}"
        cluster, cause = "target", "authentication"
    elif case == "unknown-ca":
        other = CertificateAuthority(tmp_path / "other-ca")
        cfg["source"]["ssl.ca.location"] = str(other.cert_path)
        cluster, cause = "source", "certificate verify failed"
    elif case == "expired-cert":
        mtls.ca.issue("reader", tmp_path / "expired.crt", tmp_path / "expired.key", expired=True)
        cfg["source"]["ssl.certificate.location"] = str(tmp_path / "expired.crt")
        cfg["source"]["ssl.key.location"] = str(tmp_path / "expired.key")
        cluster, cause = "source", "expired"
    elif case == "wrong-hostname":
        # The broker's certificate names 127.0.0.1 only.
        cfg["target_bootstrap_servers"] = f"localhost:{box.target.port}"
        cluster, cause = "target", "certificate verify failed"
    elif case == "missing-key":
        cfg["source"]["ssl.key.location"] = str(tmp_path / "no-such.key")
        cluster, cause = "source", "cannot read the private key"
    else:
        raise AssertionError(case)
    config.write_text(yaml.safe_dump(cfg))
    return config, cluster, cause


@pytest.mark.parametrize("case", ["wrong-password", "unknown-ca", "expired-cert", "wrong-hostname", "missing-key"])
def test_bad_credentials_exit_1_promptly_naming_cluster_and_cause(box, tmp_path, case):
    config, cluster, cause = _bad(box, tmp_path, case)
    code, output, seconds = start_failure(config, tmp_path / "run.log")
    assert code == 1, output[-3000:]
    assert seconds < BOUNDED_S
    error = "\n".join(line for line in output.splitlines() if " ERROR " in line or line.startswith("error"))
    assert f"the {cluster} cluster" in error, output[-3000:]
    assert cause in error.lower(), error
    assert "Traceback" not in output
    assert_no_secrets(box, output, "the job's output")
