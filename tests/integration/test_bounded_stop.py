"""A stop is bounded whatever is down (issue 48): SIGTERM to the job's PID with its target broker
killed ends within shutdown_timeout_seconds, and an exit code and one line that tell the truth."""

from __future__ import annotations

import re
import threading
import time

from confluent_kafka import Producer

from replicator.config import ReplicatorConfig
from replicator.engine.stop_budget import EXIT_MARGIN_S
from tests.engine_checks import PARTITIONS, feeding, sample_records, target_is_stable
from tests.kafka_helpers import create_topic, produce_records
from tests.replicator_process import ReplicatorProcess, wait_until

# The default, as the manifests run it: with the process's exit it fits their 90 s grace period.
SHUTDOWN_TIMEOUT_S = ReplicatorConfig().shutdown_timeout_seconds
BOUND_S = SHUTDOWN_TIMEOUT_S + EXIT_MARGIN_S


def _feeder(bootstrap: str, topic: str):
    def feed(stop: threading.Event) -> None:
        producer, sent = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}), 0
        while not stop.wait(0.05):
            produce_records(producer, topic, sample_records(200, sent))
            sent += 200
        producer.flush(30)
    return feed


def _copying(sandbox, topic: str, name: str, log_path) -> ReplicatorProcess:
    job = ReplicatorProcess(sandbox, topic, name, log_path).start()
    wait_until(lambda: re.search(r"progress: [1-9]", job.log()), 240, "records copied", job)
    return job


def test_stop_with_the_target_down_is_bounded_and_exits_1_saying_what_is_open(sandbox, unique, tmp_path):
    topic, name = f"bstop-{unique}", f"bstop-{unique}"
    create_topic(sandbox.source.bootstrap, topic, PARTITIONS)
    job = None
    try:
        with feeding(_feeder(sandbox.source.bootstrap, topic)):
            job = _copying(sandbox, topic, name, tmp_path / "job.log")
            sandbox.target.kill()  # by the PID the sandbox recorded
            time.sleep(3)  # the shard tasks are inside transactions that cannot commit any more
            started = time.monotonic()
            code = job.sigterm(timeout=BOUND_S + 30)  # a miss shows as the assertion below, with its time
            took = time.monotonic() - started
    finally:
        if job is not None:
            job.sigkill()
        sandbox.target.start()
    log = job.log()
    print(f"SIGTERM to exit with the target down: {took:.1f} s (bound {BOUND_S:.0f} s)")
    assert code == 1, log[-3000:]
    assert took <= BOUND_S, f"the stop took {took:.0f} s, more than {BOUND_S:.0f} s"
    lines = [line for line in log.splitlines() if "stopped, not cleanly" in line]
    assert len(lines) == 1, log[-3000:]
    assert "could not fence" in lines[0] and "the next start fences" in lines[0], lines[0]
    assert "rewinds from the target's offsets" in lines[0], lines[0]
    assert "stopped cleanly" not in log, log[-3000:]


def test_stop_with_both_clusters_up_is_clean(sandbox, unique, tmp_path):
    topic, name = f"cstop-{unique}", f"cstop-{unique}"
    create_topic(sandbox.source.bootstrap, topic, PARTITIONS)
    job = None
    try:
        with feeding(_feeder(sandbox.source.bootstrap, topic)):
            job = _copying(sandbox, topic, name, tmp_path / "job.log")
            code = job.sigterm(timeout=BOUND_S)
    finally:
        if job is not None:
            job.sigkill()
    log = job.log()
    assert code == 0, log[-3000:]
    assert "stopped cleanly" in log and "not cleanly" not in log, log[-3000:]
    target_is_stable(sandbox, topic)
