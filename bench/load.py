"""A paced producer for steady-state runs: `rate` records/s of `size` bytes for `seconds`.

    python -m bench.load --bootstrap H:P --topic T --size 1024 --rate 5000 --seconds 20 [--shape keyed]
        [--text] [--compression lz4]

`--shape` spreads the records over partitions (bench/shapes.py; default keyed: every partition all
the time). Each record's CreateTime is set when it is handed to the client, so target-side latency
includes the source producer's own batching (5 ms linger), like any real application's would.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

from confluent_kafka import Producer

from bench import shapes
from replicator.clients.kafka_clients import with_logging

TICK_S = 0.01


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--shape", choices=shapes.SHAPES, default="keyed")
    p.add_argument("--text", action="store_true", help="compressible payloads (bench/shapes.py) instead of random")
    p.add_argument("--compression", default="none", help="the producer's compression.type")
    args = p.parse_args(argv)
    producer = Producer(with_logging({"bootstrap.servers": args.bootstrap, "linger.ms": 5, "acks": "all",
                                      "enable.idempotence": True, "queue.buffering.max.kbytes": 512 * 1024,
                                      "compression.type": args.compression}))
    payloads = itertools.cycle(shapes.text_payloads(args.size) if args.text else [os.urandom(args.size)])
    keys = shapes.keys(args.shape)
    started = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - started) < args.seconds:
        due = int(args.rate * elapsed) - sent
        for _ in range(due):
            key, payload = next(keys), next(payloads)
            while True:
                try:
                    producer.produce(args.topic, payload, key)
                    break
                except BufferError:
                    producer.poll(0.01)
        sent += max(due, 0)
        producer.poll(0)
        time.sleep(max(0.0, TICK_S - (time.monotonic() - started - elapsed)))
    producer.flush(60)
    print(f"sent {sent}", flush=True)


if __name__ == "__main__":
    main()
