"""librdkafka's own log lines go through our logging (and its format), never raw to stderr."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_client_log_lines_are_ours_in_json_too():
    # Nothing listens on port 9: every client logs connection failures while it polls.
    script = textwrap.dedent("""
        from replicator import kafka_clients, logs
        from replicator.config import ReplicatorConfig
        logs.configure("json", "INFO")
        cfg = ReplicatorConfig(source_bootstrap_servers="127.0.0.1:9", target_bootstrap_servers="127.0.0.1:9",
                               source={"debug": "broker"})
        consumer = kafka_clients.source_consumer(cfg)
        producer = kafka_clients.target_producer(cfg, None)
        for _ in range(15):
            consumer.poll(0.1)
            producer.poll(0.1)
        consumer.close()
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines, "no client log line at all: the check would prove nothing"
    raw = [line for line in lines if line.startswith("%")]
    assert raw == [], f"raw librdkafka lines on stderr: {raw[:3]}"
    assert any('"logger": "replicator.librdkafka"' in line for line in lines)
