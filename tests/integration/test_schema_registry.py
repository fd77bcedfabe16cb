"""Schemas fail over with the records (issue 50): Avro records written through the source's schema
registry carry its schema ids; after `replicator failover` a consumer that resolves them in the DR
side's registry must decode every record, on the very same ids. Real registries (Apicurio, Confluent
API, replicator/sandbox/registry.py), real brokers, a real `replicator run`.

Also: `verify --target-schema-registry` says when the target's registry is behind its records, and a
schema registered on the new primary after the failover reaches the old source's registry with its id
(the failback direction), while one that cannot keep its id is a reported conflict, never dropped."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import Producer

from replicator.ops.schema_registry import Registry, SubjectVersion, registered, schema_id
from replicator.sandbox.registry import registry_pair
from tests.kafka_helpers import create_topic, end_offsets, fake_group_offsets, produce_transactional, read_all
from tests.replicator_process import BIN, ReplicatorProcess, wait_until

PARTITIONS = 2
ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop",
            "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "qty", "type": "int", "default": 1}]}
ORDER_V3 = {**ORDER_V2, "fields": [*ORDER_V2["fields"], {"name": "note", "type": ["null", "string"],
                                                         "default": None}]}
UNRELATED = {"type": "record", "name": "Audit", "fields": [{"name": "who", "type": "string"}]}


@pytest.fixture(scope="module")
def registries(tmp_path_factory):
    """The source cluster's and the target cluster's registries, both empty at the start."""
    source, target = registry_pair(tmp_path_factory.mktemp("registries"))
    try:
        source.start()
        target.start()
        yield source, target
    finally:
        source.stop()
        target.stop()


def _register(registry: Registry, subject: str, schema: dict) -> int:
    return registry.register(subject, SubjectVersion(subject, 0, 0, json.dumps(schema)))


def _int_field(name: str) -> dict:
    return {"name": name, "type": "int", "default": 0}


def _framed(sid: int, schema: dict, record: dict) -> bytes:
    """What a Confluent Avro serializer writes: magic byte 0, the schema id, the Avro body."""
    buf = io.BytesIO()
    buf.write(b"\0" + sid.to_bytes(4, "big"))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def _decode(registry: Registry, payload: bytes) -> tuple[int, dict]:
    """What a Confluent Avro deserializer does: the writer's schema by the id in the record, from `registry`."""
    sid = schema_id(payload)
    assert sid is not None, payload[:8]
    found = registry.schema(sid)
    assert found is not None, f"schema id {sid} is not in {registry.url}"
    writer = fastavro.parse_schema(json.loads(found["schema"]))
    return sid, fastavro.schemaless_reader(io.BytesIO(payload[5:]), writer, None)


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout)


def _schemas_cli(*args: str) -> subprocess.CompletedProcess:
    # `python -m`: the command's own entry point, independent of the top-level CLI's command list.
    return subprocess.run([sys.executable, "-m", "replicator.commands.schemas", *args], capture_output=True,
                          text=True, timeout=300)


