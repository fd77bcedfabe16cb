"""The sandbox signals only processes it started: a pid file naming another process (a reused pid,
another sandbox's broker) is stale, and sandboxes on different port shifts keep separate directories."""

from __future__ import annotations

import subprocess

from replicator.sandbox import cluster


def test_a_pid_file_naming_a_process_it_did_not_start_is_stale(tmp_path):
    other = subprocess.Popen(["sleep", "60"])
    try:
        pid_file = tmp_path / "kafka.pid"
        cluster.record_pid(other, pid_file, "sleep 60")
        assert cluster.live_pid(pid_file, str(tmp_path / "server.properties")) is None
        assert cluster.live_pid(pid_file, "sleep 60") == other.pid
    finally:
        other.kill()
        other.wait()
    assert cluster.live_pid(pid_file, "sleep 60") is None


def test_each_port_shift_has_its_own_default_directory(monkeypatch):
    monkeypatch.delenv("REPLICATOR_SANDBOX_DIR", raising=False)
    monkeypatch.delenv("REPLICATOR_SANDBOX_PORT_SHIFT", raising=False)
    plain = cluster.default_root()
    monkeypatch.setenv("REPLICATOR_SANDBOX_PORT_SHIFT", "3000")
    assert cluster.default_root() == plain.with_name(f"{plain.name}-3000")
    monkeypatch.setenv("REPLICATOR_SANDBOX_DIR", "/tmp/elsewhere")
    assert str(cluster.default_root()) == "/tmp/elsewhere"


def test_a_process_just_started_counts_as_running_at_once(tmp_path):
    """Popen returns while the kernel still loads the program, its command line empty for a moment;
    a broker checked then was reported as exited during start-up (about 1 % of starts here)."""
    pid_file = tmp_path / "kafka.pid"
    for _ in range(1000):
        proc = subprocess.Popen(["sleep", "5", "0.0417"], start_new_session=True)
        try:
            cluster.record_pid(proc, pid_file, "5 0.0417")
            assert cluster.live_pid(pid_file, "5 0.0417") == proc.pid
        finally:
            proc.kill()
            proc.wait()
