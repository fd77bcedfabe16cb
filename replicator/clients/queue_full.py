"""A produce() refused because librdkafka's local queue is full (`BufferError`), retried until it fits.

The copy loop catches the refusal around its positional produce() call and hands the same arguments
here, so the record it was producing is neither dropped nor produced twice, and the common path
builds nothing extra per record.
"""

from __future__ import annotations

from confluent_kafka import Producer

_DRAIN_S = 0.05


def produce_when_room(producer: Producer, args: tuple) -> None:
    """Serves delivery reports (which frees the queue) until `producer.produce(*args)` is taken."""
    while True:
        producer.poll(_DRAIN_S)
        try:
            producer.produce(*args)
            return
        except BufferError:
            continue
