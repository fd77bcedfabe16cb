"""Back-to-back small transactions, as the copy loop commits at a light load, on one transactional id:
how many transactions' first AddPartitionsToTxn meets CONCURRENT_TRANSACTIONS (the previous commit's
markers are still being written), and what a produce -> offsets -> commit cycle then takes.

    python -m bench.txn_rhythm --bootstrap 127.0.0.1:34092 --pause-ms 0 --transactions 200

librdkafka answers CONCURRENT_TRANSACTIONS with a fixed ~20 ms wait before it registers the
partitions again (whatever `retry.backoff.ms` says), and no record of the new transaction leaves
before that. `--pause-ms` waits that long after each commit before the next transaction begins.
"""

from __future__ import annotations

import argparse
import logging
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from bench import kafka_ops
from replicator.clients.kafka_clients import with_logging


class _Counter(logging.Handler):
    """Counts librdkafka's `eos` debug lines for refused and completed partition registrations."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.refused = self.registered = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "AddPartitionsToTxn response" in text and "concurrent operation" in text:
            self.refused += 1
        elif "registered with transaction" in text:
            self.registered += 1


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", default="bench-txn-rhythm")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--records", type=int, default=20, help="records of 1 KiB per transaction")
    p.add_argument("--pause-ms", type=float, default=0.0, help="wait after each commit")
    p.add_argument("--transactions", type=int, default=200)
    args = p.parse_args(argv)
    kafka_ops.create_topic(args.bootstrap, args.topic, args.partitions)
    counter = _Counter()
    log = logging.getLogger("bench.txn_rhythm.librdkafka")
    log.setLevel(logging.DEBUG)
    log.addHandler(counter)
    log.propagate = False
    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": f"bench-txn-rhythm-{uuid.uuid4()}",
                         "linger.ms": 20, "debug": "eos", "logger": log})
    group = Consumer(with_logging({"bootstrap.servers": args.bootstrap, "group.id": "bench-txn-rhythm"}))
    producer.init_transactions(30)
    payload, cycles = b"x" * 1024, []
    for i in range(args.transactions):
        began = time.monotonic()
        producer.begin_transaction()
        for k in range(args.records):
            producer.produce(args.topic, payload, partition=k % args.partitions)
        time.sleep(0.002)  # the copy loop's commit_interval_ms
        producer.flush(10)
        producer.send_offsets_to_transaction([TopicPartition(args.topic, 0, i + 1)],
                                             group.consumer_group_metadata(), 10)
        producer.commit_transaction(10)
        cycles.append(time.monotonic() - began)
        if args.pause_ms:
            time.sleep(args.pause_ms / 1000)
    group.close()
    cycles.sort()
    print(f"pause {args.pause_ms:g} ms: {args.transactions} transactions, {counter.refused} refused first "
          f"registrations (CONCURRENT_TRANSACTIONS), {counter.registered} partition registrations; cycle without "
          f"the pause p50 {cycles[len(cycles) // 2] * 1000:.1f} ms, p90 {cycles[int(len(cycles) * 0.9)] * 1000:.1f} ms",
          flush=True)


if __name__ == "__main__":
    main()