def test_dr_consumer_decodes_every_record_on_the_same_ids_after_failover(sandbox, registries, unique, tmp_path: Path):
    src_reg, dst_reg = (Registry(r.url) for r in registries)
    src, dst = sandbox.source.bootstrap, sandbox.target.bootstrap
    topic = name = f"sr-{unique}"
    subject = f"{topic}-value"
    create_topic(src, topic, PARTITIONS)
    # An unrelated schema first, so the topic's ids are not the ids a fresh registry hands out first.
    _register(src_reg, f"audit-{unique}-value", UNRELATED)
    v1, v2 = _register(src_reg, subject, ORDER_V1), _register(src_reg, subject, ORDER_V2)
    assert v1 >= 2 and v2 == v1 + 1
    base = int(time.time() * 1000) - 600_000
    sent = {}
    records = []
    for i in range(1_200):
        schema, sid = (ORDER_V1, v1) if i < 600 else (ORDER_V2, v2)
        rec = {"id": i, "item": f"item-{i % 17}"} | ({"qty": i % 5 + 1} if sid == v2 else {})
        sent[i] = (sid, rec)
        records.append((i % PARTITIONS, f"k{i}".encode(), _framed(sid, schema, rec), [], base + i))
    assert produce_transactional(src, topic, records, f"sr-{unique}", per_txn=200) == 1_200

    conn = ["--source-bootstrap-servers", src, "--target-bootstrap-servers", dst, "--topics", topic, "--name", name]
    with ReplicatorProcess(sandbox, topic, name, tmp_path / "job.log", "--shards", "1") as job:
        ends = end_offsets(src, topic, PARTITIONS)
        wait_until(lambda: {p: o for (t, p), o in fake_group_offsets(dst, f"__replicator.{name}").items()
                            if t == topic} == ends, 300, "replication", job, interval=2)
        assert job.sigterm() == 0

    # The records are on the target, their schemas are not: verify says the registry is behind.
    behind = _cli("verify", *conn, "--target-schema-registry", dst_reg.url)
    assert behind.returncode == 1, behind.stdout + behind.stderr
    for sid in (v1, v2):
        assert f"refer to schema id {sid}, which the target's schema registry" in behind.stdout, behind.stdout
    assert "registry is behind the records" in behind.stdout

    # The sync, as run next to `replicator run`: every second until SIGTERM.
    loop = subprocess.Popen([sys.executable, "-m", "replicator.commands.schemas", "sync", "--from", src_reg.url,
                             "--to", dst_reg.url, "--interval", "1", "--log-format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: dst_reg.schema(v2) is not None, 120, "the schema sync")
    finally:
        loop.send_signal(signal.SIGTERM)
        out, err = loop.communicate(timeout=60)
    assert loop.returncode == 0, out + err
    copied = [json.loads(line) for line in err.splitlines() if '"schema_copied"' in line]
    assert {(c["subject"], c["schema_id"]) for c in copied} >= {(subject, v1), (subject, v2)}, err
    assert [(s.subject, s.version, s.id) for s in registered(dst_reg)] == \
        [(s.subject, s.version, s.id) for s in registered(src_reg)]
    caught_up = _cli("verify", *conn, "--target-schema-registry", dst_reg.url)
    assert caught_up.returncode == 0, caught_up.stdout + caught_up.stderr
    assert "OK: the target holds exactly" in caught_up.stdout

    sandbox.source.stop()  # the source cluster is lost
    try:
        out = _cli("failover", *conn, "--format", "json")
        assert out.returncode == 0, out.stdout + out.stderr
        assert json.loads(out.stdout)["marker"]["kind"] == "failover"

        # A DR consumer, resolving schemas in the DR registry only: every record, same ids, same data.
        decoded = {}
        for msgs in read_all(dst, topic, PARTITIONS, timeout=60).values():
            for m in msgs:
                sid, rec = _decode(dst_reg, m.value())
                decoded[rec["id"]] = (sid, rec)
        assert decoded == sent

        # The new primary's applications evolve the schema there...
        v3 = _register(dst_reg, subject, ORDER_V3)
        assert v3 == v2 + 1
        p = Producer({"bootstrap.servers": dst})
        p.produce(topic, key=b"new", value=_framed(v3, ORDER_V3, {"id": 5000, "item": "x", "qty": 2, "note": "dr"}))
        assert p.flush(30) == 0
    finally:
        sandbox.source.start()
        sandbox.source.wait_ready()

    # ... and fail back: the reverse job copies the new record to the old source, whose registry
    # lacks its schema until the sync runs the other way; then it gets it under the same id.
    rev = f"srback-{unique}"
    rev_conn = ["--source-bootstrap-servers", dst, "--target-bootstrap-servers", src, "--topics", topic,
                "--name", rev]
    out = _cli("failback", *rev_conn, "--forward-name", name, "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    dst_ends = end_offsets(dst, topic, PARTITIONS)
    with ReplicatorProcess(sandbox, topic, rev, tmp_path / "rev.log", "--shards", "1",
                           source=sandbox.target, target=sandbox.source) as job:
        wait_until(lambda: {p: o for (t, p), o in fake_group_offsets(src, f"__replicator.{rev}").items()
                            if t == topic} == dst_ends, 300, "the reverse copy", job, interval=2)
        assert job.sigterm() == 0
    behind = _cli("verify", *rev_conn, "--target-schema-registry", src_reg.url)
    lacking = [line for line in behind.stdout.splitlines() if "which the target's schema registry" in line]
    assert lacking and all(f"refer to schema id {v3}," in line for line in lacking), behind.stdout
    assert behind.returncode == 1
    back = _schemas_cli("sync", "--from", dst_reg.url, "--to", src_reg.url, "--format", "json")
    assert back.returncode == 0, back.stdout + back.stderr
    assert json.loads(back.stdout)["copied"] == [{"subject": subject, "version": 3, "id": v3}]
    assert json.loads(src_reg.schema(v3)["schema"]) == ORDER_V3
    fixed = _cli("verify", *rev_conn, "--target-schema-registry", src_reg.url)
    assert "which the target's schema registry" not in fixed.stdout, fixed.stdout
    on_old = [_decode(src_reg, m.value()) for msgs in read_all(src, topic, PARTITIONS).values() for m in msgs]
    assert (v3, {"id": 5000, "item": "x", "qty": 2, "note": "dr"}) in on_old
    assert sorted(rec["id"] for _, rec in on_old) == [*range(1_200), 5000]

    # Split brain: both sides registered a new schema after the failover; they got the same id. The
    # failback sync refuses to register (the old source would otherwise hold two schemas' data under one
    # id, or drop the new primary's): exit 3, the conflict named; each registry keeps its own.
    dr_only = _register(dst_reg, subject, {**ORDER_V3, "fields": [*ORDER_V3["fields"], _int_field("a")]})
    old_only = _register(src_reg, f"audit-{unique}-value", {**UNRELATED, "fields": [*UNRELATED["fields"],
                                                                                   _int_field("b")]})
    assert dr_only == old_only
    split = _schemas_cli("sync", "--from", dst_reg.url, "--to", src_reg.url)
    assert split.returncode == 3, split.stdout + split.stderr
    assert f"CONFLICT schema id {dr_only} ({subject} v4) names a different schema on the target registry" \
        in split.stdout, split.stdout
    assert json.loads(src_reg.schema(old_only)["schema"])["name"] == "Audit"
    assert json.loads(dst_reg.schema(dr_only)["schema"])["name"] == "Order"


def test_bad_registry_url_is_a_usage_error(registries):
    out = _schemas_cli("sync", "--from", "ftp://user:secret@127.0.0.1/x", "--to", registries[1].url)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--from" in out.stderr and "http(s)://[user:password@]host" in out.stderr
    assert "secret" not in out.stdout + out.stderr


def test_unreachable_registry_fails_with_exit_1(registries):
    out = _schemas_cli("sync", "--from", "http://127.0.0.1:9/apis/ccompat/v7", "--to", registries[1].url)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "schema registry http://127.0.0.1:9/apis/ccompat/v7 cannot be reached" in out.stderr
