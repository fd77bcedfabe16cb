"""Bad input to the real `replicator run`: each case exits with a clear message and leaves nothing
half-written on the target."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.kafka_helpers import (
    assert_identical,
    commit_member_less,
    create_topic,
    end_offsets,
    fake_group_offsets,
    produce_transactional,
    read_all,
    topic_names,
)
from tests.replicator_process import ReplicatorProcess, wait_until

BIN = Path(sys.executable).with_name("replicator")


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def run_args(sandbox, topics: str, name: str, *extra: str) -> list[str]:
    return ["run", "--source-bootstrap-servers", sandbox.source.bootstrap, "--target-bootstrap-servers",
            sandbox.target.bootstrap, "--topics", topics, "--name", name, "--metrics-port", "0", *extra]


def records(n: int, partitions: int = 1, size: int = 0) -> list[tuple]:
    now = int(time.time() * 1000)
    return [(i % partitions, f"k{i}".encode(), (f"v{i}-" + "x" * size).encode(), None, now + i) for i in range(n)]


@pytest.mark.parametrize("extra, env, key", [
    (["--shards", "0"], {}, "shards"),
    (["--guarantee", "twice"], {}, "guarantee"),
    ([], {"REPLICATOR_TRANSACTION_TIMEOUT_MS": "999999999"}, "transaction_timeout_ms"),
    ([], {"REPLICATOR_LOG_LEVEL": "LOUD"}, "log_level"),
])
def test_invalid_configuration_exits_2_naming_the_key(sandbox, extra, env, key):
    proc = run_cli(*run_args(sandbox, "t", "bad-config", *extra), env=env, timeout=120)
    assert proc.returncode == 2
    assert f"invalid configuration '{key}'" in proc.stderr


@pytest.mark.parametrize("yaml_text, key", [
    ("shardz: 4\n", "shardz"),
    ("target:\n  enable.idempotence: false\n", "target.enable.idempotence"),
    ("source:\n  security.protocol: PLAINTXT\n", "source.security.protocol"),
])
def test_invalid_config_file_exits_2_naming_the_key(sandbox, tmp_path, yaml_text, key):
    path = tmp_path / "replicator.yaml"
    path.write_text(yaml_text)
    proc = run_cli(*run_args(sandbox, "t", "bad-file", "--config", str(path)), timeout=120)
    assert proc.returncode == 2
    assert f"invalid configuration '{key}'" in proc.stderr


def test_unreachable_cluster_exits_1_naming_it(sandbox, unique):
    role = "source"  # the target's path is the same; the credentials test below names the target
    args = run_args(sandbox, "t", f"unreachable-{unique}")
    args[args.index(f"--{role}-bootstrap-servers") + 1] = "127.0.0.1:1"
    proc = run_cli(*args)
    assert proc.returncode == 1
    assert f"cannot reach the {role} cluster at 127.0.0.1:1" in proc.stdout + proc.stderr


@pytest.mark.parametrize("command", ["groups", "failover", "switchover"])
def test_dr_commands_with_the_target_unreachable_exit_1_naming_it(sandbox, command):
    """Every DR command reads the target first: it says so then, and writes nothing anywhere."""
    proc = run_cli(command, "--source-bootstrap-servers", sandbox.source.bootstrap, "--target-bootstrap-servers",
                   "127.0.0.1:1", "--topics", "t", "--name", "nowhere", timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "error: cannot reach the target cluster at 127.0.0.1:1" in proc.stderr, proc.stderr
    assert "__replicator.nowhere.checkpoints" not in topic_names(sandbox.source.bootstrap)


@pytest.mark.parametrize("role, props, symptom", [
    ("source", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                "sasl.password": "s3cr3t-pw"}, "SASL"),
    ("target", {"security.protocol": "SSL"}, "SSL handshake failed"),
])
def test_wrong_credentials_exit_1_naming_the_cluster_without_leaking_secrets(sandbox, tmp_path, unique, role, props,
                                                                             symptom):
    """SASL against a PLAINTEXT listener, TLS against a PLAINTEXT listener: the handshake fails."""
    path = tmp_path / "replicator.yaml"
    path.write_text(json.dumps({role: props}))  # JSON is YAML
    topic = f"creds-{unique}"
    create_topic(sandbox.source.bootstrap, topic)
    proc = run_cli(*run_args(sandbox, topic, f"creds-{unique}", "--config", str(path)))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert f"cannot reach the {role} cluster" in output
    assert symptom in output
    assert "s3cr3t-pw" not in output
    assert fake_group_offsets(sandbox.target.bootstrap, f"__replicator.creds-{unique}") == {}


def test_record_larger_than_the_target_allows_fails_and_writes_nothing(sandbox, unique):
    """The target topic's max.message.bytes (set by its owner; config sync off) is below a source
    record: the job stops with an error naming the topic and partition, no transaction stays open and
    the fake group does not move for that partition."""
    topic, name = f"toolarge-{unique}", f"toolarge-{unique}"
    create_topic(sandbox.source.bootstrap, topic)
    create_topic(sandbox.target.bootstrap, topic, config={"max.message.bytes": "10000"})
    produce_transactional(sandbox.source.bootstrap, topic, records(5), f"small-{unique}")
    produce_transactional(sandbox.source.bootstrap, topic, records(1, size=50_000), f"big-{unique}")

    proc = run_cli(*run_args(sandbox, topic, name, "--shards", "1"),
                   env={"REPLICATOR_SYNC_TOPIC_CONFIGS": "false"})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert "refused a record as too large" in output and f"{topic} [0]" in output

    assert fake_group_offsets(sandbox.target.bootstrap, f"__replicator.{name}") == {}
    assert read_all(sandbox.target.bootstrap, topic, 1) == {0: []}
    lso = end_offsets(sandbox.target.bootstrap, topic, 1, committed=True)
    hw = end_offsets(sandbox.target.bootstrap, topic, 1, committed=False)
    assert lso == hw, "a transaction was left open on the target"
    verify = run_cli("verify", "--source-bootstrap-servers", sandbox.source.bootstrap, "--target-bootstrap-servers",
                     sandbox.target.bootstrap, "--topics", topic, "--name", name, "--quiesced", "--format", "json")
    report = json.loads(verify.stdout)
    # The job refused its first record, so its group holds nothing to compare: exit 1 says so, with
    # no violation and nothing left open.
    assert verify.returncode == 1 and report["nothing_verified"] and report["violations"] == [], report
    assert report["open_transactions"] == [] and report["hanging_transactions"] == []


def test_target_topic_with_too_few_partitions_is_grown_before_any_write(sandbox, unique, tmp_path):
    topic, name = f"short-{unique}", f"short-{unique}"
    create_topic(sandbox.source.bootstrap, topic, partitions=3)
    create_topic(sandbox.target.bootstrap, topic, partitions=1)
    committed = produce_transactional(sandbox.source.bootstrap, topic, records(300, partitions=3), f"p-{unique}")
    ends = end_offsets(sandbox.source.bootstrap, topic, 3)

    with ReplicatorProcess(sandbox, topic, name, tmp_path / "run.log", "--shards", "2") as proc:
        wait_until(lambda: fake_group_offsets(sandbox.target.bootstrap, f"__replicator.{name}")
                   == {(topic, p): ends[p] for p in range(3)}, 300, "the copy to finish", proc)
        assert proc.sigterm() == 0

    md = AdminClient({"bootstrap.servers": sandbox.target.bootstrap}).list_topics(topic, timeout=30)
    assert len(md.topics[topic].partitions) == 3
    # Source partition p landed on target partition p only, starting at the partition's first offset:
    # nothing was written while the target had a single partition.
    assert assert_identical(sandbox.source.bootstrap, sandbox.target.bootstrap, topic, 3) == committed
    assert [m.offset() for m in read_all(sandbox.target.bootstrap, topic, 3)[2][:1]] == [0]


def test_offsets_group_written_by_someone_else_is_refused(sandbox, unique):
    """Offsets ahead of the source's end: another job's group, or a recreated source topic."""
    topic, name = f"foreign-{unique}", f"foreign-{unique}"
    group = f"__replicator.{name}"
    create_topic(sandbox.source.bootstrap, topic)
    create_topic(sandbox.target.bootstrap, topic)
    produce_transactional(sandbox.source.bootstrap, topic, records(10), f"p-{unique}")
    other = Consumer({"bootstrap.servers": sandbox.target.bootstrap, "group.id": group})
    commit_member_less(other, [TopicPartition(topic, 0, 5000)])
    other.close()

    proc = run_cli(*run_args(sandbox, topic, name))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert f"the offsets group {group!r}" in output and "beyond the source's end" in output
    assert fake_group_offsets(sandbox.target.bootstrap, group) == {(topic, 0): 5000}
    assert read_all(sandbox.target.bootstrap, topic, 1) == {0: []}
