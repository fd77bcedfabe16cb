"""A continuous sample workload for the demo: keyed records with headers, in source transactions of
which some are aborted (their records must never reach the target)."""

from __future__ import annotations

import json
import random
import threading
import time

from confluent_kafka import Producer

from replicator.clients.kafka_clients import with_logging


class SampleProducer(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, partitions: int, records_per_second: int = 5_000,
                 per_transaction: int = 500, abort_every: int = 5) -> None:
        super().__init__(daemon=True, name="sample-producer")
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rate, self.per_txn, self.abort_every = records_per_second, per_transaction, abort_every
        self.committed = 0
        self.aborted = 0
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the demo
            self.error = e

    def _run(self) -> None:
        producer = Producer(with_logging({"bootstrap.servers": self.bootstrap,
                                           "transactional.id": f"demo-{self.topic}", "linger.ms": 5}))
        producer.init_transactions(60)
        rng, seq, txn = random.Random(7), 0, 0
        while not self._halt.is_set():
            started = time.monotonic()
            txn += 1
            producer.begin_transaction()
            for _ in range(self.per_txn):
                seq += 1
                customer = rng.randrange(1000)
                order = {"order": seq, "customer": customer, "amount": round(rng.uniform(1, 500), 2)}
                producer.produce(self.topic, key=f"customer-{customer}".encode(), value=json.dumps(order).encode(),
                                 partition=customer % self.partitions,
                                 headers=[("trace-id", f"{seq:012x}".encode()), ("tag", b"demo"), ("tag", b"eos")])
            producer.flush(60)  # Kafka 4.1 + librdkafka 2.16: never end a txn with records in flight
            if txn % self.abort_every == 0:
                producer.abort_transaction(60)
                self.aborted += self.per_txn
            else:
                producer.commit_transaction(60)
                self.committed += self.per_txn
            time.sleep(max(0.0, self.per_txn / self.rate - (time.monotonic() - started)))
