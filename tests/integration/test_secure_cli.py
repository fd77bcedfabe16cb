"""A secure sandbox started as a user starts it (`replicator sandbox up --secure`), used through
nothing but the client properties `sandbox status` prints, then a planned switchover on it with the
least ACL set (required + group sync + promotion): zero loss, the running job stops by itself, no
secret in any output; `sandbox down` stops every broker it started."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import yaml

from replicator import config as config_mod
from replicator.access import acls
from replicator.sandbox import Sandbox
from replicator.sandbox.cluster import _pid_alive, _port_shift
from tests.replicator_process import BIN, ReplicatorProcess, wait_until
from tests.secure_helpers import (
    commit_group,
    committed_records,
    create_topic,
    grant,
    group_offsets,
    keys_by_partition,
    produce,
)

PARTITIONS = 2
# Its own ports: + 70 is the session's secure pair, + 50/60/80/100 the tv0, version and multi-broker ones.
SHIFT = 120


def _cli(env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_sandbox_up_secure_then_switchover_with_the_least_acls(tmp_path: Path, unique: str):
    env = {**os.environ, "REPLICATOR_SANDBOX_DIR": str(tmp_path / "sandbox"),
           "REPLICATOR_SANDBOX_PORT_SHIFT": str(_port_shift() + SHIFT), "REPLICATOR_METRICS_HOST": "127.0.0.1"}
    up = _cli(env, "sandbox", "up", "--secure")
    outputs = [up.stdout + up.stderr]
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        status = json.loads(_cli(env, "sandbox", "status", "--format", "json").stdout)
        pids = [p for s in status.values() for p in s["pids"]]
        assert all(s["serving"] and s["security"] == "scram" for s in status.values()), status
        props = {name: s["client_properties"] for name, s in status.items()}
        target = props["target"]
        assert (target["security.protocol"], target["sasl.mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
        # The same sandbox, seen from the test: for the other principals' files and the ACL helpers.
        box = Sandbox(root=tmp_path / "sandbox", port_shift=_port_shift() + SHIFT, secure="remembered")
        assert [c.bootstrap for c in box.clusters] == [status["source"]["bootstrap"], status["target"]["bootstrap"]]

        topic = name = f"sec-sw-{unique}"
        app = f"app-{unique}"
        create_topic(box, "source", topic, PARTITIONS)
        produce(box, topic, PARTITIONS, 3000)
        commit_group(box, "source", app, topic, {0: 700, 1: 1200})
        # The job's file: what `status` printed, the principal swapped for the least-privileged ones.
        config = tmp_path / "replicator.yaml"
        config.write_text(yaml.safe_dump({
            "name": name, "topics": topic, "groups": app, "group_sync_interval_seconds": 1,
            "source_bootstrap_servers": status["source"]["bootstrap"],
            "target_bootstrap_servers": status["target"]["bootstrap"],
            "source": {**props["source"], **box.client_properties("source", "reader", by_reference=True)},
            "target": {**props["target"], **box.client_properties("target", "writer", by_reference=True)}}))
        least = [a for a in acls.acl_set(config_mod.load({}, config, environ={}), "User:reader", "User:writer")
                 if a.feature in (acls.REQUIRED, acls.CREATE, acls.GROUP_SYNC, acls.PROMOTION)]
        grant(box, least)

        with ReplicatorProcess(box, topic, name, tmp_path / "run.log", "--config", str(config)) as job:
            wait_until(lambda: committed_records(box, "target", topic, PARTITIONS) == 3000, 400,
                       "the first 3000 records on the target", job)
            over = _cli(env, "switchover", "--config", str(config), "--format", "json", "--timeout", "300")
            outputs.append(over.stdout + over.stderr)
            assert over.returncode == 0, over.stdout + over.stderr
            report = json.loads(over.stdout)
            assert report["lost_partitions"] == 0 and report["marker"]["kind"] == "switchover", report
            assert job.wait(120) == 0  # the job sees the marker and stops by itself
            outputs.append(job.log())
        assert "promoted" in outputs[-1]
        assert committed_records(box, "target", topic, PARTITIONS) == 3000
        # The application's group on the target sits on the very records it would read next.
        # (record i sits in partition i % 2 at source offset i // 2)
        keys = keys_by_partition(box, "target", topic, PARTITIONS)
        wanted = {p: next(o for o, k in keys[p] if k == str(2 * x + p).encode()) for p, x in ((0, 700), (1, 1200))}
        assert group_offsets(box, "target", app, topic, PARTITIONS) == wanted
        refused = _cli(env, "run", "--config", str(config), "--metrics-port", "0", timeout=300)
        outputs.append(refused.stdout + refused.stderr)
        assert refused.returncode == 1 and "promoted" in refused.stdout + refused.stderr
        for i, text in enumerate(outputs):
            for cluster in box.clusters:
                for secret in cluster.security.secrets():
                    assert secret not in text, f"a secret of the {cluster.name} sandbox appears in output #{i}"
    finally:
        down = _cli(env, "sandbox", "down", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    deadline = time.monotonic() + 60
    while any(_pid_alive(p) for p in pids if p) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert pids and not any(_pid_alive(p) for p in pids if p), "sandbox down left a broker running"
