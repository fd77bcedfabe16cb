"""A stop signal sent to the replicator's whole process group (`timeout`, systemd's default
KillMode, a supervisor's stop-as-group) reaches Spark's JVM and the shard workers too: the stop
cannot be clean, but it must say so in one line and leave no transaction open on the target."""

from __future__ import annotations

import os
import re
import signal
import threading

from confluent_kafka import Producer

from tests.engine_checks import PARTITIONS, feeding, sample_records, target_is_stable
from tests.kafka_helpers import create_topic, produce_records
from tests.replicator_process import ReplicatorProcess, wait_until


def test_sigterm_to_the_whole_group_exits_1_with_the_fix_and_leaves_nothing_open(sandbox, unique, tmp_path):
    topic, name = f"grpterm-{unique}", f"grpterm-{unique}"
    create_topic(sandbox.source.bootstrap, topic, PARTITIONS)

    def feed(stop: threading.Event) -> None:
        producer, sent = Producer({"bootstrap.servers": sandbox.source.bootstrap, "linger.ms": 5}), 0
        while not stop.wait(0.05):
            produce_records(producer, topic, sample_records(200, sent))
            sent += 200
        producer.flush(30)

    job = ReplicatorProcess(sandbox, topic, name, tmp_path / "job.log").start()
    try:
        with feeding(feed):
            # Records flowing, so the shard tasks are inside transactions when the signal lands.
            wait_until(lambda: re.search(r"progress: [1-9]", job.log()), 240, "records copied", job)
            os.killpg(job.pid, signal.SIGTERM)
            code = job.wait(120)
    finally:
        job.sigkill()
    log = job.log()
    assert code == 1, log[-3000:]
    assert "the Spark JVM ended while the job was stopping" in log and "KillMode=mixed" in log, log[-3000:]
    assert not any(f"replicator/engine/{m}.py" in log for m in ("job", "service")), \
        "the driver's own traceback reached the log"
    target_is_stable(sandbox, topic)  # the shutdown aborted what the killed shard tasks left open
