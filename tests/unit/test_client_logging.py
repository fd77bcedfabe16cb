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
        from replicator import logs
        from replicator.clients import kafka_clients
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


def test_a_broker_that_stays_down_is_one_line_per_window_not_a_flood():
    import logging

    from replicator.logs import RepeatFilter

    f = RepeatFilter(window_s=60)

    def rec(msg: str) -> logging.LogRecord:
        return logging.LogRecord("replicator.librdkafka", logging.ERROR, "", 0, msg, None, None)

    connect = "FAIL [rdkafka#consumer-{}] 127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed (after {}ms)"
    passed = [f.filter(rec(connect.format(n, n % 7))) for n in range(50)]
    assert passed == [True] + [False] * 49  # the same line from many clients, timings aside
    assert f.filter(rec("FATAL [rdkafka#producer-3] fenced by a newer instance"))  # another kind passes
    f._last = {k: (when - 61, n) for k, (when, n) in f._last.items()}  # the window has passed
    r = rec(connect.format(1, 0))
    assert f.filter(r) and "49 more like it" in r.getMessage()


def test_kafka_pythons_lost_connection_is_one_line_without_a_traceback():
    import logging
    import sys

    from replicator.logs import _KafkaPythonRepeats

    try:
        None.recv(4096)  # the race kafka-python 3.0.12 logged in make test: its socket closed under it
    except AttributeError:
        r = logging.LogRecord("kafka.net.transport", logging.ERROR, "", 0, "%s: Error receiving network data "
                              "closing socket", ("<KafkaTCPTransport [none] (closed)>",), sys.exc_info())
    assert _KafkaPythonRepeats().filter(r)
    line = logging.Formatter("%(message)s").format(r)
    assert "Traceback" not in line
    assert line == ("<KafkaTCPTransport [none] (closed)>: Error receiving network data closing socket: "
                    "AttributeError: 'NoneType' object has no attribute 'recv'")
    ours = logging.LogRecord("replicator.job", logging.ERROR, "", 0, "failed", None,
                             (AttributeError, AttributeError("x"), None))
    assert _KafkaPythonRepeats().filter(ours) and ours.exc_info is not None  # our own tracebacks stay


def test_kafka_pythons_slow_step_notes_are_not_operator_warnings(caplog):
    import logging

    from replicator import logs

    logs.configure("text", "INFO")
    selector = logging.getLogger("kafka.net.selector")
    with caplog.at_level(logging.WARNING):
        selector.addHandler(caplog.handler)
        try:
            selector.warning("Task <kafka.net.selector.Task object at 0x7f> ran for 0.541s (>0.100s threshold). "
                             "It is blocking the event loop -- likely a tight sync loop inside a coroutine.")
            selector.warning("Selector got READ event without reader...")
        finally:
            selector.removeHandler(caplog.handler)
    assert [r.getMessage() for r in caplog.records] == ["Selector got READ event without reader..."]
