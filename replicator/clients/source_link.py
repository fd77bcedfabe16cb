"""Whether the source is a link away, from the copy consumer's own metadata round trips.

A shard's consumer keeps one fetch in flight per source broker, of up to `fetch.max.bytes`, and
stops fetching while `queued.max.messages.kbytes` wait in its queue: at most that much per round trip.
Beside the source a round trip is a millisecond and 16 MiB is plenty; across a 100 ms round trip it
held the copy to 69 % of its loopback rate, and with the sizes `kafka_clients` uses across a link the
copy kept 95 %. On loopback doubled sizes were 6-18 % slower (more memory to touch per fetch, as the
queue A/B found), so the larger sizes are for a source a link away only (BENCHMARKS.md, "Running
across regions").
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException

# A metadata round trip this long, the quicker of two on a connection already up, crosses a link: a
# broker beside the job answers in a millisecond or two, a busy one in a few.
LINK_S = 0.020
_TIMEOUT_S = 10.0


def round_trip_s(consumer: Consumer, topic: str) -> float | None:
    """The quicker of two metadata requests for `topic` (one round trip each once the consumer is
    connected); None when the source does not answer (the copy then finds out by itself)."""
    quickest = None
    for _ in range(2):
        began = time.monotonic()
        try:
            consumer.list_topics(topic, timeout=_TIMEOUT_S)
        except KafkaException:
            return None
        took = time.monotonic() - began
        quickest = took if quickest is None else min(quickest, took)
    return quickest


def crosses_a_link(seconds: float | None) -> bool:
    return seconds is not None and seconds >= LINK_S
