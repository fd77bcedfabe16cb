"""The source workload and its ground truth.

- Kafka's VerifiableProducer writes unique increasing integers to an input topic and logs every
  acknowledgement: the values that must all reach the target.
- Kafka's TransactionalMessageCopier --enable-random-aborts copies each input partition into the
  replicated topic, aborting transactions at random: the source holds aborted records whose values
  are also committed later, exactly as in Kafka's own transactions system test.
- A Python transactional writer keeps a steady trickle of small transactions flowing during the
  faults, aborting every other one; the values of confirmed aborts must never be visible downstream.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from array import array
from pathlib import Path

from confluent_kafka import KafkaException, Producer

from replicator.sandbox import classpath

TOOLS = "org.apache.kafka.tools"


def _java(main: str, *args: str) -> list[str]:
    return ["java", "-Xmx256m", "-cp", classpath(), f"{TOOLS}.{main}", *args]


def verifiable_produce(bootstrap: str, topic: str, count: int, log: Path) -> array:
    """Runs VerifiableProducer to completion; returns value -> input partition for acked values
    (-1 for values never acknowledged)."""
    with open(log, "w") as out:
        proc = subprocess.run(_java("VerifiableProducer", "--topic", topic, "--max-messages", str(count),
                                    "--bootstrap-server", bootstrap, "--acks", "-1"),
                              stdout=out, stderr=subprocess.STDOUT, timeout=1800)
    assert proc.returncode == 0, f"VerifiableProducer failed, see {log}"
    partition_of = array("b", [-1]) * count
    for line in log.read_text().splitlines():
        if line.startswith("{") and '"producer_send_success"' in line:
            row = json.loads(line)
            partition_of[int(row["value"])] = row["partition"]
    return partition_of


class Copiers:
    """One TransactionalMessageCopier per input partition, with random aborts."""

    def __init__(self, bootstrap: str, input_topic: str, output_topic: str, partitions: int, logdir: Path,
                 tag: str) -> None:
        self.procs = []
        for p in range(partitions):
            log = open(logdir / f"copier-{p}.log", "w")  # noqa: SIM115 - handed to the child
            self.procs.append(subprocess.Popen(_java(
                "TransactionalMessageCopier", "--input-topic", input_topic, "--input-partition", str(p),
                "--output-topic", output_topic, "--broker-list", bootstrap, "--transactional-id",
                f"copier-{tag}-{p}", "--consumer-group", f"copier-{tag}", "--transaction-size", "200",
                "--enable-random-aborts"), stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def done(self) -> bool:
        codes = [p.poll() for p in self.procs]
        assert all(c in (None, 0) for c in codes), f"a TransactionalMessageCopier failed: exit codes {codes}"
        return all(c == 0 for c in codes)

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)


class Trickle(threading.Thread):
    """Small transactions of values "a-<seq>", every other one aborted, until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, truth: Path, tag: str) -> None:
        super().__init__(daemon=True, name="trickle")
        self.bootstrap, self.topic, self.partitions, self.tag = bootstrap, topic, partitions, tag
        self.truth = truth
        self.stop = threading.Event()
        self.committed = 0  # values of confirmed commits
        self.aborted = 0
        self.uncertain: set[int] = set()  # values whose transaction's outcome is unknown (broker bounced)
        self.error: BaseException | None = None

    def _producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"trickle-{self.tag}",
                             "linger.ms": 5, "transaction.timeout.ms": 30_000})
        producer.init_transactions(120)
        return producer

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def _run(self) -> None:
        seq, txn = 0, 0
        producer = self._producer()
        with open(self.truth, "a") as truth:
            while not self.stop.is_set():
                txn += 1
                values = list(range(seq, seq + 20))
                seq += 20
                abort = txn % 2 == 0
                try:
                    producer.begin_transaction()
                    for v in values:
                        producer.produce(self.topic, value=f"a-{v}".encode(), partition=v % self.partitions)
                    producer.flush(60)  # librdkafka + KIP-890: nothing in flight when ending a transaction
                    if abort:
                        producer.abort_transaction(60)
                        self.aborted += len(values)
                        truth.writelines(json.dumps({"aborted": f"a-{v}"}) + "\n" for v in values)
                    else:
                        producer.commit_transaction(60)
                        self.committed += len(values)
                        truth.writelines(json.dumps({"committed": f"a-{v}"}) + "\n" for v in values)
                    truth.flush()
                except KafkaException:
                    self.uncertain.update(values)
                    with contextlib.suppress(Exception):
                        del producer
                    producer = self._retry(self._producer)
                time.sleep(0.05)

    def _retry(self, factory):
        deadline = time.monotonic() + 180
        while True:
            try:
                return factory()
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
